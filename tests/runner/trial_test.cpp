// tests/runner/trial_test.cpp: one trial alone, without a GPU (runner/trial.hpp): a config can_run rejects is
// invalid_config before any compile, a template that does not compile is compile_failed with NVRTC's first
// error, a config that compiles is `compiled` with its ptxas resources, and resources past the device's are
// resource_exceeded.
#include "harness/runner/trial.hpp"

#include <gtest/gtest.h>

#include "harness/experiment/experiment.hpp"
#include "harness/jit/template_store.hpp"
#include "tests/runner/runner_test_support.hpp"
#include "tuner/space.hpp"

using namespace flashtune;
using flashtune::testing::TempDir;

namespace {

// weighted_row_sum on one ragged problem; block_threads 48 is not whole warps (can_run says no).
const char* kRows = R"(
name: trial_unit
studies:
  - family: weighted_row_sum
    problems: [{rows: 33, cols: 1000, dtype: f32}]
    space: {block_threads: [48, 128], rows_per_block: 1, vec: 1}
)";

struct Trial : ::testing::Test {
  experiment::Experiment exp = experiment::parse_experiment(kRows, "trial_unit.yaml");
  const experiment::Study& study = exp.studies.at(0);
  std::vector<core::Config> configs = tuner::enumerate(study.space, [](const core::Config&) { return true; });
  core::DeviceLimits limits = core::DeviceLimits::for_arch("sm_90a");
  jit::Compiler compiler;  // no disk cache: every compile is this test's own

  const core::Config& config(std::int64_t block_threads) const {
    for (const auto& c : configs)
      if (c.at("block_threads") == block_threads) return c;
    throw core::Error("no config with block_threads " + std::to_string(block_threads));
  }
  core::TrialResult trial(const core::Config& c, runner::TemplateSources& sources) {
    return runner::run_trial(runner::TrialSpec{*study.kernel, c, study.problems.at(0), limits}, compiler, sources, nullptr);
  }
};

}  // namespace

TEST_F(Trial, ConfigThatCannotRunIsInvalidAndNeverCompiled) {
  runner::TemplateSources sources(std::nullopt);
  const auto r = trial(config(48), sources);
  EXPECT_EQ(r.status, core::TrialStatus::invalid_config);
  EXPECT_NE(r.reason.find("not whole warps"), std::string::npos) << r.reason;
  EXPECT_FALSE(r.compile.has_value());
}

TEST_F(Trial, CompileOnlyTrialEndsCompiledWithItsResources) {
  runner::TemplateSources sources(std::nullopt);
  const auto r = trial(config(128), sources);
  ASSERT_EQ(r.status, core::TrialStatus::compiled) << r.reason;
  ASSERT_TRUE(r.compile.has_value());
  EXPECT_TRUE(r.compile->ok);
  EXPECT_GT(r.compile->resources.registers, 0);
  EXPECT_FALSE(r.timing.has_value());
  EXPECT_FALSE(r.validation.has_value());
}

TEST_F(Trial, ResourcesPastTheDeviceAreResourceExceeded) {
  runner::TemplateSources sources(std::nullopt);
  limits.max_regs_per_block = 128;  // fewer than one register per thread of a 128-thread block
  const auto r = trial(config(128), sources);
  EXPECT_EQ(r.status, core::TrialStatus::resource_exceeded) << r.reason;
  EXPECT_NE(r.reason.find("registers per block"), std::string::npos) << r.reason;
  ASSERT_TRUE(r.compile.has_value());
  EXPECT_TRUE(r.compile->ok);
}

TEST_F(Trial, TemplateThatDoesNotCompileIsCompileFailedWithTheFirstError) {
  TempDir dir;
  jit::write_templates(dir.path, [](const std::string& name, std::string text) {
    return name == "weighted_row_sum.cuh" ? text + "\nthis_is_not_cuda planted;\n" : text;
  });
  runner::TemplateSources sources(dir.path);
  const auto r = trial(config(128), sources);
  EXPECT_EQ(r.status, core::TrialStatus::compile_failed);
  EXPECT_NE(r.reason.find("this_is_not_cuda"), std::string::npos) << r.reason;
  ASSERT_TRUE(r.compile.has_value());
  EXPECT_FALSE(r.compile->ok);
  EXPECT_NE(sources.of(*study.kernel, config(128), study.problems.at(0)).hash,
            runner::TemplateSources(std::nullopt).of(*study.kernel, config(128), study.problems.at(0)).hash);
}
