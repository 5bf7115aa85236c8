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
#include "harness/runner/runnable.hpp"
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

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("unknown");
}

// NaN bit patterns for poisoning, as 32-bit words (two 16-bit NaNs for the half types).
std::uint32_t nan_pattern(core::DType d) {
  switch (d) {
    case core::DType::f32: return 0x7FC00000u;
    case core::DType::f16: return 0x7E007E00u;
    case core::DType::bf16: return 0x7FC07FC0u;
  }
  return 0xFFFFFFFFu;
}

std::size_t buffer_bytes(const kernels::BufferSpec& b) {
  const std::size_t raw = std::size_t(b.elements) * core::dtype_size(b.dtype);
  return (raw + 3) / 4 * 4;  // whole 32-bit words, so poisoning covers every element
}

/// Why compiled resources make the config unrunnable on the device; nullopt when they fit.
std::optional<std::string> resource_problem(const core::KernelResources& r, const kernels::LaunchShape& s,
                                            const core::DeviceLimits& d) {
  const std::int64_t threads = s.threads_per_block();
  if (r.registers > 0 && r.registers * threads > d.max_regs_per_block)
    return std::to_string(r.registers) + " registers x " + std::to_string(threads) + " threads > " +
           std::to_string(d.max_regs_per_block) + " registers per block";
  const std::int64_t smem = std::max(r.shared_static_bytes, 0) + std::int64_t(s.dynamic_smem_bytes);
  if (smem > d.max_shared_per_block_optin)
    return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B per block";
  return std::nullopt;
}

// One problem's data: host inputs and references (computed once) and the device buffers.
struct ProblemData {
  std::int64_t device_bytes() const {
    std::int64_t n = 0;
    for (const auto& b : specs) n += std::int64_t(buffer_bytes(b));
    return n;
  }
  std::vector<kernels::BufferSpec> specs;
  std::vector<kernels::HostTensor> inputs;  // inputs only, in spec order
  std::vector<kernels::HostTensor> ref64;   // outputs only, in spec order
  std::vector<kernels::HostTensor> naive;   // outputs only, same precision as the kernel
  std::vector<cuda::DeviceBuffer> buffers;  // every spec, in order
  std::uint64_t seed = 0;
};

void make_host_data(const kernels::KernelFamily& family, const core::Problem& p, std::uint64_t seed,
                    bool with_reference, ProblemData& d) {
  d.specs = family.buffers(p);
  d.seed = seed;
  d.inputs.clear(), d.ref64.clear(), d.naive.clear();
  std::uint64_t stream = 0;
  for (const auto& b : d.specs) {
    if (b.role == kernels::BufferRole::input) {
      kernels::HostTensor t{b.dtype, reference::uniform(std::size_t(b.elements), b.lo, b.hi, seed + 7919 * ++stream), {}};
      reference::round_all(b.dtype, t.values);
      d.inputs.push_back(std::move(t));
    } else if (b.role == kernels::BufferRole::output) {
      d.ref64.push_back({b.dtype, std::vector<double>(std::size_t(b.elements)), {}});
    }
  }
  if (!with_reference) return;
  d.naive = d.ref64;
  family.reference(p, d.inputs, d.ref64, kernels::RefPrecision::f64);
  family.reference(p, d.inputs, d.naive, kernels::RefPrecision::same);
  for (std::size_t i = 0; i < d.ref64.size(); ++i)
    if (d.ref64[i].checked != d.naive[i].checked)
      throw core::Error(family.name() + ".reference: the f64 and same-precision references checked different elements");
}

void upload_inputs(ProblemData& d) {
  d.buffers.clear();
  std::size_t in = 0;
  for (const auto& b : d.specs) {
    d.buffers.emplace_back(buffer_bytes(b));
    if (b.role == kernels::BufferRole::input) {
      const auto bytes = reference::pack(b.dtype, d.inputs[in++].values);
      d.buffers.back().upload(bytes.data(), bytes.size());
    }
  }
}

// Every buffer's device address, in buffers() order.
std::vector<std::uint64_t> buffer_addresses(const ProblemData& d) {
  std::vector<std::uint64_t> out;
  for (const auto& b : d.buffers) out.push_back(std::uint64_t(b.ptr()));
  return out;
}

