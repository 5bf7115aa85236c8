// tests/runner/experiments_compile_test.cpp: every config of every experiment under experiments/ that can
// run compiles with NVRTC for sm_80 and sm_90a (on the CPU: no GPU needed). Row kernels must not spill;
// attention kernels may (a few bytes at 255 registers can still win: those configs are measured and the
// tuner decides). Identical specializations (same name expression and defines) are compiled once per
// arch, on every core.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/family.hpp"

namespace fs = std::filesystem;
using namespace flashtune;

struct Job {
  jit::CompileRequest req;
  std::string where;
  bool may_spill = false;
};

TEST(ExperimentFiles, EveryRunnableConfigCompilesForSm80AndSm90a) {
  const jit::Compiler compiler(std::nullopt);
  const auto headers = jit::template_headers(std::nullopt);
  int files = 0;
  std::vector<Job> jobs;
  std::set<std::string> done;
  // FT_COMPILE_FILTER=REGEX: only the specializations whose key ("sm_90a attn_fwd_tma_kernel<...> -D...") matches
  // (a local check of what one change adds; CI sets nothing and compiles all).
  std::optional<std::regex> filter;
  if (const char* f = std::getenv("FT_COMPILE_FILTER"); f && *f) filter.emplace(f);
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(FT_SOURCE_DIR) / "experiments")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const auto exp = experiment::load_experiment(entry.path());
    for (const std::string arch : {"sm_80", "sm_90a"}) {
      const auto limits = core::DeviceLimits::for_arch(arch);
      for (const auto& study : exp.studies) {
        const auto& family = *study.kernel;
        for (const auto& problem : study.problems) {
          for (const auto& config : experiment::candidates(study, problem)) {
            if (family.can_run(config, problem, limits)) continue;
            const auto spec = family.specialize(config, problem);
            std::string key = arch + " " + spec.name_expression;
            for (const auto& d : spec.defines) key += " -D" + d;
            if (!done.insert(key).second) continue;
            if (filter && !std::regex_search(key, *filter)) continue;
            Job job;
            job.req.source_name = family.template_file_for(config, problem);
            job.req.source = jit::load_template(job.req.source_name, std::nullopt);
            job.req.name_expression = spec.name_expression;
            job.req.defines = spec.defines;
            job.req.arch = arch;
            job.req.headers = headers;
            job.where = entry.path().filename().string() + " " + key;
            job.may_spill = family.name().rfind("attn", 0) == 0;
            jobs.push_back(std::move(job));
          }
        }
      }
    }
  }
  // FT_COMPILE_COUNT_ONLY=1: say how many specializations there are and compile none (what an edit to a space
  // or an experiment file costs this test, on CI's 2 cores ~1.3 s each).
  if (const char* c = std::getenv("FT_COMPILE_COUNT_ONLY"); c && std::string(c) == "1") {
    std::printf("%zu specializations from %d experiment files\n", jobs.size(), files);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::mutex m;
  std::vector<std::string> failures;
  int spilled = 0;
  auto worker = [&] {
    for (std::size_t i; (i = next++) < jobs.size();) {
      const auto out = compiler.compile(jobs[i].req);
      std::string why;
      if (!out.record.ok) why = "compile failed\n" + out.record.log;
      else if (out.cubin.empty()) why = "empty cubin";
      else if (out.record.resources.registers <= 0) why = "no register count";
      else if (out.record.resources.spill_store_bytes > 0 && !jobs[i].may_spill) why = "spills";
      std::lock_guard<std::mutex> lock(m);
      spilled += out.record.resources.spill_store_bytes > 0;
      if (!why.empty()) failures.push_back(jobs[i].where + ": " + why);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(files, 0);
  EXPECT_GT(jobs.size(), 0u);
  std::printf("compiled %zu specializations from %d experiment files (%d attention ones spill)\n", jobs.size(), files,
              spilled);
}
