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

// Warm start through the runner (issue 23): an exhaustive run of one problem, then a bayes search of a
// neighbouring one in the same database begins with the first's winner, says so and records it in
// warm_starts; with warm_start off (`run --no-warm-start`) nothing is recorded and the search starts cold.
TEST(TunerGpu, ASearchBeginsWithTheWinnerOfTheNearestMeasuredProblem) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const auto first = experiment::parse_experiment(R"(
name: tuner_gpu_history
measure: {warmup: 1, min_samples: 5, max_samples: 20, max_time_s: 0.1}
studies:
  - family: weighted_row_sum
    problems: [{rows: 8192, cols: 2048, dtype: f32}]
    space: {block_threads: [64, 128, 256, 512], rows_per_block: [1, 2, 4], vec: [1, 4]}
    strategy: {name: exhaustive, finalists: 0}
)", "tuner_gpu_history.yaml");
  auto opts = quiet_options(dir.path / "w.sqlite", false);
  const auto s1 = runner::run_experiment(first, opts);
  ASSERT_FALSE(s1.compile_only);
  ASSERT_EQ(s1.best.size(), 1u);
  const auto second = experiment::parse_experiment(R"(
name: tuner_gpu_warm
measure: {warmup: 1, min_samples: 5, max_samples: 20, max_time_s: 0.1}
studies:
  - family: weighted_row_sum
    problems: [{rows: 16384, cols: 2048, dtype: f32}]
    space: {block_threads: [64, 128, 256, 512], rows_per_block: [1, 2, 4], vec: [1, 4]}
    strategy: {name: bayes, budget_trials: 4, finalists: 0, seed: 3}
)", "tuner_gpu_warm.yaml");
  std::vector<std::string> lines;
  opts.print = [&](const std::string& l) { lines.push_back(l); };
  const auto s2 = runner::run_experiment(second, opts);
  EXPECT_TRUE(said(lines, "warm start from 1 measured problem(s); nearest cols=2048,rows=8192,dtype=f32"));
  db::Store store(opts.db_path);
  const auto ws = store.sql("SELECT problem_key, sources, first FROM warm_starts WHERE run_id = " + std::to_string(s2.run_id));
  ASSERT_EQ(ws.rows.size(), 1u);
  EXPECT_EQ(ws.rows[0][0], "cols=2048,rows=16384,dtype=f32");
  EXPECT_NE(ws.rows[0][1].find("\"best\":\"" + s1.best[0].config + "\""), std::string::npos) << ws.rows[0][1];
  EXPECT_EQ(ws.rows[0][2].rfind("[\"" + s1.best[0].config + "\"", 0), 0u) << ws.rows[0][2];
  const auto trials = store.sql("SELECT c.key FROM trials t JOIN configs c ON c.id = t.config_id WHERE t.run_id = " +
                                std::to_string(s2.run_id) + " ORDER BY t.id");
  ASSERT_EQ(trials.rows.size(), 4u);
  EXPECT_EQ(trials.rows[0][0], s1.best[0].config);
  // Off: a third problem, nothing recorded.
  auto third = second;
  third.name = "tuner_gpu_cold";
  third.studies[0].problems[0].dims["rows"] = 32768;
  opts.warm_start = false;
  const auto s3 = runner::run_experiment(third, opts);
  EXPECT_TRUE(store.sql("SELECT id FROM warm_starts WHERE run_id = " + std::to_string(s3.run_id)).rows.empty());
}
