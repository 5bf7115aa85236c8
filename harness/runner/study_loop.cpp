// harness/runner/study_loop.cpp: one study of a run, problem by problem (study_loop.hpp; DESIGN.md "A trial, step
// by step"). Inputs are drawn fresh (random seed recorded) once per problem and run; every trial is committed to
// the store as soon as it ends.
#include "harness/runner/study_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "harness/measure/watchdog.hpp"
#include "harness/runner/finalists.hpp"
#include "harness/runner/runnable.hpp"
#include "harness/runner/search_start.hpp"
#include "harness/runner/supervisor.hpp"
#include "tuner/constraint.hpp"
#include "tuner/finalists.hpp"
#include "tuner/space.hpp"
#include "tuner/strategy.hpp"
#include "tuner/warm_start.hpp"

namespace flashtune::runner {
namespace {

using core::TrialStatus;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One problem of a study searched: its configs, the shard's share of them, and the trial in flight.
class ProblemSearch {
 public:
  ProblemSearch(const StudyEnv& env, const experiment::Study& study, const core::Problem& problem)
      : m_env(env), m_study(study), m_family(*study.kernel), m_problem(problem) {}

  // Searches `configs` (the problem's, pruned by the constraints) to the end of the strategy or a budget, then
  // re-measures the finalists. first_unit >= 0: each config is a work unit (its enumeration index from first_unit)
  // and only this shard's are run; -1: the whole problem is this shard's.
  void run(std::vector<core::Config> configs, std::int64_t first_unit);

 private:
  void say(const std::string& line) { m_env.printer.progress(line); }
  // Whether this process runs `config` (RunOptions::shard): always unless each config is a work unit.
  bool owned(const core::Config& config) const {
    return m_unit_of.empty() || m_env.opts.shard.owns(m_unit_of.at(config.key()));
  }
  db::ResumeKey resume_key(const core::Config& config);
  db::TrialRecord trial_record(const core::Config& config);
  void record_unrunnable(const RunnableSplit& split, std::size_t& total);
  void prefetch_compiles(const std::vector<core::Config>& configs);
  std::string describe(const core::TrialResult& r) const;
  measure::Watchdog watchdog();
  void record_hang(const Hang& h);

