// harness/runner/runner.cpp: one experiment, trial by trial (DESIGN.md "A trial, step by step").
// Inputs are drawn fresh (random seed recorded) once per problem and run; outputs are poisoned with NaN
// before every checked launch; every trial is committed to the store as soon as it ends.
#include "harness/runner/runner.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>

#include "db/store.hpp"
#include "harness/cuda/buffer.hpp"
#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/module.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/cost_model.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/launch.hpp"
#include "harness/measure/measure.hpp"
#include "harness/measure/watchdog.hpp"
#include "harness/runner/finalists.hpp"
#include "harness/runner/runnable.hpp"
#include "harness/runner/search_start.hpp"
#include "harness/runner/supervisor.hpp"
#include "harness/runner/trial.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"
#include "tuner/constraint.hpp"
#include "tuner/finalists.hpp"
#include "tuner/space.hpp"
#include "tuner/strategy.hpp"
#include "tuner/warm_start.hpp"

namespace flashtune::runner {
namespace {

using core::TrialStatus;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class ExperimentRun {
 public:
  ExperimentRun(const experiment::Experiment& exp, const RunOptions& opts)
      : m_exp(exp), m_opts(opts), m_lines(opts.print), m_printer(opts.printer ? *opts.printer : m_lines) {}

  RunSummary run() {
    setup_device();
    db::Store store(m_opts.db_path);
    m_store = &store;
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
      for (const auto& study : m_exp.studies) {
        if (g_stop || m_summary.poisoned) break;
        run_study(study);
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

  void run_study(const experiment::Study& study) {
    const auto& family = *study.kernel;
    const tuner::ConstraintSet constraints = experiment::constraint_set(study);

    for (const auto& problem : study.problems) {
      if (g_stop || m_summary.poisoned) return;
      std::int64_t pruned = 0;
      auto configs = tuner::enumerate(study.space, [&](const core::Config& c) {
        const bool keep = !constraints.violated(c, problem);
        pruned += !keep;
        return keep;
      });
      m_summary.pruned_by_constraints += pruned;
      // Work units of this problem (RunOptions::shard): the whole problem for a learning strategy, each
      // config (by its enumeration index) otherwise. Numbered the same in every shard.
      const bool learns = tuner::learns(study.strategy);
      const std::int64_t first_unit = m_next_unit;
      m_next_unit += learns ? 1 : std::int64_t(configs.size());
      std::string share;
      const auto& shard = m_opts.shard;
      if (shard.sharded()) {
        std::int64_t mine = 0;
        for (std::size_t j = 0; j < configs.size(); ++j) mine += shard.owns(learns ? first_unit : first_unit + std::int64_t(j));
        share = "; shard " + shard.text() + " takes " + std::to_string(mine) + (learns ? " (the whole problem)" : "");
        if (mine == 0) {
          say("== " + family.name() + "/" + family.stage() + " " + problem.key() + ": left to the other shards");
          continue;
        }
      }
      say("== " + family.name() + "/" + family.stage() + " " + problem.key() + ": " + std::to_string(configs.size()) +
          " configs (" + std::to_string(pruned) + " pruned by constraints), strategy " + study.strategy.name + share);
      run_problem(study, problem, std::move(configs), learns ? -1 : first_unit);
    }
  }

  void run_problem(const experiment::Study& study, const core::Problem& problem, std::vector<core::Config> configs,
                   std::int64_t first_unit) {
    const auto& family = *study.kernel;
    // first_unit >= 0: each config is a unit (its enumeration index from first_unit); only this shard's are run.
    std::map<std::string, std::int64_t> unit_of;
    std::size_t total = configs.size();
    if (first_unit >= 0 && m_opts.shard.sharded()) {
      total = 0;
      for (std::size_t j = 0; j < configs.size(); ++j) {
        unit_of[configs[j].key()] = first_unit + std::int64_t(j);
        total += m_opts.shard.owns(first_unit + std::int64_t(j));
      }
    }
    // Strategies see only the configs that can run on this device: budgets count runnable trials, and
    // the others are recorded invalid_config with their reason here, once, by the shard that owns them.
    const RunnableSplit split = split_runnable(family, configs, problem, m_limits);
    record_unrunnable(study, problem, split, unit_of, total);
    configs = split.runnable;
    prefetch_compiles(study, problem, configs, unit_of);
    tuner::WarmStart warm;
    const bool may_reorder = !(first_unit >= 0 && m_opts.shard.sharded());
    const StartEnv start{*m_store, m_summary.run_id, m_summary.device_key, m_limits, m_printer};
    if (m_opts.warm_start && may_reorder) warm = warm_start(start, family, problem, configs);
    if (!warm.informed() && m_opts.cost_prior && may_reorder && tuner::learns(study.strategy))
      warm = model_start(start, family, problem, configs);
    auto strategy = tuner::make_warm_strategy(study.strategy, std::move(configs), warm);
    const auto t0 = Clock::now();
    ProblemData data;
    bool data_ready = false;
    std::optional<BestOfProblem> best;
    tuner::TopConfigs top(study.strategy.finalists);  // candidates for the interleaved re-measurement
    std::map<std::string, double> error_of;            // config key -> max abs error, for the winner's row
    std::size_t n = 0;

    while (!g_stop) {
      if (study.strategy.budget_seconds > 0 && seconds_since(t0) > study.strategy.budget_seconds) {
        say("   time budget of " + fixed(study.strategy.budget_seconds, 1) + " s spent");
        break;
      }
      auto config = strategy->propose();
      if (!config) break;
      if (!unit_of.empty() && !m_opts.shard.owns(unit_of.at(config->key()))) {
        ++m_summary.other_shards;  // exhaustive and random ignore observations: nothing to tell them
        continue;
      }
      ++n, ++m_summary.proposed;
      const std::string progress = "[" + std::to_string(n) + "/" + std::to_string(total) + "] ";
      // Claimed before it runs (db::Store::claim_trial): another process running the same experiment into
      // this database skips what this one took, and the reverse, so no trial is run and recorded twice.
      const auto claim = m_store->claim_trial(m_summary.run_id, {m_exp.name, family.stage(), family.name(), problem.key(),
                                                                 config->key(), m_sources->of(family, *config, problem).hash,
                                                                 m_summary.device_key});
      if (claim.outcome == db::Claim::Outcome::recorded) {
        const auto& prior = *claim.recorded;
        ++m_summary.resumed;
        std::string what(core::to_string(prior.status));
        if (prior.timing) what += ", " + fixed(prior.timing->median_ms * 1000, 2) + " us";
        say(progress + config->key() + ": already recorded (" + what + "), skipped");
        strategy->observe(*config, prior);  // a learning strategy learns the recorded time too
        continue;
      }
      if (claim.outcome == db::Claim::Outcome::taken) {
        ++m_summary.claimed_elsewhere;
        say(progress + config->key() + ": claimed by " + claim.holder + ", which is running it; skipped");
        strategy->observe(*config, core::TrialResult{});  // visited: ok without a time teaches nothing
        continue;
      }
      if (m_gpu && !data_ready) {
        const std::uint64_t seed = m_exp.validate.seed ? m_exp.validate.seed : std::random_device{}() | 1ull;
        make_host_data(family, problem, seed, m_exp.validate.enabled, data);
        upload_inputs(data);
        data_ready = true;
      }
      // Early exit: with k = strategy.early_exit, a measurement stops once its median passes k x the best.
      m_early_exit.reset();
      if (study.strategy.early_exit > 1 && best) m_early_exit = measure::EarlyExit{best->median_ms, study.strategy.early_exit};
      db::TrialRecord rec = trial_record(family, problem, *config);
      rec.seed = data.seed;
      m_in_flight = rec;  // what the watchdog records should this trial never finish
      const measure::Watchdog dog = watchdog(study);
      std::optional<TrialGpu> gpu;
      if (m_gpu)
        gpu.emplace(TrialGpu{*m_gpu, data, m_exp.validate, study.measure, m_early_exit, &dog,
                             [this](const core::CompileRecord& c) { m_in_flight->result.compile = c; }});
      core::TrialResult result =
          run_trial(TrialSpec{family, *config, problem, m_limits}, *m_compiler, *m_sources, gpu ? &*gpu : nullptr);
      m_in_flight.reset();
      if (result.status == TrialStatus::crashed) {
        m_summary.poisoned = true;
        say("   sticky CUDA error: the GPU context is lost for this process; stopping (a rerun resumes)");
      }
      rec.result = result;
      m_store->record_trial(rec);
      ++m_summary.by_status[std::string(core::to_string(result.status))];
      strategy->observe(*config, result);
      say(progress + config->key() + ": " + describe(result));
      top.offer(*config, result);
      if (result.status == TrialStatus::ok && result.validation) error_of[config->key()] = result.validation->max_abs_err;
      if (result.status == TrialStatus::ok && !result.timing->stopped_early && (!best || result.timing->median_ms < best->median_ms)) {
        best = BestOfProblem{family.name(), family.stage(), problem.key(), config->key(), m_summary.device_key,
                             result.timing->median_ms, result.gbps, result.tflops,
                             result.validation ? result.validation->max_abs_err : 0.0};
      }
      if (m_summary.poisoned) break;
    }
    m_early_exit.reset();
    if (best && m_gpu && !g_stop && !m_summary.poisoned && top.entries().size() > 1)
      m_summary.poisoned = !run_finalists(FinalistsEnv{family, problem, m_limits, *m_compiler, *m_sources, *m_gpu, data,
                                                       watchdog(study), m_printer},
                                          study, top.configs(), error_of, *best);
    if (best) m_summary.best.push_back(*best);
  }

  // A trial of this run: its keys filled in, its result empty.
  db::TrialRecord trial_record(const kernels::KernelFamily& family, const core::Problem& problem, const core::Config& config) {
    db::TrialRecord rec;
    rec.run_id = m_summary.run_id;
    rec.experiment_name = m_exp.name;
    rec.family = family.name();
    rec.stage = family.stage();
    rec.problem = problem;
    rec.config = config;
    rec.source_hash = m_sources->of(family, config, problem).hash;
    rec.device_key = m_summary.device_key;
    return rec;
  }

  // The configs of `split` that cannot run: recorded invalid_config (unless recorded before, or claimed
  // by another process), counted by kind of reason, and left out of `total` (the runnable ones to run).
  void record_unrunnable(const experiment::Study& study, const core::Problem& problem, const RunnableSplit& split, const std::map<std::string, std::int64_t>& unit_of,
                         std::size_t& total) {
    const auto& family = *study.kernel;
    RunnableSplit mine;  // this shard's
    std::int64_t recorded = 0;
    for (const auto& u : split.unrunnable) {
      if (!unit_of.empty() && !m_opts.shard.owns(unit_of.at(u.config.key()))) continue;
      mine.unrunnable.push_back(u);
      const auto claim = m_store->claim_trial(m_summary.run_id, {m_exp.name, family.stage(), family.name(), problem.key(),
                                                                 u.config.key(), m_sources->of(family, u.config, problem).hash,
                                                                 m_summary.device_key});
      if (claim.outcome != db::Claim::Outcome::claimed) continue;
      db::TrialRecord rec = trial_record(family, problem, u.config);
      rec.result.status = TrialStatus::invalid_config;
      rec.result.reason = u.reason;
      m_store->record_trial(rec);
      ++recorded;
      ++m_summary.by_status[std::string(core::to_string(TrialStatus::invalid_config))];
    }
    const auto n = std::int64_t(mine.unrunnable.size());
    if (n == 0) return;
    total -= std::min<std::size_t>(total, std::size_t(n));
    m_summary.cannot_run += n;
    for (const auto& [kind, k] : mine.by_reason()) m_summary.cannot_run_by_reason[kind] += k;
    say("   " + std::to_string(n) + " configs cannot run on " + m_summary.device_key + ", not proposed (" +
        std::to_string(recorded) + " recorded invalid_config now, " + std::to_string(n - recorded) +
        " before or by another run): " + mine.summary());
  }

  // Parallel NVRTC ahead of the GPU: when the strategy will propose every config of the problem (exhaustive,
  // or random without a smaller trial budget), the compiles of those this process will run (its shard's,
  // runnable on the device, not yet recorded) are queued on all CPU cores but one, in the order the space
  // lists them; run_trial()'s compile then finds each one done or in progress. A learning strategy picks
  // its configs one by one, so its compiles are not guessed ahead.
  void prefetch_compiles(const experiment::Study& study, const core::Problem& problem, const std::vector<core::Config>& configs, const std::map<std::string, std::int64_t>& unit_of) {
    const auto& st = study.strategy;
    if (!tuner::proposes_all(st, configs.size()) || m_opts.prefetch_threads < 0) return;
    const auto& family = *study.kernel;
    std::vector<jit::CompileRequest> reqs;
    for (const auto& c : configs) {
      if (!unit_of.empty() && !m_opts.shard.owns(unit_of.at(c.key()))) continue;
      if (family.can_run(c, problem, m_limits)) continue;
      if (m_store->find_trial_result(m_exp.name, family.stage(), family.name(), problem.key(), c.key(),
                                     m_sources->of(family, c, problem).hash, m_summary.device_key))
        continue;
      reqs.push_back(m_sources->request(family, c, problem, m_limits.arch));
    }
    if (reqs.size() > 1) m_compiler->prefetch(std::move(reqs), unsigned(m_opts.prefetch_threads));
  }

  std::string describe(const core::TrialResult& r) const {
    std::string s(core::to_string(r.status));
    if (r.status == TrialStatus::ok && r.timing) {
      s += "  " + fixed(r.timing->median_ms * 1000, 2) + " us  " + fixed(r.gbps, 0) + " GB/s";
      if (r.timing->stopped_early && m_early_exit)
        s += "  stopped early (> " + fixed(m_early_exit->factor, 2) + " x the best, " + fixed(m_early_exit->incumbent_ms * 1000, 2) + " us)";
      if (m_summary.copy_gbps > 0) s += " (" + fixed(100 * r.gbps / m_summary.copy_gbps, 1) + "% of copy)";
      if (r.tflops >= 0.1) s += "  " + fixed(r.tflops, 1) + " TFLOP/s";
      if (r.validation) {
        char err[32];
        std::snprintf(err, sizeof err, "%.2e", r.validation->max_abs_err);
        s += std::string("  max err ") + err;
      }
    } else if (!r.reason.empty()) {
      s += ": " + r.reason;
    }
    // Compile resources: always in compile-only runs (they are the result), on request (-v) otherwise.
    if (r.compile && r.compile->ok && (r.status == TrialStatus::compiled || m_opts.verbose)) {
      const auto& res = r.compile->resources;
      s += "  " + std::to_string(res.registers) + " regs, " + std::to_string(std::max(res.spill_store_bytes, 0)) +
           " B spilled" + (r.compile->cache_hit ? ", cached" : ", " + fixed(r.compile->compile_ms, 0) + " ms");
    }
    return s;
  }

  // The watchdog of a study's launches. Past its deadline the GPU is still running the kernel, so nothing
  // that waits for the GPU may run again in this process (freeing memory or unloading the module blocks):
  // the supervisor's exit path (end_after_hang) has the trial in flight recorded as timeout and the run as
  // crashed here, then ends the process through RunOptions::on_hang; a new process resumes past the trial.
  measure::Watchdog watchdog(const experiment::Study& study) {
    const double limit = study.measure.watchdog_s;
    return measure::Watchdog(limit, [this, limit](const std::string& what, double waited) {
      end_after_hang(Hang{what, waited, limit}, [this](const Hang& h) { record_hang(h); }, m_opts.on_hang);
    });
  }

  // What a hang leaves in the store: the trial in flight as timeout (when there is one), the run as crashed.
  void record_hang(const Hang& h) {
    if (m_in_flight) {
      db::TrialRecord rec = *m_in_flight;
      rec.result.status = TrialStatus::timeout;
      rec.result.reason = h.what + " did not complete within " + fixed(h.waited_s, 1) + " s (watchdog_s: " +
                          fixed(h.limit_s, 1) + " s per launch)";
      m_store->record_trial(rec);
      say("   " + rec.config.key() + ": timeout: " + rec.result.reason);
    } else {
      say("   " + h.what + " did not complete within " + fixed(h.waited_s, 1) + " s (watchdog_s: " + fixed(h.limit_s, 1) + " s)");
    }
    m_store->finish_run(m_summary.run_id, "crashed");
    say("   the GPU is busy with that kernel for the rest of this process; stopping (a rerun resumes)");
  }

  const experiment::Experiment& m_exp;
  const RunOptions& m_opts;
  LinePrinter m_lines;  // the printer when RunOptions::printer is null
  Printer& m_printer;
  std::int64_t m_next_unit = 0;  // the next work unit's number (RunOptions::shard)
  std::optional<db::TrialRecord> m_in_flight;  // the trial being run on the GPU (all but its result)
  RunSummary m_summary;
  core::DeviceLimits m_limits;
  std::optional<GpuSession> m_gpu;
  std::optional<jit::Compiler> m_compiler;
  db::Store* m_store = nullptr;
  std::optional<TemplateSources> m_sources;  // text and hash of each template, read once per run
  std::optional<measure::EarlyExit> m_early_exit;  // for the trial in flight; nullopt: measure to the end
};

}  // namespace

void request_stop() { g_stop = true; }

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
