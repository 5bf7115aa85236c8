// harness/runner/finalists.hpp: the finalists of one problem (tuner/finalists.hpp) re-measured on the GPU: the
// fastest few of the search, interleaved round by round so drift of the GPU hits them alike; the winner
// replaces the search's best.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/experiment/experiment.hpp"
#include "harness/runner/printer.hpp"
#include "harness/runner/runner.hpp"
#include "harness/runner/trial.hpp"

namespace flashtune::runner {

/// What the re-measurement runs with: the problem's family, its uploaded data, the GPU, and where lines go.
struct FinalistsEnv {
  const kernels::KernelFamily& family;
  const core::Problem& problem;
  const core::DeviceLimits& limits;
  const jit::Compiler& compiler;
  TemplateSources& sources;
  GpuSession& gpu;
  ProblemData& data;
  const measure::Watchdog& watchdog;  ///< bounds every wait for a launch
  Printer& printer;
};

/// Round r starts at finalist r (study.strategy.finalist_rounds rounds); each slot is one measure() with 1/rounds
/// of the study's time and samples (at least one warm-up: the previous slot ran another kernel). Says each
/// finalist's median, IQR and samples and the winner; a tie within study.strategy.tie_band or the noise is
/// broken by the tuner's fixed rule and said. The winner's median, GB/s, TFLOP/s and error (from error_of, by
/// config key) replace `best`; the trials in the store keep their search measurements. A failed recompile or
/// CUDA error leaves `best` as it was (said). Returns false when a sticky CUDA error poisoned the GPU.
bool run_finalists(const FinalistsEnv& env, const experiment::Study& study, const std::vector<core::Config>& finalists,
                   const std::map<std::string, double>& error_of, BestOfProblem& best);

}  // namespace flashtune::runner
