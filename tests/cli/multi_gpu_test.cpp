// tests/cli/multi_gpu_test.cpp (label gpu; skips with fewer than two GPUs): `flashtune run --devices 0,1`
// on real cards. One worker process per GPU, each a shard of the work, all writing one WAL database:
//  - records exactly the resume keys of a one-GPU run of the same experiment, none twice, every trial
//    validated (status ok with its error measured);
//  - a planted crashing and a planted endless kernel, both in worker 0's shard, are recorded (crashed,
//    timeout) while worker 1 runs its share in one run that is never restarted;
//  - kill -9 of the whole run (parent and workers), then the same command again: nothing lost, nothing twice,
//    no run left 'running';
//  - the same configs measured on GPU 0 and on GPU 1 agree (query compare) within a few percent;
//  - --devices under an outer --shard (two "hosts", two databases joined by db merge) equals one run.
// Wall times (one GPU against two) are a benchmark, not asserted here: tools/multi_gpu_bench.sh.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "tests/cli/planted_kernels.hpp"
#include "tests/command.hpp"

namespace fs = std::filesystem;
using namespace flashtune;

namespace {

std::string bin() { return ft_test::flashtune_binary(); }
constexpr auto sh = ft_test::run_with_stderr;  // stdout and stderr, as a user sees them

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// A query's CSV rows, header dropped.
std::vector<std::string> rows(const std::string& db, const std::string& sql) {
  const auto [status, out] = sh(bin() + " query sql \"" + sql + "\" --format csv --db " + db);
  EXPECT_EQ(status, 0) << sql << '\n' << out;
  auto v = lines(out);
  if (!v.empty()) v.erase(v.begin());
  return v;
}

// Every trial's resume key (experiment, stage, family, problem, config, source hash, device key) and status,
// sorted; duplicates kept, so that a key recorded twice shows.
const char* kKeysSql =
    "SELECT t.experiment_name, t.stage, t.family, p.key, c.key, t.source_hash, t.device_key, t.status, "
    "t.max_abs_err IS NOT NULL AS validated FROM trials t JOIN problems p ON p.id = t.problem_id "
    "JOIN configs c ON c.id = t.config_id ORDER BY 1, 2, 3, 4, 5, 6, 7";

// Two row kernels, f32 and bf16, 9 configs each: 36 trials, a few seconds each with compile.
const char* kRowsExperiment = R"(
name: multi_gpu_rows
measure: {mode: cold, warmup: 2, min_samples: 5, max_samples: 30, noise_target: 0.02, max_time_s: 0.2}
studies:
  - family: weighted_row_sum
    problems:
      - {rows: 2048, cols: 2048, dtype: [f32, bf16]}
    space: {block_threads: [128, 256, 512], rows_per_block: [1, 2, 4], vec: 4}
  - family: softmax
    problems:
      - {rows: 2048, cols: 2048, dtype: [f32, bf16]}
    space: {block_threads: [128, 256, 512], rows_per_block: [1, 2, 4], vec: 4}
)";

class MultiGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!cuda::driver_available(&why) || cuda::device_count() < 2) return;
    s_dir = fs::temp_directory_path() / ("ft_multi_gpu_" + std::to_string(::getpid()));
    fs::create_directories(s_dir);
    std::ofstream(s_dir / "rows.yaml") << kRowsExperiment;
    // The one-GPU run every multi-GPU run is held against (its own cache: every config compiled).
    s_reference_db = (s_dir / "one_gpu.sqlite").string();
    const auto [status, out] = sh(bin() + " run " + (s_dir / "rows.yaml").string() + " --device 0 --cache " +
                                  (s_dir / "cache_ref").string() + " --db " + s_reference_db);
    s_reference_ok = status == 0;
    s_reference_log = out;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!s_dir.empty()) fs::remove_all(s_dir, ec);
  }
  void SetUp() override {
    std::string why;
    if (!cuda::driver_available(&why) || cuda::device_count() < 2)
      GTEST_SKIP() << "needs two GPUs: " << (why.empty() ? std::to_string(cuda::device_count()) + " found" : why);
    ASSERT_TRUE(s_reference_ok) << s_reference_log;
  }

  // The reference's keys: one per trial, all validated.
  static std::vector<std::string> reference_keys() { return rows(s_reference_db, kKeysSql); }

  static void expect_same_trials(const std::string& db, const std::string& context) {
    const auto want = reference_keys();
    const auto got = rows(db, kKeysSql);
    ASSERT_EQ(want.size(), 36u) << context;
    for (const auto& r : want) EXPECT_NE(r.find(",ok,1"), std::string::npos) << "reference trial not ok: " << r;
    EXPECT_EQ(std::set<std::string>(got.begin(), got.end()).size(), got.size()) << context << ": a key recorded twice";
    EXPECT_EQ(got, want) << context;
    EXPECT_TRUE(rows(db, "SELECT id FROM runs WHERE status = 'running'").empty()) << context << ": a run left running";
  }

  static inline fs::path s_dir;
  static inline std::string s_reference_db, s_reference_log;
  static inline bool s_reference_ok = false;
};

TEST_F(MultiGpu, TwoWorkersRecordExactlyTheTrialsOfOneGpuRun) {
  const std::string db = (s_dir / "two.sqlite").string();
  const auto [status, out] = sh(bin() + " run " + (s_dir / "rows.yaml").string() + " --devices 0,1 --cache " +
                                (s_dir / "cache_two").string() + " --db " + db);
  ASSERT_EQ(status, 0) << out;
  expect_same_trials(db, "--devices 0,1");
  // Each GPU ran its half: two runs, two GPUs, 18 trials each.
  const auto per_gpu = rows(db, "SELECT r.gpu_uuid, count(*) FROM trials t JOIN runs r ON r.id = t.run_id GROUP BY 1 ORDER BY 1");
  ASSERT_EQ(per_gpu.size(), 2u) << out;
  for (const auto& r : per_gpu) EXPECT_EQ(r.substr(r.rfind(',') + 1), "18") << r;
}

TEST_F(MultiGpu, CrashAndHangInOneWorkerAreRecordedWhileTheOtherGoesOn) {
  // Units are the configs' enumeration indices, worker w of 2 takes those with index % 2 == w: worker 0 gets
  // block_threads 32, 128, 512 and worker 1 64, 256, 1024. 128 writes far out of bounds, 512 never ends.
  ft_test::write_planted_templates(s_dir / "planted", 128, 512);
  std::ofstream(s_dir / "planted.yaml") << R"(
name: multi_gpu_planted
measure: {warmup: 1, min_samples: 3, max_samples: 5, max_time_s: 0.2, watchdog_s: 2}
validate: {atol: 1e-4}  # the planted kernel's serial fp32 sum (tests/cli/cli_gpu_test.cpp's crash test says why)
studies:
  - family: weighted_row_sum
    problems: [{rows: 300, cols: 100, dtype: f32}]
    space: {block_threads: [32, 64, 128, 256, 512, 1024], rows_per_block: 1, vec: 1}
)";
  const std::string db = (s_dir / "planted.sqlite").string();
  const auto [status, out] = sh("timeout 300 " + bin() + " run " + (s_dir / "planted.yaml").string() +
                                " --devices 0,1 --no-cache --db " + db + " --templates " + (s_dir / "planted").string());
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("restarting in a fresh process"), std::string::npos) << out;
  EXPECT_NE(out.find("restarting in a fresh process to resume past the timed-out config"), std::string::npos) << out;
  const auto trials = rows(db, "SELECT c.key, t.status, instr(r.command_line, '--device 0') > 0 AS gpu0 FROM trials t "
                               "JOIN configs c ON c.id = t.config_id JOIN runs r ON r.id = t.run_id "
                               "ORDER BY json_extract(c.json, '$.block_threads')");
  EXPECT_EQ(trials, (std::vector<std::string>{
                        "\"block_threads=32,rows_per_block=1,vec=1\",ok,1",
                        "\"block_threads=64,rows_per_block=1,vec=1\",ok,0",
                        "\"block_threads=128,rows_per_block=1,vec=1\",crashed,1",
                        "\"block_threads=256,rows_per_block=1,vec=1\",ok,0",
                        "\"block_threads=512,rows_per_block=1,vec=1\",timeout,1",
                        "\"block_threads=1024,rows_per_block=1,vec=1\",ok,0",
                    }))
      << out;
  // Worker 1 ran its share in one run, never restarted, and finished; worker 0 restarted after each fault.
  const auto runs = rows(db, "SELECT instr(command_line, '--device 0') > 0, status FROM runs ORDER BY id");
  const auto gpu1 = std::count_if(runs.begin(), runs.end(), [](const std::string& r) { return r[0] == '0'; });
  const auto gpu0 = std::count_if(runs.begin(), runs.end(), [](const std::string& r) { return r[0] == '1'; });
  EXPECT_EQ(gpu1, 1) << out;
  EXPECT_GE(gpu0, 3) << out;
  for (const auto& r : runs) {
    if (r[0] == '0') {
      EXPECT_EQ(r, "0,finished") << out;
    }
  }
  EXPECT_TRUE(rows(db, "SELECT id FROM runs WHERE status = 'running'").empty()) << out;
}

