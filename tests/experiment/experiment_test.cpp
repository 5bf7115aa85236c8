// tests/experiment/experiment_test.cpp: the experiment loader against fake kernel families: a good file
// gives the expected values, and every kind of mistake gives one line naming the file, line and key.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "harness/experiment/experiment.hpp"

namespace ft = flashtune;
namespace fx = flashtune::experiment;
using ft::core::DType;

namespace {

// A row-reduction-like family: dims rows, cols; f32 and bf16; cols must be a multiple of 4.
class FakeFamily : public ft::kernels::KernelFamily {
 public:
  FakeFamily(std::string name, std::string stage) : m_name(std::move(name)), m_stage(std::move(stage)) {}
  std::string name() const override { return m_name; }
  std::string stage() const override { return m_stage; }
  std::string template_file() const override { return "fake.cuh"; }
  std::string description() const override { return "fake family for loader tests"; }
  std::vector<std::string> problem_dims() const override { return {"rows", "cols"}; }
  std::vector<DType> dtypes() const override { return {DType::f32, DType::bf16}; }
  std::vector<ft::kernels::TunableSpec> tunables() const override {
    return {{"block_threads", {64, 128, 256}, "threads per block"}, {"vec", {1, 2, 4}, "elements per load"}};
  }
  std::vector<std::string> constraints() const override { return {"block_threads * vec <= 8 * cols"}; }
  std::optional<std::string> check_problem(const ft::core::Problem& p) const override {
    if (p.at("rows") <= 0 || p.at("cols") <= 0) return "rows and cols must be > 0";
    if (p.at("cols") % 4 != 0) return "cols must be a multiple of 4";
    return std::nullopt;
  }
  std::optional<std::string> can_run(const ft::core::Config&, const ft::core::Problem&,
                                     const ft::core::DeviceLimits&) const override {
    return std::nullopt;
  }
  ft::kernels::Specialization specialize(const ft::core::Config&, const ft::core::Problem&) const override { return {}; }
  ft::kernels::LaunchShape launch_shape(const ft::core::Config&, const ft::core::Problem&,
                                        const ft::core::DeviceLimits&) const override {
    return {};
  }
  std::vector<ft::kernels::BufferSpec> buffers(const ft::core::Problem&) const override { return {}; }
  std::vector<ft::kernels::KernelArg> arguments(const ft::core::Config&, const ft::core::Problem&) const override { return {}; }
  double bytes_moved(const ft::core::Problem&) const override { return 0; }
  double flops(const ft::core::Problem&) const override { return 0; }
  void reference(const ft::core::Problem&, const std::vector<ft::kernels::HostTensor>&,
                 std::vector<ft::kernels::HostTensor>&, ft::kernels::RefPrecision) const override {}
  double default_atol(const ft::core::Problem&) const override { return 1e-6; }

 private:
  std::string m_name, m_stage;
};

const FakeFamily kRows("fake_rows", "forward");
const FakeFamily kBwd("fake_bwd", "backward");
const fx::FamilyCatalog kCatalog{{&kRows, &kBwd}};

fx::Experiment parse(const std::string& yaml) { return fx::parse_experiment(yaml, "exp.yaml", kCatalog); }

// The one-line message of the UserError that parsing `yaml` must throw.
std::string error_of(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ft::core::UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no UserError for:\n" << yaml;
  return "";
}

// Checks file, line and key (the message prints "exp.yaml:LINE:COL: key 'KEY': ...").
void expect_error(const std::string& yaml, int line, const std::string& key, const std::string& text) {
  const std::string msg = error_of(yaml);
  EXPECT_EQ(msg.rfind("exp.yaml:" + std::to_string(line) + ":", 0), 0u) << msg;
  if (!key.empty()) {
    EXPECT_NE(msg.find("key '" + key + "'"), std::string::npos) << msg;
  }
  EXPECT_NE(msg.find(text), std::string::npos) << "missing '" << text << "' in: " << msg;
}

// A valid file; tests replace one line to make it wrong. Line numbers are 1-based.
const char* kGood = R"(name: quickstart
description: "row sums, two dtypes"
arch: sm_80
measure: {mode: hot, warmup: 5, warmup_s: 0.25, min_samples: 20, max_samples: 200, noise_target: 0.02, min_time_s: 0.01, max_time_s: 2.0, watchdog_s: 4}
validate: {enabled: true, seed: 42, atol: 1e-5}
studies:
  - family: fake_rows
    stage: forward
    problems:
      - {rows: [1024, 16384], cols: 4096, dtype: [f32, bf16]}
      - {rows: 8, cols: [64, 4096]}
      - {rows: 1024, cols: 4096, dtype: f32}
    space:
      block_threads: [128, 256]
    constraints: ["block_threads * vec <= cols", "cols % (block_threads * vec) == 0"]
    strategy: {name: random, budget_trials: 5, budget_seconds: 30, seed: 9}
    measure: {max_samples: 50}
  - family: fake_bwd
    problems:
      - rows: 4
        cols: 8
)";

