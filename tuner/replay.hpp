// tuner/replay.hpp: proving strategies offline. A Surface is the recorded outcome of every config of a
// space (an exhaustive run, or a synthetic stand-in): a time, or a failure. replay() runs a strategy
// against it with many seeds, answering each proposal from the record (no GPU, no clock), and reports
// how many evaluations it needed to come within 1 / 3 / 5 % of the optimum and the methodology score
//   P = (random_baseline - found) / (random_baseline - optimum)
// at a budget (0: as good as random search with the same budget, 1: the optimum), where found is the
// mean over seeds of the best time found within the budget and random_baseline the exact expected best
// of random search with that budget. (Score after Willemsen, van Werkhoven, van Nieuwpoort: "A
// methodology for comparing optimization algorithms for auto-tuning", FGCS 2024.)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "tuner/warm_start.hpp"

namespace flashtune::tuner {

struct Surface {
  std::string name;                       ///< for reports: "attn_fwd batch=4,... run 3", "synthetic ..."
  std::vector<core::Config> configs;      ///< the space as recorded, each config once
  std::vector<core::TrialResult> results; ///< per config: status, and a timing when ok
  /// Where it was recorded (empty for synthetic surfaces): what makes other surfaces its history.
  std::string family, stage, problem, device_key, dtype;  ///< problem: core::Problem::key()
  std::map<std::string, std::int64_t> dims;

  std::size_t valid() const;   ///< configs with status ok and a time
  double optimum_ms() const;   ///< [ms] lowest time; throws core::UserError when nothing is valid
  double slowest_ms() const;   ///< [ms] highest time; throws core::UserError when nothing is valid
  /// Per config, the time a search is credited with: its time when valid, else slowest_ms() (so a
  /// search that found nothing valid yet scores the slowest valid config).
  std::vector<double> credited_ms() const;
};

/// Expected lowest of `budget` values drawn uniformly without replacement from `values`, exactly:
/// sum over the ascending values v_(i) of v_(i) * C(N - i, B - 1) / C(N, B). Throws core::Error when
/// budget is not in [1, N].
double expected_best_of_random(std::vector<double> values, std::int64_t budget);

struct ReplayOptions {
  core::StrategySettings strategy;  ///< seed k (0-based) runs with strategy.seed + k; its budgets are ignored
  int seeds = 20;
  std::int64_t budget = 0;          ///< evaluations at which found and P are taken; 0: 20 % of the space, rounded down
  std::int64_t max_evals = 0;       ///< evaluations per seed at most; 0: the whole space
  std::vector<double> thresholds{0.01, 0.03, 0.05};  ///< within (1 + t) x optimum
  /// When set and informed: every seed's search is warm-started from it (make_warm_strategy).
  std::optional<WarmStart> warm;
};

struct SeedOutcome {
  std::uint64_t seed = 0;
  std::vector<std::int64_t> evals_to;  ///< per threshold: evaluations until within it; 0: not within max_evals
  double found_ms = 0;                 ///< [ms] best credited time within the budget
  std::int64_t evaluations = 0;        ///< evaluations run
};

struct ReplayReport {
  std::string surface, strategy;
  std::int64_t space = 0, valid = 0, budget = 0, max_evals = 0;
  int seeds = 0;
  double optimum_ms = 0, random_baseline_ms = 0;
  std::vector<double> thresholds;
  std::vector<double> evals_mean;         ///< per threshold: mean evaluations needed (not reached: max_evals)
  std::vector<double> reached;            ///< per threshold: fraction of seeds that got within it at all
  std::vector<double> reached_by_budget;  ///< per threshold: fraction of seeds within it after `budget` evaluations
  double found_mean_ms = 0;               ///< [ms] mean over seeds of the best within the budget
  double gap_mean = 0;                    ///< found_mean_ms / optimum_ms - 1
  double score = 0;                       ///< P of found_mean_ms; NaN when random_baseline == optimum
  double score_stdev = 0;                 ///< standard deviation of the per-seed P
  std::vector<SeedOutcome> per_seed;
};

/// The bar of issue 5 on one surface, read literally: the best learning strategy reaches within
/// `within` of the optimum using at most `max_fraction` of the trials (at least one trial: on a surface of
/// fewer than 1 / max_fraction configs the first trial may be the one), averaged over at least
/// `min_seeds` seeds (its mean evaluations to within `within` <= max_fraction x the space), and beats
/// random search at equal budget (P > 0 at a budget of at most max_fraction of the space). The best
/// learning strategy is the one with the fewest mean evaluations to within `within`.
struct BarVerdict {
  std::string surface, strategy;  ///< the best learning strategy; empty when none was replayed
  double evals_fraction = 0;      ///< its mean evaluations to within `within`, over the space (NaN: not a threshold)
  double gap = 0;                 ///< its mean gap to the optimum at the budget (0.01 = 1 %)
  double within_at_budget = 0;    ///< fraction of its seeds within `within` at the budget
  double score = 0;               ///< its P at the budget
  bool pass = false;
  std::string line;               ///< one sentence saying all of the above, and why it fails if it does
};
BarVerdict judge_bar(const std::vector<ReplayReport>& reports, double within = 0.03, double max_fraction = 0.2,
                     int min_seeds = 20);

/// Runs `options.seeds` searches of options.strategy over `surface`. Each proposal is answered with
/// the recorded result of that config (a strategy that proposes a config the surface lacks is a
/// core::Error). Deterministic: the same surface and options give the same report. Throws
/// core::UserError for an empty or all-failed surface, seeds < 1 or a budget outside [1, space].
ReplayReport replay(const Surface& surface, const ReplayOptions& options);

}  // namespace flashtune::tuner