TEST_F(MultiGpu, KillNineOfTheWholeRunThenARerunLosesAndDuplicatesNothing) {
  const std::string db = (s_dir / "killed.sqlite").string();
  const std::string log = (s_dir / "killed.log").string();
  const std::string cmd = bin() + " run " + (s_dir / "rows.yaml").string() + " --devices 0,1 --no-cache --db " + db;
  // setsid: the run and its workers in a process group of their own, so that one kill -9 takes them all; the
  // group's leader writes its pid before it becomes flashtune.
  const std::string pid_file = (s_dir / "killed.pid").string();
  const auto [started, start_out] =
      sh("setsid sh -c 'echo $$ >" + pid_file + "; exec " + cmd + "' >" + log + " 2>&1 </dev/null &");
  ASSERT_EQ(started, 0) << start_out;
  int pid = 0;
  for (int i = 0; i < 50 && pid == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream(pid_file) >> pid;
  }
  ASSERT_GT(pid, 0) << "no pid from " << pid_file;
  std::size_t recorded = 0;
  for (int i = 0; i < 600 && recorded < 8; ++i) {  // up to 120 s for 8 trials
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (fs::exists(db)) recorded = rows(db, "SELECT id FROM trials").size();
  }
  ASSERT_GE(recorded, 8u) << "the run recorded too little to be killed mid-way";
  ASSERT_EQ(sh("kill -9 -" + std::to_string(pid)).status, 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::size_t before = rows(db, "SELECT id FROM trials").size();
  EXPECT_LT(before, 36u) << "killed after the run had ended: nothing tested";
  const auto [status, out] = sh(cmd);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("already recorded"), std::string::npos) << out;
  expect_same_trials(db, "killed, then run again");
  EXPECT_GE(rows(db, "SELECT id FROM runs WHERE status = 'interrupted'").size(), 1u) << out;
}