std::string replace_line(std::string text, int line, const std::string& with) {
  std::size_t b = 0;
  for (int i = 1; i < line; ++i) b = text.find('\n', b) + 1;
  const std::size_t e = text.find('\n', b);
  return text.replace(b, e - b, with);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST(Experiment, GoodFileGivesExpectedValues) {
  const fx::Experiment ex = parse(kGood);
  EXPECT_EQ(ex.name, "quickstart");
  EXPECT_EQ(ex.description, "row sums, two dtypes");
  EXPECT_EQ(ex.arch, "sm_80");
  EXPECT_EQ(ex.path, "exp.yaml");
  EXPECT_EQ(ex.text_hash, ft::core::hash_hex(kGood));
  EXPECT_FALSE(ex.measure.cold);
  EXPECT_EQ(ex.measure.warmup, 5);
  EXPECT_DOUBLE_EQ(ex.measure.warmup_s, 0.25);
  EXPECT_DOUBLE_EQ(ft::core::MeasureSettings{}.warmup_s, 0.0);  // the default: launches only
  EXPECT_EQ(ex.measure.min_samples, 20);
  EXPECT_EQ(ex.measure.max_samples, 200);
  EXPECT_DOUBLE_EQ(ex.measure.noise_target, 0.02);
  EXPECT_DOUBLE_EQ(ex.measure.max_time_s, 2.0);
  EXPECT_DOUBLE_EQ(ex.measure.watchdog_s, 4.0);
  EXPECT_DOUBLE_EQ(ft::core::MeasureSettings{}.watchdog_s, 10.0);  // the default
  EXPECT_TRUE(ex.validate.enabled);
  EXPECT_EQ(ex.validate.seed, 42u);
  EXPECT_DOUBLE_EQ(ex.validate.atol, 1e-5);
  ASSERT_EQ(ex.studies.size(), 2u);

  const fx::Study& s = ex.studies[0];
  EXPECT_EQ(s.family, "fake_rows");
  EXPECT_EQ(s.kernel, &kRows);
  EXPECT_EQ(s.stage, "forward");
  EXPECT_EQ(s.line, 7);
  // 2 x 2 from the first entry, 2 from the second (dtype defaults to f32), the third is a duplicate.
  ASSERT_EQ(s.problems.size(), 6u);
  EXPECT_EQ(s.problems[0].key(), "cols=4096,rows=1024,dtype=f32");
  EXPECT_EQ(s.problems[1].key(), "cols=4096,rows=1024,dtype=bf16");
  EXPECT_EQ(s.problems[2].key(), "cols=4096,rows=16384,dtype=f32");
  EXPECT_EQ(s.problems[3].key(), "cols=4096,rows=16384,dtype=bf16");
  EXPECT_EQ(s.problems[4].key(), "cols=64,rows=8,dtype=f32");
  EXPECT_EQ(s.problems[5].key(), "cols=4096,rows=8,dtype=f32");
  // The study named block_threads; vec takes the family's defaults; family order is kept.
  ASSERT_EQ(s.space.dims.size(), 2u);
  EXPECT_EQ(s.space.dims[0].first, "block_threads");
  EXPECT_EQ(s.space.dims[0].second, (std::vector<std::int64_t>{128, 256}));
  EXPECT_EQ(s.space.dims[1].first, "vec");
  EXPECT_EQ(s.space.dims[1].second, (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(s.constraints, (std::vector<std::string>{"block_threads * vec <= 8 * cols", "block_threads * vec <= cols",
                                                     "cols % (block_threads * vec) == 0"}));
  EXPECT_EQ(s.strategy.name, "random");
  EXPECT_EQ(s.strategy.budget_trials, 5);
  EXPECT_DOUBLE_EQ(s.strategy.budget_seconds, 30);
  EXPECT_EQ(s.strategy.seed, 9u);
  // Per-study measure: max_samples overridden, the rest inherited from the top level.
  EXPECT_EQ(s.measure.max_samples, 50);
  EXPECT_EQ(s.measure.min_samples, 20);
  EXPECT_FALSE(s.measure.cold);

  // cols = 64: block_threads * vec <= 64 leaves nothing with block >= 128; cols = 4096: all 6 configs.
  const auto few = fx::candidates(s, s.problems[4]);
  EXPECT_TRUE(few.empty());
  EXPECT_EQ(fx::candidates(s, s.problems[0]).size(), 6u);

  const fx::Study& b = ex.studies[1];
  EXPECT_EQ(b.stage, "backward");
  EXPECT_EQ(b.line, 18);
  ASSERT_EQ(b.problems.size(), 1u);
  EXPECT_EQ(b.space.dims[0].second, (std::vector<std::int64_t>{64, 128, 256}));  // family defaults
  EXPECT_EQ(b.constraints, (std::vector<std::string>{"block_threads * vec <= 8 * cols"}));
  EXPECT_EQ(b.strategy.name, "exhaustive");
  EXPECT_EQ(b.measure.max_samples, 200);  // no override: the experiment's
}

TEST(Experiment, MinimalFileTakesDefaults) {
  const fx::Experiment ex = parse("name: tiny\nstudies:\n  - family: fake_rows\n    problems: [{rows: 1, cols: 64}]\n");
  EXPECT_EQ(ex.arch, "sm_90a");
  EXPECT_TRUE(ex.measure.cold);
  EXPECT_EQ(ex.measure.max_samples, ft::core::MeasureSettings{}.max_samples);
  EXPECT_LT(ex.validate.atol, 0);
  ASSERT_EQ(ex.studies.size(), 1u);
  EXPECT_EQ(ex.studies[0].space.size(), 9);
  EXPECT_EQ(ex.studies[0].problems[0].dtype, DType::f32);
}

TEST(Experiment, LoadsFromFileAndReportsUnreadableFile) {
  const auto path = std::filesystem::temp_directory_path() / "flashtune_experiment_test.yaml";
  {
    std::ofstream(path) << kGood;
  }
  const fx::Experiment ex = fx::load_experiment(path, kCatalog);
  EXPECT_EQ(ex.path, path.string());
  EXPECT_EQ(ex.text_hash, ft::core::hash_hex(kGood));
  std::filesystem::remove(path);
  try {
    fx::load_experiment(path, kCatalog);
    FAIL() << "expected UserError";
  } catch (const ft::core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------
TEST(ExperimentErrors, MalformedYaml) {
  expect_error(replace_line(kGood, 8, "   stage: forward"), 8, "", "malformed YAML: end of sequence not found");
  expect_error(replace_line(kGood, 2, "\tdescription: x"), 2, "", "malformed YAML: illegal tab");
  expect_error("", 1, "", "expected a map");
  expect_error("- a\n- b\n", 1, "", "expected a map");
}

TEST(ExperimentErrors, MissingRequiredKeys) {
  expect_error(replace_line(kGood, 1, "title: quickstart"), 1, "title", "unknown key (allowed: name, description");
  expect_error(replace_line(kGood, 1, "#"), 2, "name", "required key is missing");
  expect_error(replace_line(kGood, 7, "  -"), 8, "studies[0].family", "required key is missing");
  expect_error(replace_line(replace_line(kGood, 9, "    problemz:"), 10, "      - {rows: 1, cols: 4}"), 9,
               "studies[0].problemz", "unknown key");
  expect_error("name: x\n", 1, "studies", "required key is missing");
  expect_error("name: x\nstudies: []\n", 2, "studies", "non-empty list");
}

TEST(ExperimentErrors, UnknownKeysAtEveryLevel) {
  expect_error(replace_line(kGood, 4, "measure: {mode: hot, warmups: 5}"), 4, "measure.warmups",
               "allowed: mode, warmup, warmup_s, min_samples");
  expect_error(replace_line(kGood, 5, "validate: {enable: true}"), 5, "validate.enable", "allowed: enabled, seed, atol");
  expect_error(replace_line(kGood, 16, "    strategy: {name: random, trials: 5}"), 16, "studies[0].strategy.trials",
               "allowed: name, budget_trials");
  expect_error(replace_line(kGood, 8, "    stages: forward"), 8, "studies[0].stages", "allowed: family, stage, problems");
  expect_error(replace_line(kGood, 1, "name: quickstart\nname: again"), 2, "name", "given twice");
}

TEST(ExperimentErrors, WrongTypes) {
  expect_error(replace_line(kGood, 4, "measure: {warmup: three}"), 4, "measure.warmup", "expected an integer, got 'three'");
  expect_error(replace_line(kGood, 4, "measure: {noise_target: [1]}"), 4, "measure.noise_target", "expected a number, got a list");
  expect_error(replace_line(kGood, 5, "validate: {enabled: maybe}"), 5, "validate.enabled", "expected true or false");
  expect_error(replace_line(kGood, 10, "      - {rows: lots, cols: 4096}"), 10, "studies[0].problems[0].rows", "expected an integer");
  expect_error(replace_line(kGood, 14, "      block_threads: 1.5"), 14, "studies[0].space.block_threads", "expected an integer");
  expect_error(replace_line(kGood, 7, "  - family: {a: 1}"), 7, "studies[0].family", "expected a string, got a map");
  const std::string map_not_list =
      replace_line(replace_line(replace_line(replace_line(kGood, 9, "    problems: {rows: 1, cols: 4}"), 10, "#"), 11, "#"), 12, "#");
  expect_error(map_not_list, 9, "studies[0].problems", "non-empty list of problem maps");
}

TEST(ExperimentErrors, UnknownFamilyListsKnownOnes) {
  expect_error(replace_line(kGood, 7, "  - family: softmax_v9"), 7, "studies[0].family",
               "unknown kernel family 'softmax_v9' (known: fake_rows, fake_bwd)");
}

TEST(ExperimentErrors, UnknownStage) {
  expect_error(replace_line(kGood, 8, "    stage: backward"), 8, "studies[0].stage", "unknown stage 'backward'");
}

TEST(ExperimentErrors, UnknownTunableListsTheFamilys) {
  expect_error(replace_line(kGood, 14, "      warps: [4]"), 14, "studies[0].space.warps", "allowed: block_threads, vec");
}

TEST(ExperimentErrors, ProblemDims) {
  expect_error(replace_line(kGood, 11, "      - {rows: 8}"), 11, "studies[0].problems[1].cols", "required key is missing");
  expect_error(replace_line(kGood, 11, "      - {rows: 8, cols: 64, heads: 2}"), 11, "studies[0].problems[1].heads",
               "allowed: rows, cols, dtype");
  // Required dims are sizes: 0 is refused as well as -8, and the message says so (issue 23).
  expect_error(replace_line(kGood, 11, "      - {rows: -8, cols: 64}"), 11, "studies[0].problems[1].rows",
               "must be >= 1 (a size), got -8");
  expect_error(replace_line(kGood, 11, "      - {rows: 0, cols: 64}"), 11, "studies[0].problems[1].rows",
               "must be >= 1 (a size), got 0");
  expect_error(replace_line(kGood, 11, "      - {rows: 8, cols: []}"), 11, "studies[0].problems[1].cols", "empty list");
}

TEST(ExperimentErrors, Dtypes) {
  expect_error(replace_line(kGood, 12, "      - {rows: 1024, cols: 4096, dtype: f8}"), 12, "studies[0].problems[2].dtype",
               "unknown dtype 'f8'");
  expect_error(replace_line(kGood, 12, "      - {rows: 1024, cols: 4096, dtype: [f32, f16]}"), 12,
               "studies[0].problems[2].dtype[1]", "does not support dtype f16 (supported: f32, bf16)");
}

TEST(ExperimentErrors, FamilyCheckProblemFails) {
  expect_error(replace_line(kGood, 11, "      - {rows: 8, cols: [64, 66]}"), 11, "studies[0].problems[1]",
               "cols must be a multiple of 4");
}

// Issue 23: aliases multiplied problem lists into ~3e10 problems and the loader died in std::bad_alloc.
// The product is counted before it is expanded and refused past limits.max_problems, with its line.
TEST(ExperimentErrors, ProblemProductPastTheLimitIsRefusedBeforeExpanding) {
  std::string values;
  for (int v = 4; v <= 4 * 400; v += 4) values += (values.empty() ? "" : ", ") + std::to_string(v);
  // 400 x 400 = 160000 problems > the default 100000.
  expect_error(replace_line(kGood, 11, "      - {rows: &v [" + values + "], cols: *v}"), 11, "studies[0].problems[1]",
               "expands to 160000 problems (4 before it in the file), more than limits.max_problems = 100000");
  // The limit is settable, and counts every entry of every study.
  const std::string limited = replace_line(kGood, 5, "limits: {max_problems: 5}\nvalidate: {enabled: true}");
  expect_error(limited, 12, "studies[0].problems[1]", "expands to 2 problems (4 before it in the file)");
  EXPECT_EQ(parse(replace_line(kGood, 5, "limits: {max_problems: 7}")).limits.max_problems, 7);
  EXPECT_EQ(parse(replace_line(kGood, 5, "limits: {max_problems: 7}")).studies[0].problems.size(), 6u);
  expect_error(replace_line(kGood, 5, "limits: {max_problems: 0}"), 5, "limits.max_problems", "must be >= 1");
  expect_error(replace_line(kGood, 5, "limits: {max_problem: 9}"), 5, "limits.max_problem", "unknown key");
  // A space is counted the same way.
  expect_error(replace_line(kGood, 5, "limits: {max_configs: 5}"), 13, "studies[0].space",
               "the space holds 6 configs, more than limits.max_configs = 5");
}

TEST(ExperimentErrors, TunableValues) {
  expect_error(replace_line(kGood, 14, "      block_threads: [128, 0]"), 14, "studies[0].space.block_threads[1]", "must be > 0");
  expect_error(replace_line(kGood, 14, "      block_threads: []"), 14, "studies[0].space.block_threads", "empty list");
  expect_error(replace_line(kGood, 14, "      block_threads: [128, 128]"), 14, "studies[0].space.block_threads[1]", "listed twice");
}

TEST(ExperimentErrors, MeasureRanges) {
  expect_error(replace_line(kGood, 4, "measure: {min_samples: 50, max_samples: 10}"), 4, "measure.max_samples",
               "min_samples (50) > max_samples (10)");
  expect_error(replace_line(kGood, 4, "measure: {noise_target: 0}"), 4, "measure.noise_target", "must be > 0");
  expect_error(replace_line(kGood, 4, "measure: {min_time_s: -1}"), 4, "measure.min_time_s", "must be >= 0");
  expect_error(replace_line(kGood, 4, "measure: {warmup_s: -0.1}"), 4, "measure.warmup_s", "must be >= 0");
  expect_error(replace_line(kGood, 4, "measure: {watchdog_s: -2}"), 4, "measure.watchdog_s", "must be >= 0");
  expect_error(replace_line(kGood, 4, "measure: {mode: lukewarm}"), 4, "measure.mode", "expected cold or hot");
  // A study override is checked against the merged settings (top level min_samples is 20).
  expect_error(replace_line(kGood, 17, "    measure: {max_samples: 5}"), 17, "studies[0].measure.max_samples",
               "min_samples (20) > max_samples (5)");
  expect_error(replace_line(kGood, 5, "validate: {atol: -1}"), 5, "validate.atol", "must be >= 0");
}

TEST(ExperimentErrors, Strategy) {
  expect_error(replace_line(kGood, 16, "    strategy: {name: anealing}"), 16, "studies[0].strategy.name",
               "unknown strategy 'anealing' (known: exhaustive, random, annealing, genetic, bayes)");
  expect_error(replace_line(kGood, 16, "    strategy: {budget_trials: -3}"), 16, "studies[0].strategy.budget_trials", ">= 0");
  // Each strategy's own settings: checked against its ranges, and only allowed for that strategy.
  expect_error(replace_line(kGood, 16, "    strategy: {name: annealing, cooling: 1.5}"), 16,
               "studies[0].strategy.cooling", "must be in (0, 1], got 1.5");
  expect_error(replace_line(kGood, 16, "    strategy: {name: genetic, population: 7.5}"), 16,
               "studies[0].strategy.population", "must be a whole number");
  expect_error(replace_line(kGood, 16, "    strategy: {name: bayes, xi: lots}"), 16, "studies[0].strategy.xi",
               "expected a number");
  expect_error(replace_line(kGood, 16, "    strategy: {name: random, population: 8}"), 16,
               "studies[0].strategy.population", "a setting of strategy genetic, not of random");
  expect_error(replace_line(kGood, 16, "    strategy: {name: bayes, temperatur: 1}"), 16,
               "studies[0].strategy.temperatur", "unknown key (allowed: name, budget_trials");
  expect_error(replace_line(kGood, 16, "    strategy: {early_exit: 0.5}"), 16, "studies[0].strategy.early_exit", "must be > 1");
  expect_error(replace_line(kGood, 16, "    strategy: {finalist_rounds: 0}"), 16, "studies[0].strategy.finalist_rounds", ">= 1");
  expect_error(replace_line(kGood, 16, "    strategy: {tie_band: 1}"), 16, "studies[0].strategy.tie_band", "[0, 1)");
}

TEST(Experiment, StrategySettingsAreRead) {
  const auto ex = parse(replace_line(kGood, 16,
                                     "    strategy: {name: annealing, temperature: 0.5, restart: 4, seed: 3, early_exit: 2,"
                                     " finalists: 4, finalist_rounds: 7, tie_band: 0.02}"));
  const auto& s = ex.studies[0].strategy;
  EXPECT_EQ(s.name, "annealing");
  EXPECT_EQ(s.options, (std::map<std::string, double>{{"temperature", 0.5}, {"restart", 4}}));
  EXPECT_EQ(s.seed, 3u);
  EXPECT_DOUBLE_EQ(s.early_exit, 2);
  EXPECT_EQ(s.finalists, 4);
  EXPECT_EQ(s.finalist_rounds, 7);
  EXPECT_DOUBLE_EQ(s.tie_band, 0.02);
  const auto& d = ex.studies[1].strategy;  // defaults
  EXPECT_TRUE(d.options.empty());
  EXPECT_DOUBLE_EQ(d.early_exit, 0);
  EXPECT_EQ(d.finalists, 3);
}

TEST(ExperimentErrors, Constraints) {
  expect_error(replace_line(kGood, 15, "    constraints: [\"block_threads *\"]"), 15, "studies[0].constraints[0]",
               "constraint 'block_threads *'");
  expect_error(replace_line(kGood, 15, "    constraints:\n      - \"vec <= 4\"\n      - \"warps * 32 <= block_threads\""), 17,
               "studies[0].constraints[1]", "unknown variable 'warps'");
  expect_error(replace_line(kGood, 15, "    constraints: [\"block_threads > 10000\"]"), 15, "studies[0].constraints",
               "no config of the space");
}

// Issue 23: a constraint that divides by zero for some config is refused at its line, naming the config.
TEST(ExperimentErrors, ConstraintThatDividesByZeroIsRefusedAtItsLine) {
  expect_error(replace_line(kGood, 15, "    constraints:\n      - \"vec <= 4\"\n      - \"block_threads / (vec - 1) > 1\""),
               17, "studies[0].constraints[1]",
               "constraint 'block_threads / (vec - 1) > 1' divides by zero for config {block_threads=128,vec=1}");
  expect_error(replace_line(kGood, 15, "    constraints: [\"block_threads / 0 > 1\"]"), 15, "studies[0].constraints[0]",
               "divides by zero");
  // Guarded by an earlier constraint, the same expression is fine.
  EXPECT_NO_THROW(parse(replace_line(kGood, 15, "    constraints: [\"vec > 1\", \"block_threads / (vec - 1) > 1\"]")));
}

TEST(ExperimentErrors, ArchAndName) {
  expect_error(replace_line(kGood, 3, "arch: sm_75"), 3, "arch", "unknown target arch 'sm_75'");
  expect_error(replace_line(kGood, 1, "name: Quick Start"), 1, "name", "must match [a-z0-9_-]+");
}
