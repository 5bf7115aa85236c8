// tuner/strategy.hpp: search strategies behind one ask/tell interface (propose a config, observe its
// result), plus Incumbent, the best result so far. A strategy knows nothing of CUDA, files or the
// clock, so each one is tested on the CPU against synthetic cost surfaces with a known optimum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::tuner {

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::optional<core::Config> propose() = 0;                         ///< nullopt: space or budget spent
  virtual void observe(const core::Config& c, const core::TrialResult& r) = 0; ///< failed trials too
};

// Proposes the candidates in the order given, each once, and stops after budget_trials proposals
// (0: no limit). budget_seconds is NOT enforced here (a strategy has no clock): the caller stops
// asking once its own clock passes the budget.
class Exhaustive : public Strategy {
 public:
  Exhaustive(std::vector<core::Config> candidates, std::int64_t budget_trials = 0);
  std::optional<core::Config> propose() override;
  void observe(const core::Config& c, const core::TrialResult& r) override;

  std::int64_t proposed() const { return m_next; }  ///< proposals so far
 protected:
  std::vector<core::Config> m_candidates;
  std::int64_t m_budget_trials;
  std::int64_t m_next = 0;
};

// Exhaustive over a seeded random permutation of the candidates: with a trial budget smaller than the
// space, a uniform sample without replacement. The permutation depends only on the seed and the
// candidate count (mt19937_64 and a hand-written Fisher-Yates, so it is the same on every platform).
class RandomSearch : public Exhaustive {
 public:
  RandomSearch(std::vector<core::Config> candidates, std::int64_t budget_trials, std::uint64_t seed);
};

/// Names make_strategy accepts, in the order shown to users: exhaustive, random, annealing, genetic, bayes.
std::vector<std::string> strategy_names();
/// The strategies that learn from their measurements (tuner/learners.hpp): annealing, genetic, bayes.
std::vector<std::string> learning_strategy_names();
/// Whether a strategy of these settings learns from its measurements (one of learning_strategy_names()).
bool learns(const core::StrategySettings& settings);
/// Whether a strategy of these settings over `candidates` configs proposes them in an order known ahead, all of them
/// unless a budget stops it: exhaustive (in the given order, whatever its budget), or random without a smaller trial
/// budget (what a runner may compile ahead of the trials, in the space's order).
bool proposes_all(const core::StrategySettings& settings, std::size_t candidates);

// One setting of a strategy besides name, budgets and seed, given in the experiment's strategy section
// (`temperature: 0.3`) or to `flashtune replay --set temperature=0.3`.
struct StrategyOption {
  std::string name;
  double fallback = 0;      ///< value when not given
  double min = 0, max = 0;  ///< allowed range; bounds included unless min_open / max_open
  bool min_open = false, max_open = false;
  bool integer = false;     ///< only whole numbers
  std::string doc;
};
/// The settings `strategy` takes (empty for exhaustive and random). Throws core::UserError for an
/// unknown strategy (listing the known ones).
std::vector<StrategyOption> strategy_options(const std::string& strategy);
/// Why `value` is not allowed for setting `key` of `strategy` (an unknown key, out of range, not a
/// whole number), as a message without the key's name; nullopt when it is allowed.
std::optional<std::string> check_strategy_option(const std::string& strategy, const std::string& key, double value);

/// The strategy `settings.name` over `candidates` (already pruned by the constraints), honouring
/// settings.budget_trials, settings.seed and settings.options (defaults for the ones not given).
/// Throws core::UserError for an unknown name (listing the known ones), a negative budget or a bad
/// option (check_strategy_option).
std::unique_ptr<Strategy> make_strategy(const core::StrategySettings& settings, std::vector<core::Config> candidates);

// The best successful trial seen so far: status ok with a complete timing (not stopped early); the
// lowest median wins, ties keep the earlier one. Callers use it to abandon a measurement early.
class Incumbent {
 public:
  /// Considers one trial; returns true when it becomes the new best.
  bool offer(const core::Config& c, const core::TrialResult& r);

  bool has_value() const { return m_config.has_value(); }
  const std::optional<core::Config>& config() const { return m_config; }
  std::optional<double> median_ms() const;  ///< [ms] of the best trial
  const std::optional<core::TrialResult>& result() const { return m_result; }

  /// True when a trial whose time is at least `lower_bound_ms` [ms] cannot come within `slack` (0.05 =
  /// 5 %) of the best, i.e. lower_bound_ms > best * (1 + slack). False while there is no best.
  bool hopeless(double lower_bound_ms, double slack = 0.0) const;

 private:
  std::optional<core::Config> m_config;
  std::optional<core::TrialResult> m_result;
};

}  // namespace flashtune::tuner
