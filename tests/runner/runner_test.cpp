// tests/runner/runner_test.cpp: the pipeline end to end through the runner: compile-only runs record every
// config and resume without repeating; an edited kernel source is never mistaken for the old one; on a GPU
// (label gpu) every kernel matches the Eigen reference on ragged shapes and a planted bug is caught.
#include "harness/runner/runner.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "db/store.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/template_store.hpp"
#include "tests/runner/runner_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;

namespace {

using namespace flashtune::testing;

const char* kSmall = R"(
name: runner_small
arch: sm_90a
measure: {warmup: 1, min_samples: 3, max_samples: 10, max_time_s: 0.2}
studies:
  - family: weighted_row_sum
    problems:
      - {rows: 33, cols: 1000, dtype: f32}
    space: {block_threads: [128, 256], rows_per_block: 1, vec: [1, 4]}
)";

}  // namespace

TEST(Runner, CompileOnlyRecordsEveryConfigThenResumesWithoutRepeating) {
  TempDir dir;
  const auto exp = experiment::parse_experiment(kSmall, "small.yaml");
  auto opts = quiet_options(dir.path / "t.sqlite", true);
  const auto first = runner::run_experiment(exp, opts);
  EXPECT_TRUE(first.compile_only);
  EXPECT_EQ(first.proposed, 4);
  EXPECT_EQ(first.resumed, 0);
  std::int64_t recorded = 0;
  for (const auto& [status, n] : first.by_status) recorded += n;
  EXPECT_EQ(recorded, 4);
  EXPECT_EQ(first.by_status.count("compiled") ? first.by_status.at("compiled") : 0, 4);

  const auto second = runner::run_experiment(exp, opts);
  EXPECT_EQ(second.resumed, 4);
  EXPECT_TRUE(second.by_status.empty());
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "1"), 4);
  EXPECT_EQ(count(store, "run_id = " + std::to_string(second.run_id)), 0);
}

TEST(Runner, EditedKernelSourceIsRunAgainNotResumed) {
  TempDir dir;
  const auto exp = experiment::parse_experiment(kSmall, "small.yaml");
  auto opts = quiet_options(dir.path / "t.sqlite", true);
  runner::run_experiment(exp, opts);

  // A researcher copies the template out, edits it, and reruns with --templates: no rebuild, new hash.
  const fs::path tdir = dir.path / "templates";
  jit::write_templates(tdir, [](const std::string&, std::string text) { return text + "\n// edited\n"; });
  opts.templates = tdir;
  EXPECT_NE(runner::template_source_hash("weighted_row_sum.cuh", std::nullopt),
            runner::template_source_hash("weighted_row_sum.cuh", tdir));
  const auto edited = runner::run_experiment(exp, opts);
  EXPECT_EQ(edited.resumed, 0);
  EXPECT_EQ(edited.proposed, 4);
}

TEST(Runner, InvalidConfigIsRecordedWithItsReason) {
  TempDir dir;
  const auto exp = experiment::parse_experiment(R"(
name: runner_invalid
studies:
  - family: softmax
    problems: [{rows: 8, cols: 64, dtype: f32}]
    space: {block_threads: [2048], rows_per_block: 1, vec: 1}
)", "invalid.yaml");
  auto opts = quiet_options(dir.path / "t.sqlite", true);
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_EQ(s.by_status.count("invalid_config"), 1u);
  db::Store store(opts.db_path);
  const auto q = store.sql("SELECT reason FROM trials WHERE status = 'invalid_config'");
  ASSERT_EQ(q.rows.size(), 1u);
  EXPECT_FALSE(q.rows[0][0].empty());
}


