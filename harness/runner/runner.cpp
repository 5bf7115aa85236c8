// harness/runner/runner.cpp: one experiment (DESIGN.md "A trial, step by step"): the device set up (or compile-only
// mode), the run begun in the store with what identifies it, the copy bandwidth measured, the studies run in order
// (study_loop.hpp), and the run finished as finished, interrupted, crashed or failed.
#include "harness/runner/runner.hpp"

#include <unistd.h>

#include <atomic>
#include <optional>
#include <string>

#include "db/store.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/measure/measure.hpp"
#include "harness/runner/sources.hpp"
#include "harness/runner/study_loop.hpp"
#include "harness/runner/trial.hpp"

namespace flashtune::runner {
namespace {

std::atomic<bool> g_stop{false};  // request_stop()

// One run of an experiment: the device (or compile-only mode), the run in the store, its studies through one
// StudyLoop, and the summary.
class ExperimentRun {
 public:
  ExperimentRun(const experiment::Experiment& exp, const RunOptions& opts)
      : m_exp(exp), m_opts(opts), m_lines(opts.print), m_printer(opts.printer ? *opts.printer : m_lines) {}

  RunSummary run() {
    setup_device();
    db::Store store(m_opts.db_path);
    m_summary.run_id = store.begin_run(run_info());
    say("run " + std::to_string(m_summary.run_id) + " of '" + m_exp.name + "' on " + m_summary.device_key +
        " -> " + m_opts.db_path.string());
    if (m_gpu) {
      m_summary.copy_gbps = measure::copy_bandwidth_gbps(std::int64_t(512) << 20, m_gpu->stream, 20);
      store.set_copy_bandwidth(m_summary.run_id, m_summary.copy_gbps);
      say("device-to-device copy bandwidth: " + fixed(m_summary.copy_gbps, 0) + " GB/s (read + write)");
    }
    std::string status = "finished";
    try {
      StudyLoop loop(StudyEnv{m_exp, m_opts, store, m_limits, m_gpu ? &*m_gpu : nullptr, *m_compiler, *m_sources,
                              m_printer, g_stop, m_summary});
      for (const auto& study : m_exp.studies) {
        if (g_stop || m_summary.poisoned) break;
        loop.run(study);
      }
    } catch (...) {
      store.finish_run(m_summary.run_id, "failed");
      throw;
    }
    if (g_stop) status = "interrupted", m_summary.interrupted = true;
    if (m_summary.poisoned) status = "crashed";
    store.finish_run(m_summary.run_id, status);
    if (!m_summary.poisoned) m_printer.summary(m_summary);
    return m_summary;
  }

 private:
  void say(const std::string& line) { m_printer.progress(line); }

  void setup_device() {
    m_summary.compile_only = m_opts.compile_only;
    if (!m_opts.compile_only) {
      std::string why;
      const int n = cuda::driver_available(&why) ? cuda::device_count() : 0;
      if (n == 0 && why.empty()) why = "the NVIDIA driver reports no CUDA device";
      if (n == 0) {
        m_summary.compile_only = true;
        m_summary.no_gpu_reason = "no GPU found (" + why + ")";
        say(m_summary.no_gpu_reason + ": compile-only mode");
      } else if (m_opts.device < 0 || m_opts.device >= n) {
        throw core::UserError("--device " + std::to_string(m_opts.device) + " out of range: " + std::to_string(n) +
                              " GPU(s) found");
      }
    }
    if (m_summary.compile_only) {
      m_limits = core::DeviceLimits::for_arch(m_opts.arch.empty() ? m_exp.arch : m_opts.arch);
      m_summary.device_key = "compile-only:" + m_limits.arch;
    } else {
      m_gpu.emplace(m_opts.device);
      m_limits = m_gpu->info.limits;
      m_summary.device_key = m_gpu->info.name;
    }
    m_compiler.emplace(m_opts.cache_dir);
    m_sources.emplace(m_opts.templates);
  }

  db::RunInfo run_info() const {
    db::RunInfo r;
    r.experiment_name = m_exp.name;
    r.experiment_path = m_exp.path;
    r.experiment_hash = m_exp.text_hash;
    r.command_line = m_opts.command_line;
    r.host = host_name();
    r.nvrtc_version = jit::Compiler::nvrtc_version();
    r.cuda_version = std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
    r.project_commit = project_commit();
    r.device_key = m_summary.device_key;
    r.compile_only = m_summary.compile_only;
    r.gpu_arch = m_limits.arch;
    if (m_gpu) {
      r.gpu_name = m_gpu->info.name;
      r.gpu_uuid = m_gpu->info.uuid;
      const int v = m_gpu->info.driver_version;
      r.driver_version = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    }
    return r;
  }

  const experiment::Experiment& m_exp;
  const RunOptions& m_opts;
  LinePrinter m_lines;  // the printer when RunOptions::printer is null
  Printer& m_printer;
  RunSummary m_summary;
  core::DeviceLimits m_limits;
  std::optional<GpuSession> m_gpu;
  std::optional<jit::Compiler> m_compiler;
  std::optional<TemplateSources> m_sources;  // text and hash of each template, read once per run
};

}  // namespace

void request_stop() { g_stop = true; }
bool stop_requested() { return g_stop; }

RunSummary run_experiment(const experiment::Experiment& exp, const RunOptions& opts) {
  g_stop = false;
  ExperimentRun run(exp, opts);
  return run.run();
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("unknown");
}

}  // namespace flashtune::runner
