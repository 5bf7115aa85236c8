// harness/cli/results.hpp: questions asked of recorded trials (compare two runs, convergence, one config
// across problems, the best per problem) computed in C++ over the typed rows of db::Store::trials(). Shared by the
// query, export, grade and report subcommands so they all agree on "best" and "noise".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "db/rows.hpp"
#include "harness/cli/table.hpp"

namespace flashtune::cli {

// One recorded trial, as db::Store::trials() reads it.
using db::TrialRow;

/// A problem key the user typed, "batch=8,seq_q=256,dtype=f32" -> {batch: 8, seq_q: 256}; dtype goes to *dtype (when
/// given). Throws core::UserError for a value that is not an integer. Recorded rows carry theirs typed (TrialRow::shape).
std::map<std::string, std::int64_t> parse_dims(const std::string& problem_key, std::string* dtype = nullptr);
/// A config key the user typed, "block_m=64,num_warps=4" -> {block_m: 64, num_warps: 4} (TrialRow::tunables typed).
std::map<std::string, std::int64_t> parse_config(const std::string& config_key);

/// The fastest measured trial per (family, stage, problem, gpu), ordered by those keys.
std::vector<TrialRow> best_per_problem(const std::vector<TrialRow>& trials);

/// Verdict of B against A for one config: the relative difference (b - a) / a against the combined
/// noise band sqrt(noise_a^2 + noise_b^2) (each the trial's relative noise, as nvbench's compare does
/// with its noise columns). |diff| <= band: "same"; else "faster" (B quicker) or "slower".
std::string compare_verdict(double a_ms, double a_noise, double b_ms, double b_noise);

/// Config-by-config comparison of run B against run A, matched on (family, stage, problem, config);
/// the last measured trial of each key counts. Each row ends with both trials' SM clocks [MHz] and the difference
/// in cycles (median x clock; where both clocks were recorded). *summary receives one line of totals and the
/// geometric mean time ratio B/A over configs measured in both, and the clock and cycle ratios over those with
/// clocks.
Table compare_runs(const std::vector<TrialRow>& a, const std::vector<TrialRow>& b, std::string* summary);

/// One trial on the way to a (family, stage, problem)'s best: the best-so-far median after it.
struct ConvergenceRow {
  TrialRow trial;
  std::string strategy;                 ///< strategy_of(family), "unknown" when absent
  int index = 0;                        ///< 1-based within its (family, stage, problem), every trial counted, failed ones too
  std::optional<double> best_so_far_ms; ///< [ms] the fastest measured median up to and including this trial
  bool improved = false;                ///< this trial set best_so_far_ms
};
/// Every trial's ConvergenceRow, grouped by (family, stage, problem) in order of each group's first trial, the
/// trials of a group in recorded order; strategy_of(family) names the strategy.
std::vector<ConvergenceRow> convergence(const std::vector<TrialRow>& trials,
                                        const std::map<std::string, std::string>& strategy_of);
/// `query convergence`'s table of those rows: family, stage, problem, strategy, trial, config, status, median_ms,
/// best_so_far_ms, improved.
Table convergence_table(const std::vector<ConvergenceRow>& rows);

/// How one config did on every problem it was measured on: its median, the best config's median there
/// and the ratio (1.0 = it was the best), per (stage, problem, gpu).
Table config_across_problems(const std::vector<TrialRow>& trials, const std::string& family,
                             const std::string& config_key);

/// Every trial of one problem, measured ones fastest first (rank), each with its slowdown against the
/// fastest of its stage and GPU; failed trials after them with their reasons.
Table problem_configs(const std::vector<TrialRow>& trials, const std::string& family, const std::string& problem_key);

/// One problem's backward from its stage winners (`winner(family)`: nullptr when none): the summed medians
/// of the fastest complete way among attn_bwd_preprocess + attn_bwd_dkdv + attn_bwd_dq, attn_bwd_preprocess +
/// attn_bwd_fused, attn_bwd_dq_delta + attn_bwd_dkdv (the preprocess fused into dQ) and attn_bwd_fused_delta (the
/// preprocess fused into the fused pass), plus attn_bwd_dsink
/// with learned sinks; and the largest allocation of one stage [bytes]; nullopt when no way is complete.
struct BackwardSum {
  double ms = 0;
  std::int64_t peak_bytes = 0;
  std::size_t stages = 0;
  bool fused = false;                 ///< dK, dV, dQ came from one pass (attn_bwd_fused or attn_bwd_fused_delta)
  std::vector<std::string> families;  ///< the stages summed, in launch order
};
std::optional<BackwardSum> backward_sum(bool learned_sinks,
                                        const std::function<const TrialRow*(const std::string& family)>& winner);
/// learned_sinks != 0 in the problem.
bool has_learned_sinks(const core::Problem& problem);

/// The fastest measured trial of attn_fwd and of each attn_bwd_* stage per (problem key, gpu), by family.
std::map<std::pair<std::string, std::string>, std::map<std::string, TrialRow>> stage_winners(
    const std::vector<TrialRow>& trials);

/// The backward's end-to-end score, per (problem, gpu) where every backward stage has a measured trial:
/// the sum of the stage winners' medians (the fastest way of backward_sum(), + attn_bwd_dsink with learned
/// sinks), the forward's winner beside it, and forward + backward. TFLOP/s count the forward's
/// FLOPs (from its trial) and 2.5x them for the backward (DESIGN.md). Each stage was timed alone with a cold
/// L2, so the sum is what a training step pays for these launches, up to launch gaps and L2 reuse.
Table backward_end_to_end(const std::vector<TrialRow>& trials);

/// The peers flashtune.peers knows (`flashtune peers`), in the order tables list them.
const std::vector<std::string>& known_peers();
/// The latest peer measurement per (problem, gpu, pass, peer), ordered by those keys (fwd before bwd, peers in
/// known_peers() order, unknown names after them by name).
std::vector<db::PeerRow> latest_peers(const std::vector<db::PeerRow>& peers);

/// printf-style "%.<digits>g" of v; "" when absent.
std::string num(std::optional<double> v, int digits = 5);

}  // namespace flashtune::cli