// Everything a run keeps on the GPU. A sticky error (illegal address) poisons it for the rest of the
// process: measured on an H200 with driver 580, even a reset primary context fails to come back, so the
// run stops and the caller starts a fresh process, which resumes past the recorded crash.
struct GpuSession {
  cuda::DeviceInfo info;
  cuda::Context ctx;
  cuda::Stream stream;
  measure::L2Flusher flusher;

  explicit GpuSession(int device) : info(cuda::query_device(device)), ctx(device), stream(), flusher(info.l2_bytes) {}
};

class ExperimentRun {
 public:
  ExperimentRun(const experiment::Experiment& exp, const RunOptions& opts) : m_exp(exp), m_opts(opts) {}

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
      say("device-to-device copy bandwidth: " + fmt(m_summary.copy_gbps, 0) + " GB/s (read + write)");
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
    return m_summary;
  }

 private:
  void say(const std::string& line) const {
    if (m_opts.print) m_opts.print(line);
    else std::cerr << line << '\n';
  }
  static std::string fmt(double v, int digits) {
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(digits);
    s << v;
    return s.str();
  }

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
    m_headers = jit::template_headers(m_opts.templates);
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
    if (m_opts.warm_start && may_reorder) warm = warm_start(family, problem, configs);
    if (!warm.informed() && m_opts.cost_prior && may_reorder && tuner::learns(study.strategy))
      warm = model_start(family, problem, configs);
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
        say("   time budget of " + fmt(study.strategy.budget_seconds, 1) + " s spent");
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
                                                                 config->key(), source_of(family, *config, problem).hash,
                                                                 m_summary.device_key});
      if (claim.outcome == db::Claim::Outcome::recorded) {
        const auto& prior = *claim.recorded;
        ++m_summary.resumed;
        std::string what(core::to_string(prior.status));
        if (prior.timing) what += ", " + fmt(prior.timing->median_ms * 1000, 2) + " us";
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
      core::TrialResult result = run_trial(study, problem, *config, data);
      m_in_flight.reset();
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
      run_finalists(study, problem, data, top.configs(), error_of, *best);
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
    rec.source_hash = source_of(family, config, problem).hash;
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
                                                                 u.config.key(), source_of(family, u.config, problem).hash,
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

  // Finalists (tuner/finalists.hpp): the fastest few of the problem re-measured interleaved, round r
  // starting at finalist r, so drift of the GPU hits them alike; a tie within the noise band is broken by
  // the tuner's fixed rule and reported. Each slot is one measure() with 1/rounds of the study's time
  // and samples. The trials in the store keep their search measurements; the winner is this run's best.
  void run_finalists(const experiment::Study& study, const core::Problem& problem, ProblemData& data, const std::vector<core::Config>& finalists,
                     const std::map<std::string, double>& error_of, BestOfProblem& best) {
    const auto& family = *study.kernel;
    const int rounds = study.strategy.finalist_rounds;
    struct Ready {
      std::optional<cuda::Module> module;
      kernels::PackedArgs args;
      Launch launch;
    };
    try {
      std::vector<std::unique_ptr<Ready>> ready;  // stable addresses: each launch refers to its args
      for (const auto& c : finalists) {
        const auto compiled = m_compiler->compile(compile_request(family, c, problem));
        if (!compiled.record.ok) throw core::Error("recompiling " + c.key() + " failed");
        auto r = std::make_unique<Ready>();
        r->module.emplace(compiled.cubin);
        const CUfunction fn = r->module->function(compiled.record.lowered_name);
        r->launch = make_launch(family, c, problem, family.launch_shape(c, problem, m_limits), fn, data, r->args);
        ready.push_back(std::move(r));
      }
      core::MeasureSettings slot = study.measure;
      slot.warmup = std::max(1, slot.warmup);  // the previous slot ran another kernel
      slot.max_time_s /= rounds;
      slot.min_time_s = std::min(slot.min_time_s / rounds, slot.max_time_s);
      slot.min_samples = std::max(1, slot.min_samples / rounds);
      slot.max_samples = std::max(slot.min_samples, slot.max_samples / rounds);
      std::vector<std::vector<double>> samples(finalists.size());
      for (int i : tuner::interleaved_order(int(finalists.size()), rounds)) {
        const measure::Watchdog dog = watchdog(study);
        const Launch& l = ready[std::size_t(i)]->launch;
        const auto t = measure::measure(l.run, m_gpu->stream, slot, study.measure.cold ? &m_gpu->flusher : nullptr,
                                        std::nullopt, &dog, l.prepare);
        samples[std::size_t(i)].insert(samples[std::size_t(i)].end(), t.samples_ms.begin(), t.samples_ms.end());
      }
      const auto v = tuner::name_winner(finalists, samples, study.strategy.tie_band);
      std::string line = "   finalists, " + std::to_string(rounds) + " rounds interleaved:";
      for (std::size_t i = 0; i < finalists.size(); ++i)
        line += (i ? ";  " : "  ") + finalists[i].key() + " " + fmt(v.stats[i].median_ms * 1000, 2) + " us (IQR " +
                fmt(v.stats[i].iqr_ms * 1000, 2) + ", " + std::to_string(v.stats[i].samples) + " samples)";
      say(line);
      const core::Config& w = finalists[v.winner];
      if (v.tie()) {
        std::string with;
        for (std::size_t i : v.tied)
          if (i != v.winner) with += (with.empty() ? "" : ", ") + finalists[i].key();
        say("   tie: " + w.key() + " with " + with + " (within " + fmt(100 * study.strategy.tie_band, 1) +
            " % or the noise); winner " + w.key() + " by the tie-break (smallest config values)");
      } else {
        say("   winner: " + w.key());
      }
      const double seconds = v.stats[v.winner].median_ms * 1e-3;
      best.config = w.key();
      best.median_ms = v.stats[v.winner].median_ms;
      best.gbps = family.bytes_moved(problem) / seconds * 1e-9;
      best.tflops = family.flops(problem) / seconds * 1e-12;
      const auto err = error_of.find(w.key());
      best.max_abs_err = err == error_of.end() ? 0.0 : err->second;
    } catch (const cuda::CudaError& e) {
      if (e.is_sticky()) m_summary.poisoned = true;
      say(std::string("   finalists not re-measured: ") + e.what());
    } catch (const core::Error& e) {
      say(std::string("   finalists not re-measured: ") + e.what());
    }
  }

  // The warm start of one problem's search: every problem of the same family, stage and device measured in
  // this database (any experiment, any kernel source; per config its latest trial) is history. Says and
  // records which it drew on. Uninformed (a cold start) when there is none.
  tuner::WarmStart warm_start(const kernels::KernelFamily& family, const core::Problem& problem,
                              const std::vector<core::Config>& configs) {
    using db::sql_quote;
    const auto rows = m_store->sql(
        "SELECT p.key, p.json, c.key, t.status, t.median_ms, coalesce(t.stopped_early, 0) FROM trials t "
        "JOIN problems p ON p.id = t.problem_id JOIN configs c ON c.id = t.config_id WHERE t.family = " +
        sql_quote(family.name()) + " AND t.stage = " + sql_quote(family.stage()) + " AND t.device_key = " +
        sql_quote(m_summary.device_key) + " AND p.key <> " + sql_quote(problem.key()) + " AND t.status <> 'compiled' ORDER BY t.id");
    std::map<std::string, tuner::HistorySurface> by_problem;
    for (const auto& r : rows.rows) {
      auto& h = by_problem[r[0]];
      if (h.name.empty()) {
        h.name = r[0];
        try {
          const core::Problem p = db::problem_from_json(r[1]);
          h.dims = p.dims, h.dtype = std::string(core::to_string(p.dtype));
        } catch (const core::Error&) {  // unreadable: kept without dims, so it is far from every problem
        }
      }
      core::TrialResult t;
      t.status = core::parse_trial_status(r[3]).value_or(core::TrialStatus::launch_failed);
      if (!r[4].empty()) t.timing = core::Timing{}, t.timing->median_ms = std::stod(r[4]), t.timing->stopped_early = r[5] == "1";
      h.results[r[2]] = t;
    }
    std::vector<tuner::HistorySurface> history;
    for (auto& [key, h] : by_problem) history.push_back(std::move(h));
    auto w = tuner::warm_start(configs, problem.dims, std::string(core::to_string(problem.dtype)), history);
    if (!w.informed() || w.order.empty()) return w;
    const auto& near = w.sources.front();
    say("   warm start from " + std::to_string(w.sources.size()) + " measured problem(s); nearest " + near.name +
        " (distance " + fmt(near.distance, 2) + ", its best " + near.best + "); first: " + w.order.front().key());
    nlohmann::json sources = nlohmann::json::array(), first = nlohmann::json::array();
    for (std::size_t i = 0; i < w.sources.size() && i < 10; ++i)
      sources.push_back({{"problem", w.sources[i].name}, {"distance", w.sources[i].distance},
                         {"weight", w.sources[i].weight}, {"best", w.sources[i].best}});
    for (std::size_t i = 0; i < w.order.size() && i < std::size_t(tuner::kWarmSeeds); ++i) first.push_back(w.order[i].key());
    m_store->record_warm_start(m_summary.run_id, family.name(), family.stage(), problem.key(), sources.dump(), first.dump());
    return w;
  }

  // A cold start's order from the analytic cost model (no history): says and records it, as warm_start() does, with
  // sources [{"model": name}]. Uninformed when the model knows none of the configs.
  tuner::WarmStart model_start(const kernels::KernelFamily& family, const core::Problem& problem,
                               const std::vector<core::Config>& configs) {
    std::vector<std::optional<double>> costs;
    for (const auto& c : configs) costs.push_back(kernels::estimate_cost(family.name(), c, problem, m_limits));
    auto w = tuner::model_start(configs, costs, kernels::kCostModelName);
    if (!w.informed()) return w;
    say("   cold start from the " + w.model + " (no history); first: " + w.order.front().key());
    nlohmann::json sources = nlohmann::json::array({{{"model", w.model}}}), first = nlohmann::json::array();
    for (std::size_t i = 0; i < w.order.size() && i < std::size_t(tuner::kWarmSeeds); ++i) first.push_back(w.order[i].key());
    m_store->record_warm_start(m_summary.run_id, family.name(), family.stage(), problem.key(), sources.dump(), first.dump());
    return w;
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
                                     source_of(family, c, problem).hash, m_summary.device_key))
        continue;
      reqs.push_back(compile_request(family, c, problem));
    }
    if (reqs.size() > 1) m_compiler->prefetch(std::move(reqs), unsigned(m_opts.prefetch_threads));
  }

  // The template config compiles from, its text and source hash, read once per file in a run.
  struct TemplateSource {
    std::string file, text, hash;
  };
  const TemplateSource& source_of(const kernels::KernelFamily& family, const core::Config& config,
                                  const core::Problem& problem) {
    const std::string file = family.template_file_for(config, problem);
    auto it = m_sources.find(file);
    if (it == m_sources.end())
      it = m_sources.emplace(file, TemplateSource{file, jit::load_template(file, m_opts.templates),
                                                  template_source_hash(file, m_opts.templates)}).first;
    return it->second;
  }

  jit::CompileRequest compile_request(const kernels::KernelFamily& family, const core::Config& config,
                                      const core::Problem& problem) {
    const auto spec = family.specialize(config, problem);
    const TemplateSource& source = source_of(family, config, problem);
    jit::CompileRequest req;
    req.source = source.text;
    req.source_name = source.file;
    req.name_expression = spec.name_expression;
    req.defines = spec.defines;
    req.arch = m_limits.arch;
    req.headers = m_headers;
    return req;
  }

  // One launch of a loaded kernel on the problem's buffers, and the untimed work before it (kernels::bind_launch).
  // `args` (filled here) must outlive the returned functions, and so must `config` and `problem`.
  using Launch = kernels::BoundLaunch;
  Launch make_launch(const kernels::KernelFamily& family, const core::Config& config, const core::Problem& problem,
                     const kernels::LaunchShape& shape, CUfunction fn, const ProblemData& data, kernels::PackedArgs& args) const {
    return kernels::bind_launch(family, config, problem, shape, fn, buffer_addresses(data), args);
  }

  std::string describe(const core::TrialResult& r) const {
    std::string s(core::to_string(r.status));
    if (r.status == TrialStatus::ok && r.timing) {
      s += "  " + fmt(r.timing->median_ms * 1000, 2) + " us  " + fmt(r.gbps, 0) + " GB/s";
      if (r.timing->stopped_early && m_early_exit)
        s += "  stopped early (> " + fmt(m_early_exit->factor, 2) + " x the best, " + fmt(m_early_exit->incumbent_ms * 1000, 2) + " us)";
      if (m_summary.copy_gbps > 0) s += " (" + fmt(100 * r.gbps / m_summary.copy_gbps, 1) + "% of copy)";
      if (r.tflops >= 0.1) s += "  " + fmt(r.tflops, 1) + " TFLOP/s";
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
           " B spilled" + (r.compile->cache_hit ? ", cached" : ", " + fmt(r.compile->compile_ms, 0) + " ms");
    }
    return s;
  }

  core::TrialResult run_trial(const experiment::Study& study, const core::Problem& problem, const core::Config& config,
                              ProblemData& data) {
    const auto& family = *study.kernel;
    core::TrialResult r;
    if (auto why = family.can_run(config, problem, m_limits)) {
      r.status = TrialStatus::invalid_config, r.reason = *why;
      return r;
    }
    const auto shape = family.launch_shape(config, problem, m_limits);
    jit::CompileOutput compiled;
    try {
      compiled = m_compiler->compile(compile_request(family, config, problem));
    } catch (const std::exception& e) {
      r.status = TrialStatus::compile_failed, r.reason = e.what();
      return r;
    }
    r.compile = compiled.record;
    if (!compiled.record.ok) {
      r.status = TrialStatus::compile_failed, r.reason = jit::first_error_line(compiled.record.log);
      return r;
    }
    if (auto why = resource_problem(compiled.record.resources, shape, m_limits)) {
      r.status = TrialStatus::resource_exceeded, r.reason = *why;
      return r;
    }
    if (!m_gpu) {
      r.status = TrialStatus::compiled;
      return r;
    }
    if (m_in_flight) m_in_flight->result.compile = compiled.record;
    try {
      launch_and_measure(study, problem, config, shape, compiled, data, r);
    } catch (const cuda::CudaError& e) {
      r.status = e.is_sticky() ? TrialStatus::crashed : TrialStatus::launch_failed;
      r.reason = e.what();
      r.timing.reset();
      if (e.is_sticky()) {
        m_summary.poisoned = true;
        say("   sticky CUDA error: the GPU context is lost for this process; stopping (a rerun resumes)");
      }
    } catch (const core::Error& e) {
      r.status = TrialStatus::launch_failed, r.reason = e.what();
      r.timing.reset();
    }
    return r;
  }

  void launch_and_measure(const experiment::Study& study, const core::Problem& problem, const core::Config& config,
                          const kernels::LaunchShape& shape, const jit::CompileOutput& compiled, ProblemData& data,
                          core::TrialResult& r) {
    const auto& family = *study.kernel;
    cuda::Module module(compiled.cubin);
    CUfunction fn = module.function(compiled.record.lowered_name);
    const auto loaded = cuda::function_resources(fn);
    if (auto why = resource_problem(loaded, shape, m_limits)) {
      r.status = TrialStatus::resource_exceeded, r.reason = *why;
      return;
    }
    r.device_bytes = data.device_bytes();
    CUstream stream = m_gpu->stream.get();
    kernels::PackedArgs args;
    const Launch launch = make_launch(family, config, problem, shape, fn, data, args);
    // Workspaces start every trial zeroed (untimed); a kernel that keeps state there between its launches (a
    // scheduler's counters) leaves it as it found it.
    for (std::size_t i = 0; i < data.specs.size(); ++i)
      if (data.specs[i].role == kernels::BufferRole::workspace) data.buffers[i].fill_bytes(0, stream);

    if (m_exp.validate.enabled) {
      for (std::size_t i = 0; i < data.specs.size(); ++i)
        if (data.specs[i].role == kernels::BufferRole::output)
          data.buffers[i].fill_u32(nan_pattern(data.specs[i].dtype), stream);
      if (launch.prepare) launch.prepare(stream);
      launch.run(stream);
      watchdog(study).wait([&] { return m_gpu->stream.query(); }, 1, "the validation launch");
      core::Validation worst;
      std::size_t out = 0;
      const double atol = m_exp.validate.atol >= 0 ? m_exp.validate.atol : family.default_atol(problem);
      for (std::size_t i = 0; i < data.specs.size(); ++i) {
        if (data.specs[i].role != kernels::BufferRole::output) continue;
        const auto& b = data.specs[i];
        std::vector<unsigned char> bytes(std::size_t(b.elements) * core::dtype_size(b.dtype));
        data.buffers[i].download(bytes.data(), bytes.size(), stream);
        const auto got = reference::unpack(b.dtype, bytes.data(), std::size_t(b.elements));
        // At least one ulp of a 16-bit output at the largest reference magnitude (reference/compare.hpp).
        const double out_atol = reference::storage_atol(b.dtype, data.ref64[out].values, atol);
        const auto v = reference::compare(got, data.ref64[out].values, data.naive[out].values, out_atol,
                                          data.ref64[out].checked);
        ++out;
        if (!worst.checked || !v.passed || v.max_abs_err > worst.max_abs_err) {
          const bool keep_failed = worst.checked && !worst.passed && v.passed;
          if (!keep_failed) worst = v;
        }
        worst.checked = true;
      }
      r.validation = worst;
      if (!worst.passed) {
        r.status = TrialStatus::incorrect;
        r.reason = "max abs error " + std::to_string(worst.max_abs_err) + " > tolerance " +
                   std::to_string(worst.tolerance) + ", " + std::to_string(worst.nan_count) + " NaN/Inf";
        return;
      }
    }
    const measure::Watchdog dog = watchdog(study);
    r.timing = measure::measure(launch.run, m_gpu->stream, study.measure,
                                study.measure.cold ? &m_gpu->flusher : nullptr, m_early_exit, &dog, launch.prepare);
    const double seconds = r.timing->median_ms * 1e-3;
    r.gbps = family.bytes_moved(problem) / seconds * 1e-9;
    r.tflops = family.flops(problem) / seconds * 1e-12;
    r.status = TrialStatus::ok;
  }

  // The watchdog of a study's launches. Past its deadline the GPU is still running the kernel, so nothing
  // that waits for the GPU may run again in this process (freeing memory or unloading the module blocks):
  // the trial in flight is recorded as timeout, the run marked crashed, and RunOptions::on_hang restarts
  // the process (the CLI re-executes itself, as after a sticky error), which resumes past the trial.
  measure::Watchdog watchdog(const experiment::Study& study) {
    const double limit = study.measure.watchdog_s;
    return measure::Watchdog(limit, [this, limit](const std::string& what, double waited) {
      if (m_in_flight) {
        db::TrialRecord rec = *m_in_flight;
        rec.result.status = TrialStatus::timeout;
        rec.result.reason = what + " did not complete within " + fmt(waited, 1) + " s (watchdog_s: " + fmt(limit, 1) +
                            " s per launch)";
        m_store->record_trial(rec);
        say("   " + rec.config.key() + ": timeout: " + rec.result.reason);
      } else {
        say("   " + what + " did not complete within " + fmt(waited, 1) + " s (watchdog_s: " + fmt(limit, 1) + " s)");
      }
      m_store->finish_run(m_summary.run_id, "crashed");
      say("   the GPU is busy with that kernel for the rest of this process; stopping (a rerun resumes)");
      if (m_opts.on_hang) m_opts.on_hang();
      std::_Exit(kHangExitStatus);
    });
  }

  const experiment::Experiment& m_exp;
  const RunOptions& m_opts;
  std::int64_t m_next_unit = 0;  // the next work unit's number (RunOptions::shard)
  std::optional<db::TrialRecord> m_in_flight;  // the trial being run on the GPU (all but its result)
  RunSummary m_summary;
  core::DeviceLimits m_limits;
  std::optional<GpuSession> m_gpu;
  std::optional<jit::Compiler> m_compiler;
  std::vector<jit::TemplateFile> m_headers;
  db::Store* m_store = nullptr;
  std::map<std::string, TemplateSource> m_sources;  // by file name: text and hash, read once per run
  std::optional<measure::EarlyExit> m_early_exit;  // for the trial in flight; nullopt: measure to the end
};

}  // namespace

void request_stop() { g_stop = true; }

std::string template_source_hash(const std::string& file, const std::optional<std::filesystem::path>& templates) {
  // The file and, transitively, every template it includes: editing a shared header changes the hash.
  auto headers = jit::template_headers(templates);
  if (std::none_of(headers.begin(), headers.end(), [&](const jit::TemplateFile& t) { return t.name == file; }))
    headers.push_back({file, jit::load_template(file, templates)});  // not in the table; unknown: the error names it
  std::string all;
  for (const auto& t : jit::include_closure({file}, headers)) all += t.name + '\n' + t.text + '\n';
  return core::hash_hex(all);
}

RunSummary run_experiment(const experiment::Experiment& exp, const RunOptions& opts) {
  g_stop = false;
  ExperimentRun run(exp, opts);
  return run.run();
}

}  // namespace flashtune::runner