  const StudyEnv& m_env;
  const experiment::Study& m_study;
  const kernels::KernelFamily& m_family;
  const core::Problem& m_problem;
  std::map<std::string, std::int64_t> m_unit_of;  // config key -> work unit, when each config is one (sharded)
  std::optional<db::TrialRecord> m_in_flight;      // the trial being run on the GPU (all but its result)
  std::optional<measure::EarlyExit> m_early_exit;  // for the trial in flight; nullopt: measure to the end
};

void ProblemSearch::run(std::vector<core::Config> configs, std::int64_t first_unit) {
  RunSummary& summary = m_env.summary;
  std::size_t total = configs.size();
  if (first_unit >= 0 && m_env.opts.shard.sharded()) {
    total = 0;
    for (std::size_t j = 0; j < configs.size(); ++j) {
      m_unit_of[configs[j].key()] = first_unit + std::int64_t(j);
      total += m_env.opts.shard.owns(first_unit + std::int64_t(j));
    }
  }
  // Strategies see only the configs that can run on this device: budgets count runnable trials, and
  // the others are recorded invalid_config with their reason here, once, by the shard that owns them.
  const RunnableSplit split = split_runnable(m_family, configs, m_problem, m_env.limits);
  record_unrunnable(split, total);
  configs = split.runnable;
  prefetch_compiles(configs);
  tuner::WarmStart warm;
  const bool may_reorder = !(first_unit >= 0 && m_env.opts.shard.sharded());
  const StartEnv start{m_env.store, summary.run_id, summary.device_key, m_env.limits, m_env.printer};
  if (m_env.opts.warm_start && may_reorder) warm = warm_start(start, m_family, m_problem, configs);
  if (!warm.informed() && m_env.opts.cost_prior && may_reorder && tuner::learns(m_study.strategy))
    warm = model_start(start, m_family, m_problem, configs);
  auto strategy = tuner::make_warm_strategy(m_study.strategy, std::move(configs), warm);
  const auto t0 = Clock::now();
  ProblemData data;
  bool data_ready = false;
  std::optional<BestOfProblem> best;
  tuner::TopConfigs top(m_study.strategy.finalists);  // candidates for the interleaved re-measurement
  std::map<std::string, double> error_of;              // config key -> max abs error, for the winner's row
  std::size_t n = 0;

  while (!m_env.stop) {
    if (m_study.strategy.budget_seconds > 0 && seconds_since(t0) > m_study.strategy.budget_seconds) {
      say("   time budget of " + fixed(m_study.strategy.budget_seconds, 1) + " s spent");
      break;
    }
    auto config = strategy->propose();
    if (!config) break;
    if (!owned(*config)) {
      ++summary.other_shards;  // exhaustive and random ignore observations: nothing to tell them
      continue;
    }
    ++n, ++summary.proposed;
    const std::string progress = "[" + std::to_string(n) + "/" + std::to_string(total) + "] ";
    // Claimed before it runs (db::Store::claim_trial): another process running the same experiment into
    // this database skips what this one took, and the reverse, so no trial is run and recorded twice.
    const auto claim = m_env.store.claim_trial(summary.run_id, resume_key(*config));
    if (claim.outcome == db::Claim::Outcome::recorded) {
      const auto& prior = *claim.recorded;
      ++summary.resumed;
      std::string what(core::to_string(prior.status));
      if (prior.timing) what += ", " + fixed(prior.timing->median_ms * 1000, 2) + " us";
      say(progress + config->key() + ": already recorded (" + what + "), skipped");
      strategy->observe(*config, prior);  // a learning strategy learns the recorded time too
      continue;
    }
    if (claim.outcome == db::Claim::Outcome::taken) {
      ++summary.claimed_elsewhere;
      say(progress + config->key() + ": claimed by " + claim.holder + ", which is running it; skipped");
      strategy->observe(*config, core::TrialResult{});  // visited: ok without a time teaches nothing
      continue;
    }
    if (m_env.gpu && !data_ready) {
      const auto& validate = m_env.exp.validate;
      const std::uint64_t seed = validate.seed ? validate.seed : std::random_device{}() | 1ull;
      make_host_data(m_family, m_problem, seed, validate.enabled, data);
      upload_inputs(data);
      data_ready = true;
    }
    // Early exit: with k = strategy.early_exit, a measurement stops once its median passes k x the best.
    m_early_exit.reset();
    if (m_study.strategy.early_exit > 1 && best)
      m_early_exit = measure::EarlyExit{best->median_ms, m_study.strategy.early_exit};
    db::TrialRecord rec = trial_record(*config);
    rec.seed = data.seed;
    m_in_flight = rec;  // what the watchdog records should this trial never finish
    const measure::Watchdog dog = watchdog();
    std::optional<TrialGpu> gpu;
    if (m_env.gpu)
      gpu.emplace(TrialGpu{*m_env.gpu, data, m_env.exp.validate, m_study.measure, m_early_exit, &dog,
                           [this](const core::CompileRecord& c) { m_in_flight->result.compile = c; }});
    core::TrialResult result = run_trial(TrialSpec{m_family, *config, m_problem, m_env.limits}, m_env.compiler,
                                         m_env.sources, gpu ? &*gpu : nullptr);
    m_in_flight.reset();
    if (result.status == TrialStatus::crashed) {
      summary.poisoned = true;
      say("   sticky CUDA error: the GPU context is lost for this process; stopping (a rerun resumes)");
    }
    rec.result = result;
    m_env.store.record_trial(rec);
    ++summary.by_status[std::string(core::to_string(result.status))];
    strategy->observe(*config, result);
    say(progress + config->key() + ": " + describe(result));
    top.offer(*config, result);
    if (result.status == TrialStatus::ok && result.validation) error_of[config->key()] = result.validation->max_abs_err;
    if (result.status == TrialStatus::ok && !result.timing->stopped_early && (!best || result.timing->median_ms < best->median_ms)) {
      best = BestOfProblem{m_family.name(), m_family.stage(), m_problem.key(), config->key(), summary.device_key,
                           result.timing->median_ms, result.gbps, result.tflops,
                           result.validation ? result.validation->max_abs_err : 0.0};
    }
    if (summary.poisoned) break;
  }
  m_early_exit.reset();
  if (best && m_env.gpu && !m_env.stop && !summary.poisoned && top.entries().size() > 1)
    summary.poisoned = !run_finalists(FinalistsEnv{m_family, m_problem, m_env.limits, m_env.compiler, m_env.sources,
                                                   *m_env.gpu, data, watchdog(), m_env.printer},
                                      m_study, top.configs(), error_of, *best);
  if (best) summary.best.push_back(*best);
}

// What identifies a trial of `config` of this problem for resuming and claiming.
db::ResumeKey ProblemSearch::resume_key(const core::Config& config) {
  return {m_env.exp.name, m_family.stage(), m_family.name(), m_problem.key(), config.key(),
          m_env.sources.of(m_family, config, m_problem).hash, m_env.summary.device_key};
}

// A trial of this run: its keys filled in, its result empty.
db::TrialRecord ProblemSearch::trial_record(const core::Config& config) {
  db::TrialRecord rec;
  rec.run_id = m_env.summary.run_id;
  rec.experiment_name = m_env.exp.name;
  rec.family = m_family.name();
  rec.stage = m_family.stage();
  rec.problem = m_problem;
  rec.config = config;
  rec.source_hash = m_env.sources.of(m_family, config, m_problem).hash;
  rec.device_key = m_env.summary.device_key;
  return rec;
}

// The configs of `split` that cannot run: recorded invalid_config (unless recorded before, or claimed
// by another process), counted by kind of reason, and left out of `total` (the runnable ones to run).
void ProblemSearch::record_unrunnable(const RunnableSplit& split, std::size_t& total) {
  RunSummary& summary = m_env.summary;
  RunnableSplit mine;  // this shard's
  std::int64_t recorded = 0;
  for (const auto& u : split.unrunnable) {
    if (!owned(u.config)) continue;
    mine.unrunnable.push_back(u);
    const auto claim = m_env.store.claim_trial(summary.run_id, resume_key(u.config));
    if (claim.outcome != db::Claim::Outcome::claimed) continue;
    db::TrialRecord rec = trial_record(u.config);
    rec.result.status = TrialStatus::invalid_config;
    rec.result.reason = u.reason;
    m_env.store.record_trial(rec);
    ++recorded;
    ++summary.by_status[std::string(core::to_string(TrialStatus::invalid_config))];
  }
  const auto n = std::int64_t(mine.unrunnable.size());
  if (n == 0) return;
  total -= std::min<std::size_t>(total, std::size_t(n));
  summary.cannot_run += n;
  for (const auto& [kind, k] : mine.by_reason()) summary.cannot_run_by_reason[kind] += k;
  say("   " + std::to_string(n) + " configs cannot run on " + summary.device_key + ", not proposed (" +
      std::to_string(recorded) + " recorded invalid_config now, " + std::to_string(n - recorded) +
      " before or by another run): " + mine.summary());
}

// Parallel NVRTC ahead of the GPU: when the strategy will propose every config of the problem (exhaustive,
// or random without a smaller trial budget), the compiles of those this process will run (its shard's,
// runnable on the device, not yet recorded) are queued on all CPU cores but one, in the order the space
// lists them; run_trial()'s compile then finds each one done or in progress. A learning strategy picks
// its configs one by one, so its compiles are not guessed ahead.
void ProblemSearch::prefetch_compiles(const std::vector<core::Config>& configs) {
  if (!tuner::proposes_all(m_study.strategy, configs.size()) || m_env.opts.prefetch_threads < 0) return;
  std::vector<jit::CompileRequest> reqs;
  for (const auto& c : configs) {
    if (!owned(c)) continue;
    if (m_family.can_run(c, m_problem, m_env.limits)) continue;
    const db::ResumeKey key = resume_key(c);
    if (m_env.store.find_trial_result(key.experiment_name, key.stage, key.family, key.problem_key, key.config_key,
                                      key.source_hash, key.device_key))
      continue;
    reqs.push_back(m_env.sources.request(m_family, c, m_problem, m_env.limits.arch));
  }
  if (reqs.size() > 1) m_env.compiler.prefetch(std::move(reqs), unsigned(m_env.opts.prefetch_threads));
}

// A trial's progress line after its config key: status, time, bandwidth, error, and compile resources.
std::string ProblemSearch::describe(const core::TrialResult& r) const {
  std::string s(core::to_string(r.status));
  if (r.status == TrialStatus::ok && r.timing) {
    s += "  " + fixed(r.timing->median_ms * 1000, 2) + " us  " + fixed(r.gbps, 0) + " GB/s";
    if (r.timing->stopped_early && m_early_exit)
      s += "  stopped early (> " + fixed(m_early_exit->factor, 2) + " x the best, " + fixed(m_early_exit->incumbent_ms * 1000, 2) + " us)";
    if (m_env.summary.copy_gbps > 0) s += " (" + fixed(100 * r.gbps / m_env.summary.copy_gbps, 1) + "% of copy)";
    if (r.tflops >= 0.1) s += "  " + fixed(r.tflops, 1) + " TFLOP/s";
    if (r.timing->sm_clock_mhz) {  // the clock the samples ran at, and how often the power cap held it down
      s += "  " + fixed(*r.timing->sm_clock_mhz, 0) + " MHz";
      if (r.timing->power_capped && *r.timing->power_capped > 0) s += " (power cap " + fixed(100 * *r.timing->power_capped, 0) + "%)";
    }
    if (r.validation) {
      char err[32];
      std::snprintf(err, sizeof err, "%.2e", r.validation->max_abs_err);
      s += std::string("  max err ") + err;
    }
  } else if (!r.reason.empty()) {
    s += ": " + r.reason;
  }
  // Compile resources: always in compile-only runs (they are the result), on request (-v) otherwise.
  if (r.compile && r.compile->ok && (r.status == TrialStatus::compiled || m_env.opts.verbose)) {
    const auto& res = r.compile->resources;
    s += "  " + std::to_string(res.registers) + " regs, " + std::to_string(std::max(res.spill_store_bytes, 0)) +
         " B spilled" + (r.compile->cache_hit ? ", cached" : ", " + fixed(r.compile->compile_ms, 0) + " ms");
  }
  return s;
}

// The watchdog of the study's launches. Past its deadline the GPU is still running the kernel, so nothing
// that waits for the GPU may run again in this process (freeing memory or unloading the module blocks):
// the supervisor's exit path (end_after_hang) has the trial in flight recorded as timeout and the run as
// crashed here, then ends the process through RunOptions::on_hang; a new process resumes past the trial.
measure::Watchdog ProblemSearch::watchdog() {
  const double limit = m_study.measure.watchdog_s;
  return measure::Watchdog(limit, [this, limit](const std::string& what, double waited) {
    end_after_hang(Hang{what, waited, limit}, [this](const Hang& h) { record_hang(h); }, m_env.opts.on_hang);
  });
}

// What a hang leaves in the store: the trial in flight as timeout (when there is one), the run as crashed.
void ProblemSearch::record_hang(const Hang& h) {
  if (m_in_flight) {
    db::TrialRecord rec = *m_in_flight;
    rec.result.status = TrialStatus::timeout;
    rec.result.reason = h.what + " did not complete within " + fixed(h.waited_s, 1) + " s (watchdog_s: " +
                        fixed(h.limit_s, 1) + " s per launch)";
    m_env.store.record_trial(rec);
    say("   " + rec.config.key() + ": timeout: " + rec.result.reason);
  } else {
    say("   " + h.what + " did not complete within " + fixed(h.waited_s, 1) + " s (watchdog_s: " + fixed(h.limit_s, 1) + " s)");
  }
  m_env.store.finish_run(m_env.summary.run_id, "crashed");
  say("   the GPU is busy with that kernel for the rest of this process; stopping (a rerun resumes)");
}

}  // namespace

void StudyLoop::run(const experiment::Study& study) {
  const auto& family = *study.kernel;
  const tuner::ConstraintSet constraints = experiment::constraint_set(study);

  for (const auto& problem : study.problems) {
    if (m_env.stop || m_env.summary.poisoned) return;
    std::int64_t pruned = 0;
    auto configs = tuner::enumerate(study.space, [&](const core::Config& c) {
      const bool keep = !constraints.violated(c, problem);
      pruned += !keep;
      return keep;
    });
    m_env.summary.pruned_by_constraints += pruned;
    // Work units of this problem (RunOptions::shard): the whole problem for a learning strategy, each
    // config (by its enumeration index) otherwise. Numbered the same in every shard.
    const bool learns = tuner::learns(study.strategy);
    const std::int64_t first_unit = m_next_unit;
    m_next_unit += learns ? 1 : std::int64_t(configs.size());
    std::string share;
    const auto& shard = m_env.opts.shard;
    if (shard.sharded()) {
      std::int64_t mine = 0;
      for (std::size_t j = 0; j < configs.size(); ++j) mine += shard.owns(learns ? first_unit : first_unit + std::int64_t(j));
      share = "; shard " + shard.text() + " takes " + std::to_string(mine) + (learns ? " (the whole problem)" : "");
      if (mine == 0) {
        m_env.printer.progress("== " + family.name() + "/" + family.stage() + " " + problem.key() + ": left to the other shards");
        continue;
      }
    }
    m_env.printer.progress("== " + family.name() + "/" + family.stage() + " " + problem.key() + ": " +
                           std::to_string(configs.size()) + " configs (" + std::to_string(pruned) +
                           " pruned by constraints), strategy " + study.strategy.name + share);
    ProblemSearch(m_env, study, problem).run(std::move(configs), learns ? -1 : first_unit);
  }
}

}  // namespace flashtune::runner
