// harness/cli/grade.hpp: the GStar autograder's report (pass/fail per test case, benchmark table against
// the naive baseline) for the stages present in recorded trials.
#pragma once

#include <string>
#include <vector>

#include "db/store.hpp"
#include "harness/cli/results.hpp"

namespace flashtune::cli {

/// Stages: 2 weighted_row_sum; attn_fwd 3 non-causal, 4 causal, 5 GQA (heads_kv < heads_q), 6 sliding
/// window, 7 sinks. A test case (problem) passes when a trial of it is ok (validated against the fp64
/// reference within the pass rule), fails when trials ran and none was ok, and is "not run" when only
/// compiled. The benchmark compares the fastest attn_fwd trial with the fastest attn_naive trial of the
/// same problem and GPU. Stages 8 (backward) and 9 (backward with a window or sinks): every problem that
/// has attn_bwd_* trials, checked per gradient as the optional grader does (forward, D, dQ, dK, dV, and
/// d(sink) with learned sinks), then the tuned forward, backward (sum of its stage winners) and their sum.
/// *failed (when given) receives the number of failed test cases and checks.
/// Peers (`flashtune peers`; the latest per problem, GPU, pass and peer) measured on a benchmarked case join its
/// table: each measured one as a row and "x faster than" line, the others with their status and reason; a forward
/// case measured by a peer but by no naive baseline gets its table too.
std::string gstar_report(const std::vector<TrialRow>& trials, int* failed = nullptr,
                         const std::vector<db::PeerRow>& peers = {});

}  // namespace flashtune::cli
