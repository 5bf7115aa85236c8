// tuner/warm_start.hpp: a new problem's search begins from what measured neighbours say. History is the
// recorded surfaces of other problems of the same operation, stage and GPU (the database's trials); each
// candidate config is scored by the distance-weighted mean, over those surfaces, of log(its time / that
// surface's optimum), and the search proposes the best-scored candidates first. A learning strategy then goes
// on from those measurements; exhaustive search runs the whole space in that order (a trial budget then keeps
// the most promising). Pure: no database, no clock (the runner and `flashtune replay --warm-start` feed it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "tuner/strategy.hpp"

namespace flashtune::tuner {

/// One measured problem: its dims and dtype, and per config key the latest recorded result.
struct HistorySurface {
  std::string name;                                  ///< for the record: the problem key, "batch=2,...,dtype=bf16"
  std::map<std::string, std::int64_t> dims;
  std::string dtype;
  std::map<std::string, core::TrialResult> results;  ///< by core::Config::key()
};

/// How far apart two problems are: the sum over their dims of |log2(a / b)| where both are positive, 1 where
/// they differ otherwise (a switch such as causal, a zero against a value, a dim only one has), plus 4 when
/// the dtypes differ. 0 for the same problem.
double problem_distance(const std::map<std::string, std::int64_t>& a, const std::string& dtype_a,
                        const std::map<std::string, std::int64_t>& b, const std::string& dtype_b);

struct WarmStartSource {
  std::string name;  ///< the history surface
  double distance = 0;
  double weight = 0;  ///< exp(-sharpness x distance)
  std::string best;   ///< its fastest config (key)
};

struct WarmStart {
  std::vector<core::Config> order;       ///< the candidates, most promising first (all of them, each once)
  std::vector<WarmStartSource> sources;  ///< the surfaces that informed it, nearest first
  std::string model;                     ///< non-empty: no history; the order is this analytic model's (model_start)
  std::map<std::string, double> model_costs;  ///< with `model`: its cost per config key (those it estimates)
  bool informed() const { return !sources.empty() || !model.empty(); }
};

/// Settings: `sharpness` makes near surfaces count more (weight exp(-sharpness x distance)); a config a
/// surface recorded as failed counts as `failure_ratio` x its optimum; candidates no surface measured come
/// last, in their given order. Surfaces of the target problem itself (distance 0) and surfaces with no
/// measured time are ignored.
struct WarmStartOptions {
  double sharpness = 3.0;
  double failure_ratio = 3.0;
};

/// The candidates ordered by what `history` predicts for the target problem. Without usable history (or
/// without candidates) the order is the candidates' own and informed() is false; informed() implies a
/// non-empty order.
WarmStart warm_start(const std::vector<core::Config>& candidates, const std::map<std::string, std::int64_t>& dims,
                     const std::string& dtype, const std::vector<HistorySurface>& history,
                     const WarmStartOptions& options = {});

/// A cold start (no history) from a cost model: the candidates by `costs` (one per candidate, lowest first; ties
/// and candidates without a cost keep their given order, the latter last), named `model`. Uninformed (the given
/// order) when `costs` is not one per candidate or holds no cost at all.
WarmStart model_start(const std::vector<core::Config>& candidates, const std::vector<std::optional<double>>& costs,
                      const std::string& model);

/// Configs a learning or random search is given before its own proposals (the first of the warm order).
constexpr int kWarmSeeds = 3;

/// make_strategy, warm-started: exhaustive runs warm.order (its budget keeps the first ones); the others
/// propose the first `seeds` configs of warm.order, then their own, having observed those (settings.budget_trials
/// counts both), and a learner is given warm.model_costs as its prior (GridStrategy::set_prior: bayes's mean).
/// Without an informed warm start it is make_strategy.
std::unique_ptr<Strategy> make_warm_strategy(const core::StrategySettings& settings, std::vector<core::Config> candidates,
                                             const WarmStart& warm, int seeds = kWarmSeeds);

}  // namespace flashtune::tuner
