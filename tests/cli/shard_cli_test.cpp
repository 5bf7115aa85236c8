// tests/cli/shard_cli_test.cpp: `run --shard` across processes and `db merge`, through the binary in
// compile-only mode: two shards started by Open MPI's mpirun, and two started by hand with the launchers'
// environment variables, merged, equal one unsharded run trial for trial; a second merge adds nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tests/command.hpp"

namespace fs = std::filesystem;

namespace {

using Result = ft_test::CommandResult;

Result shell(const std::string& cmd) { return ft_test::run_command(cmd + " 2>&1"); }

const std::string kFlashtune = ft_test::flashtune_binary();

// Two studies: an exhaustive one (its configs are split between shards) and a learning one (its problems are).
const char* kExperiment = R"(
name: shard_cli
arch: sm_80
studies:
  - family: weighted_row_sum
    problems:
      - {rows: [33, 64], cols: 1000, dtype: f32}
    space: {block_threads: [128, 256], rows_per_block: 1, vec: [1, 4]}
  - family: softmax
    problems:
      - {rows: [16, 48], cols: 512, dtype: f32}
    space: {block_threads: [128, 256], rows_per_block: 1, vec: [1, 4]}
    strategy: {name: annealing, budget_trials: 3, seed: 5}
)";

struct Fixture {
  fs::path dir = fs::temp_directory_path() / ("ft_shard_cli_" + std::to_string(::getpid()));
  std::string yaml, cache;
  Fixture() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    yaml = (dir / "shard_cli.yaml").string();
    cache = (dir / "cache").string();
    std::ofstream(yaml) << kExperiment;
  }
  ~Fixture() { std::error_code ec; fs::remove_all(dir, ec); }
  std::string db(const std::string& name) const { return (dir / name).string(); }
  std::string run(const std::string& db_name) const {
    return kFlashtune + " run " + yaml + " --compile-only --arch sm_80 --cache " + cache + " --db " + db(db_name);
  }
};

// (problem, stage, config, status) of every trial in a database.
std::multiset<std::string> trial_set(const std::string& db) {
  const auto r = shell(kFlashtune + " query sql \"SELECT p.key, t.stage, c.key, t.status FROM trials t JOIN problems p "
                                    "ON p.id = t.problem_id JOIN configs c ON c.id = t.config_id\" --format csv --db " + db);
  std::multiset<std::string> out;
  std::istringstream in(r.out);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line))
    if (!line.empty()) out.insert(line);
  return out;
}

std::string mpirun() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"})
    if (fs::exists(fs::path(dir) / "mpirun")) return std::string(dir) + "/mpirun";
  return {};
}

}  // namespace

TEST(ShardCli, TwoShardsUnderMpirunMergedEqualOneUnshardedRun) {
  const std::string launcher = mpirun();
  if (launcher.empty()) GTEST_SKIP() << "mpirun not found (Debian package openmpi-bin; tools/install_deps.sh installs it)";
  Fixture f;
  const auto whole = shell(f.run("whole.sqlite"));
  ASSERT_EQ(whole.status, 0) << whole.out;
  const auto expected = trial_set(f.db("whole.sqlite"));
  ASSERT_EQ(expected.size(), 2u * 4u + 2u * 3u) << whole.out;  // 2 problems x 4 configs, 2 problems x 3 proposals

  // Each rank writes its own database, named by the rank Open MPI gives it; flashtune reads the same variables.
  const auto mpi = shell(launcher + " --allow-run-as-root --oversubscribe -n 2 sh -c 'exec " + f.run("") +
                         "shard$OMPI_COMM_WORLD_RANK.sqlite'");
  ASSERT_EQ(mpi.status, 0) << mpi.out;
  EXPECT_NE(mpi.out.find("shard 0/2 (OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)"), std::string::npos) << mpi.out;
  EXPECT_NE(mpi.out.find("shard 1/2 (OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)"), std::string::npos) << mpi.out;
  const auto s0 = trial_set(f.db("shard0.sqlite")), s1 = trial_set(f.db("shard1.sqlite"));
  EXPECT_FALSE(s0.empty());
  EXPECT_FALSE(s1.empty());

  const auto merge = shell(kFlashtune + " db merge " + f.db("shard0.sqlite") + " " + f.db("shard1.sqlite") + " -o " +
                           f.db("all.sqlite"));
  ASSERT_EQ(merge.status, 0) << merge.out;
  EXPECT_EQ(trial_set(f.db("all.sqlite")), expected);
}

