// harness/runner/runner.hpp: runs an experiment, trial by trial: propose -> can_run -> JIT -> resources ->
// inputs and poison -> validate against the Eigen reference -> measure -> record (committed) -> observe.
// The runner is the one boundary where exceptions become a TrialStatus (STYLE.md, Errors 3).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "harness/runner/printer.hpp"
#include "harness/runner/shard.hpp"

namespace flashtune::experiment {
struct Experiment;
}

namespace flashtune::runner {

const char* project_commit();  ///< git commit the binary was built from ("-dirty" when modified)
std::string host_name();       ///< this machine's host name ("unknown" when the system does not say), recorded per run

struct RunOptions {
  std::filesystem::path db_path = "db/flashtune.sqlite";
  int device = 0;                                  ///< GPU ordinal
  bool compile_only = false;                       ///< forced on when no GPU is found
  std::string arch;                                ///< compile-only target; empty: the experiment's
  std::optional<std::filesystem::path> templates;  ///< kernel template override folder
  std::optional<std::filesystem::path> cache_dir;  ///< CUBIN cache; nullopt: no cache
  /// Threads that compile an exhaustive search's configs ahead of the GPU (jit::Compiler::prefetch):
  /// 0 = all cores but one, -1 = none (each config compiled when its turn comes).
  int prefetch_threads = 0;
  std::string command_line;                        ///< recorded with the run
  bool verbose = false;                            ///< also print each trial's registers, spills, compile time
  std::function<void(const std::string&)> print;   ///< where progress lines go (stderr when empty); no summary
  /// Where progress lines and the end-of-run summary go (printer.hpp); not owned, must outlive the run.
  /// Null: a LinePrinter over `print`.
  Printer* printer = nullptr;
  /// This process's share of the work (shard.hpp). Units: one per (problem, config) for exhaustive and
  /// random, whose proposals do not depend on results, so the shards together run exactly the configs of
  /// one unsharded run (budgets included); one per (study, problem) for the learning strategies.
  Shard shard;
  /// Called after a launch passed its watchdog (MeasureSettings::watchdog_s) and the trial was recorded
  /// as timeout: the GPU is still busy with it, so the process must end (supervisor.hpp, end_after_hang).
  /// It should not return (run_supervised re-executes the process to resume); if it does, or is empty, the
  /// process exits with kHangExitStatus.
  std::function<void()> on_hang;
  /// Begin each search from the database's measured neighbours (tuner/warm_start.hpp): same family, stage
  /// and device, other problems. Not for a sharded exhaustive or random study (each shard must propose the
  /// same sequence, and shards may write different databases).
  bool warm_start = true;
  /// Without history (no warm start), begin a learning search from the analytic cost model's order
  /// (harness/kernels/cost_model.hpp) where the family has one; recorded in warm_starts like a warm start.
  bool cost_prior = true;
};

/// Exit status of a process whose kernel hung past the watchdog and that was not restarted.
constexpr int kHangExitStatus = 3;

struct BestOfProblem {
  std::string family, stage, problem, config, device_key;
  double median_ms = 0, gbps = 0, tflops = 0, max_abs_err = 0;
};

struct RunSummary {
  std::int64_t run_id = 0;
  bool compile_only = false;
  std::string device_key;        ///< GPU name, or "compile-only:<arch>"
  std::string no_gpu_reason;     ///< why compile-only was forced (empty when not forced)
  double copy_gbps = 0;          ///< [GB/s] measured device-to-device copy (0 in compile-only)
  std::int64_t proposed = 0;     ///< configs the strategies proposed
  std::int64_t resumed = 0;      ///< skipped: already recorded for the same kernel source and device
  std::int64_t claimed_elsewhere = 0;  ///< skipped: another process running the same experiment into the db has it
  std::int64_t other_shards = 0; ///< configs proposed but left to other shards
  std::int64_t pruned_by_constraints = 0;
  /// Configs that passed the constraints but cannot run on the device (KernelFamily::can_run): never
  /// proposed to a strategy (budgets count runnable trials only), recorded invalid_config with the reason.
  std::int64_t cannot_run = 0;
  std::map<std::string, std::int64_t> cannot_run_by_reason;  ///< reason kind (digits as #) -> configs
  std::map<std::string, std::int64_t> by_status;  ///< status name -> trials recorded in this run
  std::vector<BestOfProblem> best;                ///< per (study, problem): this run's fastest passing config
  bool interrupted = false;
  bool poisoned = false;  ///< a sticky CUDA error ended GPU work in this process; a new process resumes
};

/// Runs every study of the experiment and records every trial in the store at opts.db_path. Progress goes to
/// the printer as it happens, and the summary at the end unless the run was poisoned (the process restarts).
/// Throws core::UserError for user mistakes found late (device ordinal out of range, bad arch).
RunSummary run_experiment(const experiment::Experiment& exp, const RunOptions& opts);

/// Requests a graceful stop: the trial in flight finishes and is recorded, the run is marked interrupted.
void request_stop();
/// Whether request_stop() was called (a SIGINT / SIGTERM of a supervised run) since the run began.
bool stop_requested();

/// Content hash of a template and the templates it includes ("#include \"x.cuh\""), used to tell
/// kernel sources apart when resuming.
std::string template_source_hash(const std::string& file, const std::optional<std::filesystem::path>& templates);

}  // namespace flashtune::runner
