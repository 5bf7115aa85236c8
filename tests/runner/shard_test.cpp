// tests/runner/shard_test.cpp: `run --shard I/N` and the MPI / Slurm environment: parsing, which variables
// win, and that shards of a compile-only run together record exactly the trials of one unsharded run (each
// once), for exhaustive and random with a budget (config units) and a learning strategy (problem units).
#include "harness/runner/shard.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "db/store.hpp"
#include "harness/core/types.hpp"
#include "harness/experiment/experiment.hpp"
#include "tests/runner/runner_test_support.hpp"

using namespace flashtune;
using namespace flashtune::testing;

namespace {

runner::Shard from_env(const std::map<std::string, std::string>& env) {
  return runner::shard_from_environment([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// (problem, stage, config, status) of every trial in a database: what an unsharded run must equal.
std::multiset<std::string> trial_set(const fs::path& db) {
  db::Store store(db);
  const auto q = store.sql(
      "SELECT p.key, t.stage, c.key, t.status FROM trials t JOIN problems p ON p.id = t.problem_id "
      "JOIN configs c ON c.id = t.config_id");
  std::multiset<std::string> out;
  for (const auto& r : q.rows) out.insert(r[0] + " | " + r[1] + " | " + r[2] + " | " + r[3]);
  return out;
}

std::string experiment_text(const std::string& strategy) {
  return R"(
name: shard_small
arch: sm_80
studies:
  - family: weighted_row_sum
    problems:
      - {rows: [33, 64], cols: [1000, 2000], dtype: f32}
    space: {block_threads: [128, 256], rows_per_block: 1, vec: [1, 4]}
    strategy: )" + strategy + "\n";
}

}  // namespace

TEST(Shard, ParsesIOfNAndRejectsBadText) {
  const auto s = runner::parse_shard("2/5");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 5);
  EXPECT_TRUE(s.owns(7));
  EXPECT_FALSE(s.owns(8));
  EXPECT_FALSE(runner::parse_shard("0/1").sharded());
  for (const char* bad : {"", "3", "5/5", "-1/2", "1/0", "a/b", "1/2/3", "1 /2"})
    EXPECT_THROW(runner::parse_shard(bad), core::UserError) << bad;
  try {
    runner::parse_shard("4/4");
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--shard '4/4'"), std::string::npos) << e.what();
  }
}

TEST(Shard, EnvironmentOfMpiAndSlurmInOrder) {
  EXPECT_FALSE(from_env({}).sharded());
  auto s = from_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "9"}});
  EXPECT_EQ(s.text(), "1/3");
  EXPECT_EQ(s.source, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(from_env({{"PMI_RANK", "4"}, {"PMI_SIZE", "9"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).text(), "4/9");
  EXPECT_EQ(from_env({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}).text(), "3/4");
  // --array=10-16:2 -> tasks 10, 12, 14, 16: task 14 is shard 2 of 4
  EXPECT_EQ(from_env({{"SLURM_ARRAY_TASK_ID", "14"}, {"SLURM_ARRAY_TASK_MIN", "10"}, {"SLURM_ARRAY_TASK_MAX", "16"},
                      {"SLURM_ARRAY_TASK_STEP", "2"}}).text(), "2/4");
  // each array task runs 2 tasks (srun -n 2): task 1 of array element 2 of 3 is shard 5 of 6
  EXPECT_EQ(from_env({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "3"}, {"SLURM_PROCID", "1"},
                      {"SLURM_NTASKS", "2"}}).text(), "5/6");
  EXPECT_EQ(from_env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}}).text(), "3/8");
  EXPECT_EQ(from_env({{"OMPI_COMM_WORLD_RANK", "1"}}).count, 1);  // half a pair is ignored

  EXPECT_THROW(from_env({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}}), core::UserError);
  EXPECT_THROW(from_env({{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}}), core::UserError);
  EXPECT_THROW(from_env({{"SLURM_ARRAY_TASK_ID", "2"}}), core::UserError);
  EXPECT_THROW(from_env({{"SLURM_ARRAY_TASK_ID", "11"}, {"SLURM_ARRAY_TASK_MIN", "10"}, {"SLURM_ARRAY_TASK_MAX", "16"},
                         {"SLURM_ARRAY_TASK_STEP", "2"}}), core::UserError);
}

// For each strategy: 3 shards into 3 databases together record the same (problem, stage, config, status)
// multiset as one unsharded run, and no shard repeats another's trial.
TEST(Shard, ShardsTogetherEqualOneUnshardedRun) {
  TempDir cache;  // 4 distinct kernels (rows and cols are arguments): compiled once for the whole test
  for (const std::string strategy :
       {"{name: exhaustive}", "{name: random, budget_trials: 5, seed: 3}", "{name: annealing, budget_trials: 4, seed: 2}"}) {
    SCOPED_TRACE(strategy);
    TempDir dir;
    const auto exp = experiment::parse_experiment(experiment_text(strategy), "shard.yaml");
    auto whole = quiet_options(dir.path / "whole.sqlite", true);
    whole.cache_dir = cache.path;
    runner::run_experiment(exp, whole);
    const auto expected = trial_set(whole.db_path);
    ASSERT_GT(expected.size(), 4u);

    std::multiset<std::string> together;
    std::size_t smallest = expected.size();
    for (int i = 0; i < 3; ++i) {
      auto o = quiet_options(dir.path / ("shard" + std::to_string(i) + ".sqlite"), true);
      o.shard = runner::Shard{i, 3, "test"};
      o.cache_dir = cache.path;
      runner::run_experiment(exp, o);
      const auto part = trial_set(o.db_path);
      smallest = std::min(smallest, part.size());
      together.insert(part.begin(), part.end());
    }
    EXPECT_EQ(together, expected);
    EXPECT_LT(smallest, expected.size());  // work was really split
  }
}
