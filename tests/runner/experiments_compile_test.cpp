// tests/runner/experiments_compile_test.cpp: every config of every experiment in experiments/ that can run
// compiles with NVRTC for sm_80 and sm_90a (on the CPU: no GPU needed), without register spills.
// Identical specializations (same name expression and defines) are compiled once per arch.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/family.hpp"

namespace fs = std::filesystem;
using namespace flashtune;

TEST(ExperimentFiles, EveryRunnableConfigCompilesForSm80AndSm90a) {
  const jit::Compiler compiler(std::nullopt);
  int files = 0, compiled = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(FT_SOURCE_DIR) / "experiments")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const auto exp = experiment::load_experiment(entry.path());
    for (const std::string arch : {"sm_80", "sm_90a"}) {
      const auto limits = core::DeviceLimits::for_arch(arch);
      std::set<std::string> done;
      for (const auto& study : exp.studies) {
        const auto& family = *study.kernel;
        const std::string source = jit::load_template(family.template_file(), std::nullopt);
        for (const auto& problem : study.problems) {
          for (const auto& config : experiment::candidates(study, problem)) {
            if (family.can_run(config, problem, limits)) continue;
            const auto spec = family.specialize(config, problem);
            std::string key = spec.name_expression;
            for (const auto& d : spec.defines) key += " -D" + d;
            if (!done.insert(key).second) continue;
            jit::CompileRequest req;
            req.source = source;
            req.source_name = family.template_file();
            req.name_expression = spec.name_expression;
            req.defines = spec.defines;
            req.arch = arch;
            req.headers = jit::template_headers(std::nullopt);
            const auto out = compiler.compile(req);
            ++compiled;
            const std::string where = entry.path().filename().string() + " " + arch + " " + key;
            ASSERT_TRUE(out.record.ok) << where << "\n" << out.record.log;
            EXPECT_FALSE(out.cubin.empty()) << where;
            EXPECT_GT(out.record.resources.registers, 0) << where;
            EXPECT_EQ(out.record.resources.spill_store_bytes, 0) << where << " spills";
          }
        }
      }
    }
  }
  EXPECT_GT(files, 0);
  EXPECT_GT(compiled, 0);
  std::printf("compiled %d specializations from %d experiment files\n", compiled, files);
}