// Issue 23: the same experiment run twice at once into one database recorded 22-25 of its 27 trials
// twice. Each trial is claimed before it runs; the second process skips what the first holds.
TEST(Runner, TwoProcessesRunningOneExperimentIntoOneDatabaseRecordEachTrialOnce) {
  TempDir dir;
  const auto exp = experiment::parse_experiment(kSmall, "small.yaml");
  auto opts = quiet_options(dir.path / "t.sqlite", true);
  opts.prefetch_threads = -1;  // one config at a time, so the two runs interleave config by config
  { db::Store create(opts.db_path); }
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(5);  // start together with the parent
    try {
      const auto s = runner::run_experiment(exp, opts);
      _exit(s.proposed == 4 ? 0 : 6);
    } catch (...) {
      _exit(3);
    }
  }
  close(go[0]);
  ASSERT_EQ(write(go[1], "x", 1), 1);
  close(go[1]);
  const auto mine = runner::run_experiment(exp, opts);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "1"), 4);
  EXPECT_EQ(store.sql("SELECT count(*) FROM (SELECT 1 FROM trials GROUP BY problem_id, config_id HAVING count(*) > 1)")
                .rows.at(0).at(0),
            "0");
  EXPECT_EQ(mine.proposed, 4);
  std::int64_t recorded = 0;
  for (const auto& [status_name, n] : mine.by_status) recorded += n;
  EXPECT_EQ(recorded + mine.resumed + mine.claimed_elsewhere, 4);
  EXPECT_EQ(count(store, "run_id = " + std::to_string(mine.run_id)), recorded);
}

// Issue 23: strategies proposed configs that cannot run on the device, and each one cost a trial of the
// budget. Now they are split off with can_run first: recorded invalid_config once (query, export and grade
// read them as before), never proposed, not counted in budget_trials, and the run says why, by reason.
TEST(Runner, ConfigsThatCannotRunAreRecordedButNeverProposedNorCountedInTheBudget) {
  TempDir dir;
  const auto exp = experiment::parse_experiment(R"(
name: runner_can_run
studies:
  - family: softmax
    problems: [{rows: 8, cols: 64, dtype: f32}]
    space: {block_threads: [2048, 64, 4096, 48, 128], rows_per_block: 1, vec: 1}
    strategy: {name: random, budget_trials: 2, seed: 3}
)", "can_run.yaml");
  auto opts = quiet_options(dir.path / "t.sqlite", true);
  std::vector<std::string> lines;
  opts.print = [&](const std::string& l) { lines.push_back(l); };
  const auto s = runner::run_experiment(exp, opts);
  EXPECT_EQ(s.proposed, 2);  // the budget went to runnable configs only (64 and 128)
  EXPECT_EQ(s.by_status.count("compiled") ? s.by_status.at("compiled") : 0, 2);
  EXPECT_EQ(s.by_status.count("invalid_config") ? s.by_status.at("invalid_config") : 0, 3);
  EXPECT_EQ(s.cannot_run, 3);
  EXPECT_EQ(s.cannot_run_by_reason,
            (std::map<std::string, std::int64_t>{{"block_threads # > device limit #", 2},
                                                 {"block_threads # is not whole warps", 1}}));
  const auto said = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("3 configs cannot run on compile-only:sm_90a, not proposed (3 recorded invalid_config now") !=
           std::string::npos;
  });
  ASSERT_NE(said, lines.end());
  EXPECT_NE(said->find("2 x block_threads # > device limit # (e.g. block_threads=2048,rows_per_block=1,vec=1: "
                       "block_threads 2048 > device limit 1024); 1 x block_threads # is not whole warps"),
            std::string::npos)
      << *said;
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "status = 'invalid_config' AND reason <> ''"), 3);
  EXPECT_EQ(count(store, "status = 'compiled'"), 2);
  // A rerun records nothing again: the invalid configs are known, the budget's two are resumed.
  const auto again = runner::run_experiment(exp, opts);
  EXPECT_EQ(again.resumed, 2);
  EXPECT_TRUE(again.by_status.empty());
  EXPECT_EQ(count(store, "1"), 5);
}