TEST_F(MultiGpu, TheSameConfigsOnTwoGpusAgree) {
  // Attention forward, big enough for the timings to mean something, and the row kernels; the same studies
  // under two experiment names, so that GPU 1's run does not resume GPU 0's trials.
  const std::string studies = R"(
measure: {mode: cold, warmup: 3, min_samples: 10, max_samples: 100, noise_target: 0.01, max_time_s: 0.3}
studies:
  - family: attn_fwd
    problems:
      - {batch: 2, heads_q: 16, seq_q: 2048, head_dim: 128, dtype: bf16, causal: [0, 1]}
    space: {mma: 80, block_m: [64, 128], block_n: [64, 128], num_warps: [4, 8], num_stages: 2, min_blocks: 1}
  - family: weighted_row_sum
    problems:
      - {rows: 8192, cols: 8192, dtype: bf16}
    space: {block_threads: [128, 256, 512], rows_per_block: [1, 4], vec: 8}
)";
  std::ofstream(s_dir / "agree0.yaml") << "name: agree_gpu0\n" << studies;
  std::ofstream(s_dir / "agree1.yaml") << "name: agree_gpu1\n" << studies;
  const std::string db = (s_dir / "agree.sqlite").string();
  const std::string cache = " --cache " + (s_dir / "cache_agree").string();
  const auto [s0, o0] = sh(bin() + " run " + (s_dir / "agree0.yaml").string() + " --device 0 --db " + db + cache);
  ASSERT_EQ(s0, 0) << o0;
  const auto [s1, o1] = sh(bin() + " run " + (s_dir / "agree1.yaml").string() + " --device 1 --db " + db + cache);
  ASSERT_EQ(s1, 0) << o1;
  const auto ids = rows(db, "SELECT id FROM runs ORDER BY id");
  ASSERT_EQ(ids.size(), 2u);
  const auto [qs, table] = sh(bin() + " query compare " + ids[0] + " " + ids[1] + " --db " + db);
  ASSERT_EQ(qs, 0) << table;
  std::cout << table;  // the log keeps the per-config comparison
  const auto uuids = rows(db, "SELECT DISTINCT gpu_uuid FROM runs");
  EXPECT_EQ(uuids.size(), 2u) << "both runs on one GPU";
  // Per config: GPU 1's median over GPU 0's. Same model, same clocks: the ratios centre on 1, and none is
  // far off (a looser bound than a run's noise band, which a few configs of ~20 may exceed by chance).
  const auto pairs = rows(db, "SELECT a.median_ms, b.median_ms FROM trials a JOIN trials b ON a.problem_id = "
                              "b.problem_id AND a.config_id = b.config_id AND a.stage = b.stage AND a.family = b.family "
                              "WHERE a.run_id = " + ids[0] + " AND b.run_id = " + ids[1] + " AND a.status = 'ok' AND b.status = 'ok'");
  ASSERT_GE(pairs.size(), 16u) << table;
  std::vector<double> ratio;
  for (const auto& p : pairs) ratio.push_back(std::stod(p.substr(p.find(',') + 1)) / std::stod(p.substr(0, p.find(','))));
  std::sort(ratio.begin(), ratio.end());
  const double median = ratio[ratio.size() / 2];
  EXPECT_NEAR(median, 1.0, 0.02) << table;
  EXPECT_GT(ratio.front(), 0.9) << table;
  EXPECT_LT(ratio.back(), 1.1) << table;
  std::cout << "GPU1/GPU0 median time ratio " << median << " over " << ratio.size() << " configs, range "
            << ratio.front() << " .. " << ratio.back() << '\n';
}

TEST_F(MultiGpu, DevicesUnderAnOuterShardEqualOneUnshardedRun) {
  // Two "hosts" on one machine: each takes half of the work (--shard I/2) and splits it over both GPUs.
  std::vector<std::string> dbs;
  for (int host = 0; host < 2; ++host) {
    dbs.push_back((s_dir / ("host" + std::to_string(host) + ".sqlite")).string());
    const auto [status, out] = sh(bin() + " run " + (s_dir / "rows.yaml").string() + " --devices 0,1 --shard " +
                                  std::to_string(host) + "/2 --cache " + (s_dir / "cache_hosts").string() +
                                  " --db " + dbs.back());
    ASSERT_EQ(status, 0) << out;
    EXPECT_NE(out.find("shard " + std::to_string(host * 2) + "/4"), std::string::npos) << out;
    EXPECT_EQ(rows(dbs.back(), "SELECT id FROM trials").size(), 18u) << out;
  }
  const std::string merged = (s_dir / "merged.sqlite").string();
  const auto [ms, mout] = sh(bin() + " db merge " + dbs[0] + " " + dbs[1] + " -o " + merged);
  ASSERT_EQ(ms, 0) << mout;
  expect_same_trials(merged, "two hosts x two GPUs, merged");
  EXPECT_EQ(rows(merged, "SELECT id FROM runs").size(), 4u);
}

}  // namespace
