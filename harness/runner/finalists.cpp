// harness/runner/finalists.cpp: the finalists re-measured interleaved (finalists.hpp).
#include "harness/runner/finalists.hpp"

#include <algorithm>
#include <memory>
#include <optional>

#include "harness/cuda/check.hpp"
#include "harness/cuda/module.hpp"
#include "harness/kernels/launch.hpp"
#include "tuner/finalists.hpp"

namespace flashtune::runner {

bool run_finalists(const FinalistsEnv& env, const experiment::Study& study, const std::vector<core::Config>& finalists,
                   const std::map<std::string, double>& error_of, BestOfProblem& best) {
  const auto& family = env.family;
  const core::Problem& problem = env.problem;
  ProblemData& data = env.data;
  const int rounds = study.strategy.finalist_rounds;
  struct Ready {
    std::optional<cuda::Module> module;
    kernels::PackedArgs args;
    kernels::BoundLaunch launch;
  };
  try {
    std::vector<std::unique_ptr<Ready>> ready;  // stable addresses: each launch refers to its args
    for (const auto& c : finalists) {
      const auto compiled = env.compiler.compile(env.sources.request(family, c, problem, env.limits.arch));
      if (!compiled.record.ok) throw core::Error("recompiling " + c.key() + " failed");
      auto r = std::make_unique<Ready>();
      r->module.emplace(compiled.cubin);
      const CUfunction fn = r->module->function(compiled.record.lowered_name);
      r->launch = kernels::bind_launch(family, c, problem, family.launch_shape(c, problem, env.limits), fn, data.addresses(), r->args);
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
      const kernels::BoundLaunch& l = ready[std::size_t(i)]->launch;
      const auto t = measure::measure(l.run, env.gpu.stream, slot, study.measure.cold ? &env.gpu.flusher : nullptr,
                                      std::nullopt, &env.watchdog, l.prepare);
      samples[std::size_t(i)].insert(samples[std::size_t(i)].end(), t.samples_ms.begin(), t.samples_ms.end());
    }
    const auto v = tuner::name_winner(finalists, samples, study.strategy.tie_band);
    std::string line = "   finalists, " + std::to_string(rounds) + " rounds interleaved:";
    for (std::size_t i = 0; i < finalists.size(); ++i)
      line += (i ? ";  " : "  ") + finalists[i].key() + " " + fixed(v.stats[i].median_ms * 1000, 2) + " us (IQR " +
              fixed(v.stats[i].iqr_ms * 1000, 2) + ", " + std::to_string(v.stats[i].samples) + " samples)";
    env.printer.progress(line);
    const core::Config& w = finalists[v.winner];
    if (v.tie()) {
      std::string with;
      for (std::size_t i : v.tied)
        if (i != v.winner) with += (with.empty() ? "" : ", ") + finalists[i].key();
      env.printer.progress("   tie: " + w.key() + " with " + with + " (within " + fixed(100 * study.strategy.tie_band, 1) +
          " % or the noise); winner " + w.key() + " by the tie-break (smallest config values)");
    } else {
      env.printer.progress("   winner: " + w.key());
    }
    const double seconds = v.stats[v.winner].median_ms * 1e-3;
    best.config = w.key();
    best.median_ms = v.stats[v.winner].median_ms;
    best.gbps = family.bytes_moved(problem) / seconds * 1e-9;
    best.tflops = family.flops(problem) / seconds * 1e-12;
    const auto err = error_of.find(w.key());
    best.max_abs_err = err == error_of.end() ? 0.0 : err->second;
  } catch (const cuda::CudaError& e) {
    env.printer.progress(std::string("   finalists not re-measured: ") + e.what());
    return !e.is_sticky();
  } catch (const core::Error& e) {
    env.printer.progress(std::string("   finalists not re-measured: ") + e.what());
  }
  return true;
}

}  // namespace flashtune::runner
