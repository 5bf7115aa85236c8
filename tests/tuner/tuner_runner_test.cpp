// tests/tuner/tuner_runner_test.cpp (label cpu): the learning strategies driven by the real runner in
// compile-only mode (no GPU: every result is `compiled`, without a time): each proposes distinct
// configs up to its budget, and a rerun resumes instead of repeating them.
#include <gtest/gtest.h>

#include "db/store.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/runner/runner.hpp"
#include "tests/runner/runner_test_support.hpp"
#include "tuner/strategy.hpp"

using namespace flashtune;
using namespace flashtune::testing;

TEST(TunerRunner, LearningStrategiesProposeDistinctConfigsWithinTheirBudget) {
  for (const auto& name : tuner::learning_strategy_names()) {
    TempDir dir;
    const auto exp = experiment::parse_experiment(R"(
name: tuner_compile_only
studies:
  - family: weighted_row_sum
    problems: [{rows: 64, cols: 256, dtype: f32}]
    space: {block_threads: [64, 128, 256], rows_per_block: [1, 2], vec: [1, 2, 4]}
    strategy: {name: )" + name + R"(, budget_trials: 7, seed: 3, early_exit: 1.5, finalists: 2}
)", "tuner_compile_only.yaml");
    auto opts = quiet_options(dir.path / "c.sqlite", true);
    const auto s = runner::run_experiment(exp, opts);
    EXPECT_EQ(s.proposed, 7) << name;
    db::Store store(opts.db_path);
    EXPECT_EQ(count(store, "1"), 7) << name;
    EXPECT_EQ(std::stoll(store.sql("SELECT count(DISTINCT config_id) FROM trials").rows.at(0).at(0)), 7) << name;
    // The same seed proposes the same configs again: all 7 are found recorded and skipped.
    const auto again = runner::run_experiment(exp, opts);
    EXPECT_EQ(again.resumed, 7) << name;
    EXPECT_EQ(count(store, "1"), 7) << name;
  }
}
