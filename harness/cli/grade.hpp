// harness/cli/grade.hpp: the GStar autograder's report (pass/fail per test case, benchmark table against
// the naive baseline) for the stages present in recorded trials.
#pragma once

#include <string>
#include <vector>

#include "harness/cli/results.hpp"

namespace flashtune::cli {

/// Stages: 2 weighted_row_sum; attn_fwd 3 non-causal, 4 causal, 5 GQA (heads_kv < heads_q), 6 sliding
/// window, 7 sinks. A test case (problem) passes when a trial of it is ok (validated against the fp64
/// reference within the pass rule), fails when trials ran and none was ok, and is "not run" when only
/// compiled. The benchmark compares the fastest attn_fwd trial with the fastest attn_naive trial of the
/// same problem and GPU.
std::string gstar_report(const std::vector<TrialRow>& trials);

}  // namespace flashtune::cli
