// harness/runner/study_loop.hpp: one study of a run, problem by problem: the configs enumerated and pruned by the
// constraints, this shard's share, the unrunnable ones recorded, compiles prefetched, the search started (warm or
// model start), then propose -> claim -> trial (trial.hpp) -> record -> observe within the study's budgets, and the
// finalists re-measured. The run around it (device, store, begin and finish) is runner.cpp's.
#pragma once

#include <atomic>
#include <cstdint>

#include "db/store.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/runner/printer.hpp"
#include "harness/runner/runner.hpp"
#include "harness/runner/sources.hpp"
#include "harness/runner/trial.hpp"

namespace flashtune::runner {

/// What a study loop runs with, set up by the run (runner.cpp); what it refers to must outlive the StudyLoop.
struct StudyEnv {
  const experiment::Experiment& exp;  ///< its name (recorded with each trial) and validate settings
  const RunOptions& opts;             ///< shard, warm_start, cost_prior, prefetch_threads, verbose, on_hang
  db::Store& store;                   ///< where trials are claimed and recorded (each committed as it ends)
  const core::DeviceLimits& limits;   ///< the GPU's, or in compile-only mode the target arch's
  GpuSession* gpu = nullptr;          ///< null: compile-only (each trial ends at `compiled`)
  const jit::Compiler& compiler;
  TemplateSources& sources;
  Printer& printer;                   ///< progress lines
  const std::atomic<bool>& stop;      ///< set by request_stop(): the trial in flight is recorded, nothing new starts
  /// The run's summary: run_id, device_key and copy_gbps are read; the loop adds its counts and each problem's
  /// best, and sets poisoned when a sticky CUDA error ends this process's GPU work.
  RunSummary& summary;
};

/// The run's studies, one call per study in the experiment's order: the work units of RunOptions::shard are
/// numbered on from one study to the next, the same in every shard.
class StudyLoop {
 public:
  explicit StudyLoop(StudyEnv env) : m_env(env) {}

  /// Runs every problem of `study`, stopping before the next problem once env.stop or summary.poisoned is set.
  /// A problem whose work units all belong to other shards is said and skipped.
  void run(const experiment::Study& study);

 private:
  StudyEnv m_env;
  std::int64_t m_next_unit = 0;  // the next work unit's number (RunOptions::shard)
};

}  // namespace flashtune::runner
