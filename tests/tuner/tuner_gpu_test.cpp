// tests/tuner/tuner_gpu_test.cpp (label gpu; skips without a GPU): the tuner's measuring decisions on a
// real GPU through the runner: early exit abandons configs far slower than the best (recorded as
// stopped early and said so), and the finalists are re-measured interleaved before a winner is named.
#include <gtest/gtest.h>

#include <algorithm>

#include "db/store.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/runner/runner.hpp"
#include "tests/runner/runner_test_support.hpp"

using namespace flashtune;
using namespace flashtune::testing;

namespace {
bool said(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
}
}  // namespace

TEST(TunerGpu, EarlyExitAbandonsConfigsFarSlowerThanTheBest) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  // 64 rows of 256 K floats: 1024 threads per row with 4-element loads first (the values are listed in
  // that order), then 32 threads per row with 1-element loads: 128 x fewer loads in flight, many times
  // slower on any GPU, so it passes 2 x the best within its first samples.
  const auto exp = experiment::parse_experiment(R"(
name: tuner_gpu_early_exit
measure: {warmup: 1, min_samples: 30, max_samples: 60, max_time_s: 0.5, noise_target: 0.00001}
studies:
  - family: weighted_row_sum
    problems: [{rows: 64, cols: 262144, dtype: f32}]
    space: {block_threads: [1024, 32], rows_per_block: 1, vec: [4, 1]}
    strategy: {name: exhaustive, early_exit: 2, finalists: 0}
)", "tuner_gpu_early_exit.yaml");
  std::vector<std::string> lines;
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.print = [&](const std::string& l) { lines.push_back(l); };
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_FALSE(s.compile_only);
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "status = 'ok'"), 4);
  EXPECT_EQ(count(store, "stopped_early = 0 AND n_samples < 30"), 0) << "a complete measurement has min_samples";
  EXPECT_GE(count(store, "stopped_early = 1 AND n_samples < 30"), 1) << "the 32-thread config was not abandoned";
  EXPECT_TRUE(said(lines, "stopped early (> 2.00 x the best")) << "the abandoned trial's line does not say so";
  EXPECT_FALSE(said(lines, "finalists")) << "finalists: 0 turns the re-measurement off";
  ASSERT_EQ(s.best.size(), 1u);
  EXPECT_EQ(s.best[0].config, "block_threads=1024,rows_per_block=1,vec=4");
}

TEST(TunerGpu, FinalistsAreReMeasuredInterleavedBeforeAWinnerIsNamed) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const auto exp = experiment::parse_experiment(R"(
name: tuner_gpu_finalists
measure: {warmup: 1, min_samples: 8, max_samples: 40, max_time_s: 0.2}
studies:
  - family: softmax
    problems: [{rows: 4096, cols: 4096, dtype: f16}]
    space: {block_threads: [128, 256, 512], rows_per_block: 1, vec: [4, 8]}
    strategy: {name: random, seed: 4, finalists: 3, finalist_rounds: 4, tie_band: 0.01}
)", "tuner_gpu_finalists.yaml");
  std::vector<std::string> lines;
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.print = [&](const std::string& l) { lines.push_back(l); };
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_FALSE(s.compile_only);
  db::Store store(opts.db_path);
  ASSERT_GE(count(store, "status = 'ok'"), 3);
  EXPECT_TRUE(said(lines, "finalists, 4 rounds interleaved:"));
  EXPECT_TRUE(said(lines, "winner: ") || said(lines, "tie: "));
  ASSERT_EQ(s.best.size(), 1u);
  // The winner is one of the three fastest trials of the search, and its time is the re-measured one.
  const auto top = store.sql(
      "SELECT c.key FROM trials t JOIN configs c ON c.id = t.config_id WHERE t.status = 'ok' "
      "ORDER BY t.median_ms LIMIT 3");
  std::vector<std::string> keys;
  for (const auto& row : top.rows) keys.push_back(row.at(0));
  EXPECT_NE(std::find(keys.begin(), keys.end(), s.best[0].config), keys.end()) << s.best[0].config;
  EXPECT_GT(s.best[0].median_ms, 0);
  EXPECT_GT(s.best[0].gbps, 0);
}
