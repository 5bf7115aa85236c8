// harness/runner/supervisor.hpp: the processes around a run. A kernel that crashes (a sticky CUDA error) or
// hangs (past its watchdog) leaves this process without a usable GPU; the supervisor records nothing itself
// but decides what happens next: the process re-executes itself with the same arguments and resumes past
// the recorded trial. It also starts one worker process per GPU (`run --devices`).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/runner/runner.hpp"
#include "harness/runner/shard.hpp"

namespace flashtune::runner {

/// Restarts a process gives itself (FLASHTUNE_RESTARTS in the environment counts them) before giving up.
constexpr int kMaxRestarts = 64;

/// Keeps argv (null-terminated, as main received it) for the re-exec and the workers. Call once, first.
void remember_arguments(char** argv);

/// Re-executes this binary with the remembered arguments; `why` names the config's fate in the message
/// ("crashed", "timed-out"). Every descriptor but stdin/out/err is closed across exec (the driver's among
/// them), so the old context and any kernel still running in it end with the old image. Throws core::Error
/// when a stop was requested (stop_requested(): the fresh image would not know of it), after kMaxRestarts
/// restarts, or when exec fails; never returns otherwise.
[[noreturn]] void restart_after_crash(const char* why = "crashed");

/// A launch the watchdog (measure::Watchdog) waited for past its deadline; the GPU is still running it.
struct Hang {
  std::string what;     ///< what was waited for ("the validation launch", ...)
  double waited_s = 0;  ///< [s] how long
  double limit_s = 0;   ///< [s] the study's measure.watchdog_s per launch
};

/// The watchdog's exit path. `record` keeps what the run must keep (the trial in flight as timeout, the run
/// as crashed; it must not wait for the GPU), then `on_hang` (RunOptions::on_hang) runs; if it returns or is
/// empty the process ends with kHangExitStatus, without unwinding (CUDA destructors would wait for the GPU).
[[noreturn]] void end_after_hang(const Hang& hang, const std::function<void(const Hang&)>& record,
                                 const std::function<void()>& on_hang);

/// Runs the experiment in this process as `flashtune run` does: SIGINT and SIGTERM request a graceful stop
/// (request_stop), a hang re-executes the process (opts.on_hang is replaced), and so does a sticky CUDA error
/// once the run has recorded it (RunSummary::poisoned). Returns only a summary that needs no restart.
RunSummary run_supervised(const experiment::Experiment& exp, RunOptions opts);

/// `run --devices 0,1,...`: one worker process per GPU, each this binary's remembered arguments without
/// --devices, --shard and --allow-mixed-gpus, plus --device d and its share of the work as a shard (`outer`,
/// from --shard or the environment, split once more per device). The workers share the database file
/// (SQLite's locks, WAL) and restart themselves after a crash or hang as a single run does. GPUs out of
/// range, or of different models unless allow_mixed, are a core::UserError (not checked when compile_only or
/// without a driver). Returns the worst exit status of the workers (128 + signal for a killed one).
int run_on_devices(const std::vector<int>& devices, const Shard& outer, bool allow_mixed, bool compile_only);

}  // namespace flashtune::runner