TEST(ShardCli, ShardsFromHandSetLauncherVariablesMergeIdempotently) {
  Fixture f;
  ASSERT_EQ(shell(f.run("whole.sqlite")).status, 0);
  const auto expected = trial_set(f.db("whole.sqlite"));
  // Shard 0 as PMI (MPICH) would start it, shard 1 as the second task of a Slurm array --array=4-5.
  // --shard 0/1 in a third process overrides the environment: it runs everything.
  const auto a = shell("env PMI_RANK=0 PMI_SIZE=2 " + f.run("a.sqlite"));
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_NE(a.out.find("shard 0/2 (PMI_RANK/PMI_SIZE)"), std::string::npos) << a.out;
  const auto b = shell("env SLURM_ARRAY_TASK_ID=5 SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_MAX=5 " + f.run("b.sqlite"));
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_NE(b.out.find("shard 1/2 (SLURM_ARRAY_TASK_ID)"), std::string::npos) << b.out;
  const auto off = shell("env SLURM_PROCID=1 SLURM_NTASKS=2 " + f.run("off.sqlite") + " --shard 0/1");
  ASSERT_EQ(off.status, 0) << off.out;
  EXPECT_EQ(trial_set(f.db("off.sqlite")), expected);

  const auto sa = trial_set(f.db("a.sqlite")), sb = trial_set(f.db("b.sqlite"));
  EXPECT_LT(sa.size(), expected.size());
  EXPECT_LT(sb.size(), expected.size());
  std::ifstream in_a(f.db("a.sqlite"), std::ios::binary);
  const std::string a_bytes((std::istreambuf_iterator<char>(in_a)), {});

  const std::string merge = kFlashtune + " db merge " + f.db("a.sqlite") + " " + f.db("b.sqlite") + " -o " + f.db("all.sqlite");
  const auto first = shell(merge);
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_EQ(trial_set(f.db("all.sqlite")), expected);
  const auto again = shell(merge);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("0 runs and 0 trials added"), std::string::npos) << again.out;
  EXPECT_EQ(trial_set(f.db("all.sqlite")), expected);  // nothing doubled
  std::ifstream in_a2(f.db("a.sqlite"), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in_a2)), {}), a_bytes);

  // A rerun of a shard into the merged database resumes: nothing left to do.
  const auto resumed = shell("env PMI_RANK=1 PMI_SIZE=2 " + f.run("all.sqlite"));
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("already recorded"), std::string::npos) << resumed.out;
  EXPECT_EQ(trial_set(f.db("all.sqlite")), expected);

  // Mistakes: one line, exit status 2, the output untouched.
  const auto missing = shell(kFlashtune + " db merge " + f.db("a.sqlite") + " " + f.db("nope.sqlite") + " -o " + f.db("all.sqlite"));
  EXPECT_EQ(missing.status, 2) << missing.out;
  EXPECT_NE(missing.out.find("nope.sqlite: no such file"), std::string::npos) << missing.out;
  const auto no_out = shell(kFlashtune + " db merge " + f.db("a.sqlite"));
  EXPECT_EQ(no_out.status, 2) << no_out.out;
  const auto bad_shard = shell(f.run("x.sqlite") + " --shard 2/2");
  EXPECT_EQ(bad_shard.status, 2) << bad_shard.out;
  EXPECT_NE(bad_shard.out.find("--shard '2/2'"), std::string::npos) << bad_shard.out;
  EXPECT_EQ(trial_set(f.db("all.sqlite")), expected);
}

// --devices: one worker process per GPU, each a shard; in compile-only mode (no GPU needed) the workers
// together record exactly one unsharded run's trials into the one database.
TEST(ShardCli, DevicesStartOneWorkerPerDeviceSharingTheWork) {
  Fixture f;
  ASSERT_EQ(shell(f.run("whole.sqlite")).status, 0);
  const auto expected = trial_set(f.db("whole.sqlite"));
  const auto two = shell(f.run("two.sqlite") + " --devices 0,1");
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_NE(two.out.find("GPU 0, shard 0/2"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("GPU 1, shard 1/2"), std::string::npos) << two.out;
  EXPECT_EQ(trial_set(f.db("two.sqlite")), expected);
  // Inside shard 1 of 2 (here from --shard), two devices take shards 2/4 and 3/4.
  const auto outer = shell(f.run("outer.sqlite") + " --shard 1/2 --devices 0,1");
  ASSERT_EQ(outer.status, 0) << outer.out;
  EXPECT_NE(outer.out.find("GPU 1, shard 3/4"), std::string::npos) << outer.out;
  const auto half = trial_set(f.db("outer.sqlite"));
  EXPECT_FALSE(half.empty());
  EXPECT_LT(half.size(), expected.size());

  for (const char* bad : {" --devices 0,x", " --devices 1,1", " --devices 0,1 --device 1"}) {
    const auto r = shell(f.run("bad.sqlite") + bad);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.out;
  }
}
