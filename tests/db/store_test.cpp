// tests/db/store_test.cpp: the SQLite store on temporary files: round trip of every field, best(), history_trials(),
// resume lookup, migration from schema v1, refusal of newer schemas and of writes through sql(),
// schema.sql == migrated schema, and trials that survive the process being killed (fork + SIGKILL).
// Uses sqlite3 directly (only here and in db/) to build old databases independently of the Store.
#include "db/store.hpp"

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace flashtune;
using db::QueryResult;
using db::Store;

namespace {

// A fresh folder per test, removed afterwards.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    m_dir = std::filesystem::temp_directory_path() /
            ("ft_db_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
             info->name());
    std::filesystem::remove_all(m_dir);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  std::filesystem::path db_path() const { return m_dir / "nested" / "flashtune.db"; }
  std::filesystem::path m_dir;
};

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Raw connection for building and inspecting databases without the Store.
struct Raw {
  sqlite3* db = nullptr;
  explicit Raw(const std::filesystem::path& p) {
    std::filesystem::create_directories(p.parent_path());
    if (sqlite3_open(p.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open " + p.string());
  }
  ~Raw() { sqlite3_close(db); }
  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string m = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(m + " in " + sql);
    }
  }
  std::vector<std::vector<std::string>> query(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db));
    std::vector<std::vector<std::string>> rows;
    while (sqlite3_step(s) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(s); ++i) {
        const auto* t = sqlite3_column_text(s, i);
        row.emplace_back(t ? reinterpret_cast<const char*>(t) : "<null>");
      }
      rows.push_back(std::move(row));
    }
    sqlite3_finalize(s);
    return rows;
  }
};

// A database at schema version 1 (the first migration) holding one run of one ok softmax trial
// ('old_sweep' on 'a100', rows=8 / block=32, source 's', 0.75 ms).
void write_version1_db(Raw& raw) {
  raw.exec(read_text(std::filesystem::path(FT_SOURCE_DIR) / "db/migrations/001_initial.sql"));
  raw.exec("PRAGMA user_version = 1");
  raw.exec("INSERT INTO runs (experiment_name, device_key) VALUES ('old_sweep', 'a100')");
  raw.exec("INSERT INTO problems (family, key, json) VALUES ('softmax', 'rows=8,dtype=f32', '{}')");
  raw.exec("INSERT INTO configs (family, key, hash, json) VALUES ('softmax', 'block=32', 'h', '{}')");
  raw.exec("INSERT INTO trials (run_id, experiment_name, family, stage, problem_id, config_id, "
           "source_hash, device_key, status, median_ms) "
           "VALUES (1, 'old_sweep', 'softmax', 'fwd', 1, 1, 's', 'a100', 'ok', 0.75)");
}

// Tables, columns (name, type, not null, default, pk) and indexes (name, table, unique, columns).
std::string describe_schema(Raw& raw) {
  std::ostringstream out;
  for (const auto& t : raw.query("SELECT name FROM sqlite_master WHERE type = 'table' "
                                 "AND name NOT LIKE 'sqlite_%' ORDER BY name")) {
    out << "table " << t[0] << "\n";
    for (const auto& c : raw.query("SELECT cid, name, type, \"notnull\", dflt_value, pk "
                                   "FROM pragma_table_info('" + t[0] + "') ORDER BY cid"))
      out << "  column " << c[0] << " " << c[1] << " " << c[2] << " notnull=" << c[3]
          << " default=" << c[4] << " pk=" << c[5] << "\n";
    for (const auto& fk : raw.query("SELECT \"from\", \"table\", \"to\" FROM "
                                    "pragma_foreign_key_list('" + t[0] + "') ORDER BY \"from\""))
      out << "  fk " << fk[0] << " -> " << fk[1] << "(" << fk[2] << ")\n";
  }
  for (const auto& i : raw.query("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' "
                                 "ORDER BY tbl_name, name")) {
    std::string name = i[0];
    if (name.rfind("sqlite_autoindex_", 0) == 0) name = "autoindex";  // numbered by declaration order
    out << "index " << name << " on " << i[1];
    for (const auto& c : raw.query("SELECT name FROM pragma_index_info('" + i[0] + "') ORDER BY seqno"))
      out << " " << c[0];
    out << "\n";
  }
  return out.str();
}

db::RunInfo run_info(const std::string& experiment = "weighted_row_sum_sweep") {
  db::RunInfo r;
  r.experiment_name = experiment;
  r.experiment_path = "experiments/" + experiment + ".yaml";
  r.experiment_hash = "0123456789abcdef";
  r.command_line = "flashtune run experiments/" + experiment + ".yaml";
  r.host = "node17";
  r.gpu_name = "NVIDIA H100 80GB HBM3";
  r.gpu_arch = "sm_90a";
  r.gpu_uuid = "GPU-1234";
  r.driver_version = "12.8";
  r.cuda_version = "13.0";
  r.nvrtc_version = "13.0";
  r.project_commit = "abc123";
  r.device_key = "h100-sm_90a";
  return r;
}

core::Problem problem(std::int64_t rows = 16384, core::DType dtype = core::DType::f16) {
  core::Problem p;
  p.dims["rows"] = rows;
  p.dims["cols"] = 4096;
  p.dtype = dtype;
  return p;
}

core::Config config(std::int64_t block, std::int64_t vec = 4) {
  core::Config c;
  c.values["block"] = block;
  c.values["vec"] = vec;
  return c;
}

core::CompileRecord compile_record(const std::string& cache_key) {
  core::CompileRecord c;
  c.ok = true;
  c.arch = "sm_90a";
  c.options = "-std=c++17 --gpu-architecture=sm_90a";
  c.name_expression = "weighted_row_sum_kernel<__half, 256, 4>";
  c.lowered_name = "_Z23weighted_row_sum_kernelI6__halfLi256ELi4EEvPKT_";
  c.cache_key = cache_key;
  c.log = "ptxas info    : Used 40 registers";
  c.resources = {40, 8, 12, 16, 1024, 360};
  c.compile_ms = 123.5;
  c.cubin_bytes = 9876;
  return c;
}

// A measured, validated trial with the given status and median.
db::TrialRecord trial(std::int64_t run_id, const core::Config& cfg, core::TrialStatus status,
                      double median_ms, const std::string& source_hash = "src1",
                      const std::string& device_key = "h100-sm_90a") {
  db::TrialRecord t;
  t.run_id = run_id;
  t.experiment_name = "weighted_row_sum_sweep";
  t.family = "weighted_row_sum";
  t.stage = "fwd";
  t.problem = problem();
  t.config = cfg;
  t.source_hash = source_hash;
  t.device_key = device_key;
  t.seed = 42;
  t.result.status = status;
  if (status != core::TrialStatus::ok) t.result.reason = "because " + std::string(core::to_string(status));
  core::Timing m;
  m.samples_ms = {median_ms * 1.01, median_ms, median_ms * 0.99};
  m.median_ms = median_ms;
  m.iqr_ms = median_ms * 0.02;
  m.min_ms = median_ms * 0.99;
  m.max_ms = median_ms * 1.01;
  m.mean_ms = median_ms;
  m.rel_stdev = 0.01;
  m.converged = true;
  t.result.timing = m;
  core::Validation v;
  v.checked = true;
  v.max_abs_err = 1e-3;
  v.max_rel_err = 2e-3;
  v.naive_err = 1e-3;
  v.tolerance = 2.5e-3;
  v.passed = status == core::TrialStatus::ok;
  t.result.validation = v;
  t.result.gbps = 100.0 / median_ms;
  t.result.tflops = 1.0 / median_ms;
  return t;
}

}  // namespace

TEST_F(StoreTest, RoundTripKeepsEveryField) {
  std::int64_t run = 0, trial_id = 0;
  {
    Store store(db_path());
    EXPECT_EQ(store.version(), Store::latest_version());
    run = store.begin_run(run_info());
    store.set_copy_bandwidth(run, 2500.0);
    const auto compile_id = store.record_compile(compile_record("ck1"), "weighted_row_sum", "src1", "13.0");

    db::TrialRecord t = trial(run, config(256), core::TrialStatus::ok, 0.5);
    t.seed = 0xfedcba9876543210ULL;  // above INT64_MAX: stored as its bit pattern
    t.result.compile = compile_record("ck1");
    t.result.compile->cache_hit = true;
    t.result.compile->compile_ms = 0;  // a cache hit must not replace the recorded compile time
    t.result.timing->stopped_early = false;
    trial_id = store.record_trial(t);
    EXPECT_GT(trial_id, 0);

    const QueryResult c = store.sql("SELECT compile_id FROM trials WHERE id = " + std::to_string(trial_id));
    EXPECT_EQ(c.rows.at(0).at(0), std::to_string(compile_id));
    store.finish_run(run, "finished");
  }
  Store store(db_path());  // reopened: everything was committed

  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, run);
  EXPECT_EQ(runs[0].experiment, "weighted_row_sum_sweep");
  EXPECT_EQ(runs[0].gpu, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(runs[0].device_key, "h100-sm_90a");
  EXPECT_FALSE(runs[0].compile_only);
  EXPECT_EQ(runs[0].status, "finished");
  EXPECT_EQ(runs[0].trials, 1);
  EXPECT_EQ(runs[0].ok, 1);

  const QueryResult r = store.sql(
      "SELECT experiment_path, experiment_hash, command_line, host, gpu_uuid, driver_version, "
      "cuda_version, nvrtc_version, project_commit, device_key, compile_only, copy_gbps, "
      "finished_at IS NOT NULL, length(uid) FROM runs");
  EXPECT_EQ(r.rows.at(0), (std::vector<std::string>{
                              "experiments/weighted_row_sum_sweep.yaml", "0123456789abcdef",
                              "flashtune run experiments/weighted_row_sum_sweep.yaml", "node17",
                              "GPU-1234", "12.8", "13.0", "13.0", "abc123", "h100-sm_90a", "0",
                              "2500.0", "1", "32"}));

  const auto tr = store.trials(run);
  ASSERT_EQ(tr.size(), 1u);
  EXPECT_EQ(tr[0].trial_id, trial_id);
  EXPECT_EQ(tr[0].run_id, run);
  EXPECT_EQ(tr[0].experiment, "weighted_row_sum_sweep");
  EXPECT_EQ(tr[0].experiment_path, "experiments/weighted_row_sum_sweep.yaml");
  EXPECT_EQ(tr[0].gpu, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(tr[0].family, "weighted_row_sum");
  EXPECT_EQ(tr[0].stage, "fwd");
  EXPECT_EQ(tr[0].problem, "cols=4096,rows=16384,dtype=f16");
  EXPECT_EQ(tr[0].config, "block=256,vec=4");
  EXPECT_EQ(tr[0].status, "ok");
  EXPECT_EQ(tr[0].reason, "");
  EXPECT_EQ(tr[0].median_ms, 0.5);
  EXPECT_EQ(tr[0].gbps, 200.0);
  EXPECT_EQ(tr[0].tflops, 2.0);
  EXPECT_EQ(tr[0].n_samples, 3);
  EXPECT_FALSE(tr[0].stopped_early);
  EXPECT_TRUE(tr[0].measured());
  EXPECT_DOUBLE_EQ(tr[0].rel_noise(), 0.01);
  EXPECT_EQ(tr[0].source_hash, "src1");
  EXPECT_EQ(tr[0].device_key, "h100-sm_90a");
  EXPECT_EQ(tr[0].copy_gbps, 2500.0);
  EXPECT_EQ(tr[0].registers, 40);
  EXPECT_EQ(tr[0].spill_bytes, 20);
  EXPECT_EQ(tr[0].shared_static_bytes, 1024);
  EXPECT_EQ(tr[0].compile_ms, 123.5);
  EXPECT_EQ(store.trials(run, "softmax").size(), 0u);
  EXPECT_EQ(store.trials(0, "weighted_row_sum").size(), 1u);
  EXPECT_EQ(store.trials(run + 1).size(), 0u);

  const QueryResult t = store.sql(
      "SELECT seed, median_ms, iqr_ms, min_ms, max_ms, mean_ms, rel_stdev, converged, cold, "
      "n_samples, samples_json, tflops, max_abs_err, max_rel_err, naive_err, tolerance, nan_count, "
      "stopped_early, reason, source_hash, device_key, experiment_name FROM trials");
  const auto& row = t.rows.at(0);
  EXPECT_EQ(static_cast<std::uint64_t>(std::stoll(row[0])), 0xfedcba9876543210ULL);
  EXPECT_DOUBLE_EQ(std::stod(row[1]), 0.5);
  EXPECT_DOUBLE_EQ(std::stod(row[2]), 0.01);
  EXPECT_DOUBLE_EQ(std::stod(row[3]), 0.495);
  EXPECT_DOUBLE_EQ(std::stod(row[4]), 0.505);
  EXPECT_DOUBLE_EQ(std::stod(row[5]), 0.5);
  EXPECT_DOUBLE_EQ(std::stod(row[6]), 0.01);
  EXPECT_EQ(row[7], "1");
  EXPECT_EQ(row[8], "1");
  EXPECT_EQ(row[9], "3");
  EXPECT_EQ(row[10], "[0.505,0.5,0.495]");
  EXPECT_DOUBLE_EQ(std::stod(row[11]), 2.0);
  EXPECT_DOUBLE_EQ(std::stod(row[12]), 1e-3);
  EXPECT_DOUBLE_EQ(std::stod(row[13]), 2e-3);
  EXPECT_DOUBLE_EQ(std::stod(row[14]), 1e-3);
  EXPECT_DOUBLE_EQ(std::stod(row[15]), 2.5e-3);
  EXPECT_EQ(row[16], "0");
  EXPECT_EQ(row[17], "0");
  EXPECT_EQ(row[18], "");
  EXPECT_EQ(row[19], "src1");
  EXPECT_EQ(row[20], "h100-sm_90a");
  EXPECT_EQ(row[21], "weighted_row_sum_sweep");

  const QueryResult k = store.sql(
      "SELECT cache_key, family, arch, options, nvrtc_version, source_hash, lowered_name, ok, log, "
      "registers, spill_store_bytes, spill_load_bytes, stack_frame_bytes, shared_static_bytes, "
      "cubin_bytes, compile_ms, name_expression, constant_bytes FROM compiles");
  ASSERT_EQ(k.rows.size(), 1u);
  EXPECT_EQ(k.rows[0], (std::vector<std::string>{
                           "ck1", "weighted_row_sum", "sm_90a", "-std=c++17 --gpu-architecture=sm_90a",
                           "13.0", "src1", "_Z23weighted_row_sum_kernelI6__halfLi256ELi4EEvPKT_", "1",
                           "ptxas info    : Used 40 registers", "40", "8", "12", "16", "1024", "9876",
                           "123.5", "weighted_row_sum_kernel<__half, 256, 4>", "360"}));

  const QueryResult p = store.sql("SELECT json_extract(p.json, '$.dims.rows'), "
                                  "json_extract(p.json, '$.dtype'), json_extract(c.json, '$.block'), "
                                  "c.hash FROM problems p, configs c");
  EXPECT_EQ(p.rows.at(0), (std::vector<std::string>{"16384", "f16", "256", core::hash_hex("block=256,vec=4")}));

  const auto b = store.best();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].trial.trial_id, trial_id);
  EXPECT_DOUBLE_EQ(b[0].copy_ratio.value_or(0), 0.08);  // 200 / 2500
  EXPECT_EQ(b[0].ok_trials, 1);
}

TEST_F(StoreTest, BestPicksLowestOkMedianAndIgnoresIncorrectCrashedAndStoppedEarly) {
  Store store(db_path());
  const auto run = store.begin_run(run_info());
  using core::TrialStatus;
  store.record_trial(trial(run, config(64), TrialStatus::ok, 2.0));
  const auto winner = store.record_trial(trial(run, config(128), TrialStatus::ok, 1.5));
  store.record_trial(trial(run, config(256), TrialStatus::incorrect, 0.5));  // fast but wrong
  auto crashed = trial(run, config(512), TrialStatus::crashed, 0.25);
  store.record_trial(crashed);
  auto early = trial(run, config(1024), TrialStatus::ok, 0.1);
  early.result.timing->stopped_early = true;  // abandoned against an incumbent: not a full measurement
  store.record_trial(early);
  auto unmeasured = trial(run, config(32), TrialStatus::compiled, 0);
  unmeasured.result.timing.reset();
  store.record_trial(unmeasured);
  // Another problem (f32) and another family each get their own row.
  auto other_problem = trial(run, config(64), TrialStatus::ok, 3.0);
  other_problem.problem = problem(16384, core::DType::f32);
  const auto other_problem_id = store.record_trial(other_problem);
  auto other_family = trial(run, config(64), TrialStatus::ok, 0.05);
  other_family.family = "softmax";
  store.record_trial(other_family);

  const auto b = store.best("weighted_row_sum");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].trial.problem, "cols=4096,rows=16384,dtype=f16");
  EXPECT_EQ(b[0].trial.config, "block=128,vec=4");
  EXPECT_EQ(b[0].trial.trial_id, winner);
  EXPECT_EQ(b[0].trial.median_ms, 1.5);
  EXPECT_EQ(b[0].ok_trials, 2);
  EXPECT_FALSE(b[0].copy_ratio);  // no copy bandwidth measured
  EXPECT_EQ(b[1].trial.problem, "cols=4096,rows=16384,dtype=f32");
  EXPECT_EQ(b[1].trial.trial_id, other_problem_id);
  EXPECT_EQ(store.best().size(), 3u);
  EXPECT_EQ(store.best("no_such_family").size(), 0u);

  // The same problem on another GPU is ranked separately.
  auto h200 = run_info();
  h200.gpu_name = "NVIDIA H200";
  const auto run2 = store.begin_run(h200);
  store.record_trial(trial(run2, config(64), TrialStatus::ok, 9.0));
  EXPECT_EQ(store.best("weighted_row_sum").size(), 3u);
}

TEST_F(StoreTest, HistoryTrialsAreTheOtherProblemsOfOneFamilyStageAndDeviceInIdOrder) {
  Store store(db_path());
  const auto run = store.begin_run(run_info());
  using core::TrialStatus;
  const core::Problem here = problem(16384), near = problem(8192), far = problem(4096, core::DType::f32);
  auto on = [](const core::Problem& p, db::TrialRecord t) {
    t.problem = p;
    return t;
  };
  store.record_trial(on(near, trial(run, config(64), TrialStatus::ok, 2.5)));
  store.record_trial(on(here, trial(run, config(64), TrialStatus::ok, 1.0)));  // the problem searched: not history
  auto early = on(far, trial(run, config(128), TrialStatus::ok, 0.75));
  early.result.timing->stopped_early = true;
  store.record_trial(early);
  auto unmeasured = on(near, trial(run, config(128), TrialStatus::incorrect, 0));
  unmeasured.result.timing.reset();
  store.record_trial(unmeasured);
  auto compiled = on(near, trial(run, config(256), TrialStatus::compiled, 0));  // only compiled: not history
  compiled.result.timing.reset();
  store.record_trial(compiled);
  store.record_trial(on(near, trial(run, config(256), TrialStatus::ok, 0.5, "src1", "h200-sm_90a")));  // other device
  auto bwd = on(near, trial(run, config(256), TrialStatus::ok, 0.5));
  bwd.stage = "bwd";
  store.record_trial(bwd);
  auto softmax = on(near, trial(run, config(256), TrialStatus::ok, 0.5));
  softmax.family = "softmax";
  store.record_trial(softmax);
  auto other_experiment = on(near, trial(run, config(64), TrialStatus::ok, 1.0 / 3, "src2"));  // later, other source
  other_experiment.experiment_name = "another_sweep";
  store.record_trial(other_experiment);

  const auto h = store.history_trials("weighted_row_sum", "fwd", "h100-sm_90a", here.key());
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0].problem, "cols=4096,rows=8192,dtype=f16");
  EXPECT_EQ(db::problem_from_json(h[0].problem_json).dims.at("rows"), 8192);
  EXPECT_EQ(h[0].config, "block=64,vec=4");
  EXPECT_EQ(h[0].status, "ok");
  EXPECT_EQ(h[0].median_ms, 2.5);
  EXPECT_FALSE(h[0].stopped_early);
  EXPECT_EQ(h[1].problem, "cols=4096,rows=4096,dtype=f32");
  EXPECT_EQ(db::problem_from_json(h[1].problem_json).dtype, core::DType::f32);
  EXPECT_EQ(h[1].config, "block=128,vec=4");
  EXPECT_EQ(h[1].median_ms, 0.75);
  EXPECT_TRUE(h[1].stopped_early);
  EXPECT_EQ(h[2].config, "block=128,vec=4");
  EXPECT_EQ(h[2].status, "incorrect");
  EXPECT_FALSE(h[2].median_ms);  // not measured
  EXPECT_EQ(h[3].problem, "cols=4096,rows=8192,dtype=f16");
  EXPECT_EQ(h[3].config, "block=64,vec=4");
  EXPECT_EQ(h[3].median_ms, 0.333333333333333);  // 15 significant digits, as Store::sql's text gave them
  // Every problem but the one searched: excluding another problem gives the searched one's trial instead.
  const auto others = store.history_trials("weighted_row_sum", "fwd", "h100-sm_90a", near.key());
  ASSERT_EQ(others.size(), 2u);
  EXPECT_EQ(others[0].problem, here.key());
  EXPECT_EQ(others[0].median_ms, 1.0);
  EXPECT_EQ(others[1].problem, far.key());
  EXPECT_TRUE(store.history_trials("weighted_row_sum", "fwd", "no_such_device", here.key()).empty());
}

TEST_F(StoreTest, FindTrialResumesOnlyTheSameSourceAndDevice) {
  Store store(db_path());
  const auto run = store.begin_run(run_info());
  const std::string problem_key = problem().key(), config_key = config(256).key();
  EXPECT_FALSE(store.find_trial("weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem_key,
                                config_key, "src1", "h100-sm_90a"));
  store.record_trial(trial(run, config(256), core::TrialStatus::crashed, 1.0));
  auto find = [&](const std::string& stage, const std::string& cfg, const std::string& src,
                  const std::string& device) {
    return store.find_trial("weighted_row_sum_sweep", stage, "weighted_row_sum", problem_key, cfg,
                            src, device);
  };
  EXPECT_EQ(find("fwd", config_key, "src1", "h100-sm_90a"), core::TrialStatus::crashed);
  EXPECT_FALSE(find("fwd", config_key, "src2", "h100-sm_90a"));    // template edited
  EXPECT_FALSE(find("fwd", config_key, "src1", "h200-sm_90a"));    // other device
  EXPECT_FALSE(find("bwd", config_key, "src1", "h100-sm_90a"));    // other stage
  EXPECT_FALSE(find("fwd", config(128).key(), "src1", "h100-sm_90a"));
  EXPECT_FALSE(store.find_trial("other_experiment", "fwd", "weighted_row_sum", problem_key,
                                config_key, "src1", "h100-sm_90a"));
  // The latest record wins (a re-run of a crashed config).
  store.record_trial(trial(run, config(256), core::TrialStatus::ok, 1.0));
  EXPECT_EQ(find("fwd", config_key, "src1", "h100-sm_90a"), core::TrialStatus::ok);
}

TEST_F(StoreTest, MigratesVersion1DatabaseKeepingItsRows) {
  {
    Raw raw(db_path());
    write_version1_db(raw);
    ASSERT_TRUE(raw.query("SELECT name FROM pragma_table_info('trials') WHERE name = 'stopped_early'").empty());
  }
  Store store(db_path());
  EXPECT_EQ(store.version(), Store::latest_version());
  EXPECT_EQ(store.sql("PRAGMA user_version").rows.at(0).at(0), std::to_string(Store::latest_version()));
  // The old rows survive, gain the new columns, and the old run got a uid.
  const QueryResult t = store.sql("SELECT median_ms, stopped_early FROM trials");
  EXPECT_EQ(t.rows, (std::vector<std::vector<std::string>>{{"0.75", ""}}));
  EXPECT_EQ(store.sql("SELECT length(uid) FROM runs").rows.at(0).at(0), "32");
  EXPECT_EQ(store.sql("SELECT count(*) FROM pragma_index_list('trials') WHERE name = 'trials_for_resume'")
                .rows.at(0).at(0),
            "1");
  EXPECT_EQ(store.find_trial("old_sweep", "fwd", "softmax", "rows=8,dtype=f32", "block=32", "s", "a100"),
            core::TrialStatus::ok);
  // And new trials go in next to them.
  const auto run = store.begin_run(run_info());
  store.record_trial(trial(run, config(256), core::TrialStatus::ok, 1.0));
  EXPECT_EQ(store.sql("SELECT count(*) FROM trials").rows.at(0).at(0), "2");
}

TEST_F(StoreTest, RefusesADatabaseWithANewerSchema) {
  { Store store(db_path()); }
  const int newer = Store::latest_version() + 1;
  { Raw(db_path()).exec("PRAGMA user_version = " + std::to_string(newer)); }
  try {
    Store store(db_path());
    FAIL() << "a newer schema was opened";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(newer)), std::string::npos) << e.what();
  }
  Raw raw(db_path());
  EXPECT_EQ(raw.query("PRAGMA user_version").at(0).at(0), std::to_string(newer));  // untouched
}

TEST_F(StoreTest, SqlRefusesEveryWrite) {
  Store store(db_path());
  const auto run = store.begin_run(run_info());
  store.record_trial(trial(run, config(256), core::TrialStatus::ok, 1.0));
  for (const std::string bad :
       {"INSERT INTO runs (experiment_name) VALUES ('x')", "DELETE FROM trials",
        "UPDATE trials SET median_ms = 0", "DROP TABLE trials", "CREATE TABLE x (a)",
        "PRAGMA user_version = 9", "PRAGMA journal_mode = DELETE", "PRAGMA journal_mode", "PRAGMA query_only = OFF",
        "PRAGMA wal_checkpoint", "ATTACH DATABASE ':memory:' AS other", "BEGIN",
        "WITH x AS (SELECT 1) DELETE FROM trials", "SELECT 1; DELETE FROM trials",
        "REPLACE INTO configs (family, key, hash, json) VALUES ('a', 'b', 'c', 'd')", "VACUUM",
        "REINDEX", "ANALYZE", "UPDATE sqlite_master SET sql = ''", "PRAGMA optimize"}) {
    EXPECT_THROW(store.sql(bad), core::UserError) << bad;
  }
  EXPECT_THROW(store.sql("SELEKT 1"), core::UserError);
  EXPECT_EQ(store.sql("SELECT count(*), min(median_ms) FROM trials").rows.at(0),
            (std::vector<std::string>{"1", "1.0"}));
  EXPECT_EQ(store.sql("PRAGMA user_version").rows.at(0).at(0), std::to_string(Store::latest_version()));
  EXPECT_EQ(store.sql("SELECT * FROM pragma_journal_mode").rows.at(0).at(0), "wal");
  // Pragma functions with a value either fail or do not change anything.
  for (const std::string sneaky : {"SELECT * FROM pragma_journal_mode('delete')",
                                   "SELECT * FROM pragma_user_version(9)"}) {
    try {
      store.sql(sneaky);
    } catch (const core::Error&) {
    }
  }
  EXPECT_EQ(Raw(db_path()).query("PRAGMA journal_mode").at(0).at(0), "wal");  // WAL persists in the file
  EXPECT_EQ(store.version(), Store::latest_version());
  EXPECT_FALSE(store.sql("PRAGMA table_info(trials)").rows.empty());
  EXPECT_EQ(store.sql("WITH x AS (SELECT 2 AS a) SELECT a, NULL FROM x").rows.at(0),
            (std::vector<std::string>{"2", ""}));
  // The store still writes after sql() (query_only was switched back off).
  store.record_trial(trial(run, config(128), core::TrialStatus::ok, 1.0));
  EXPECT_EQ(store.sql("SELECT count(*) FROM trials").rows.at(0).at(0), "2");
}

TEST_F(StoreTest, SchemaFileEqualsTheMigratedSchema) {
  EXPECT_EQ(std::string(Store::schema_sql()),
            read_text(std::filesystem::path(FT_SOURCE_DIR) / "db/schema.sql"));  // embedded = source
  { Store store(db_path()); }
  Raw migrated(db_path());
  Raw documented(m_dir / "from_schema.db");
  documented.exec(std::string(Store::schema_sql()));
  const std::string a = describe_schema(migrated), b = describe_schema(documented);
  EXPECT_NE(a.find("column 0 id INTEGER"), std::string::npos) << a;
  EXPECT_NE(a.find("index trials_for_resume on trials"), std::string::npos) << a;
  EXPECT_EQ(a, b);
}

TEST_F(StoreTest, RejectsBadRunsWithoutLeavingPartialRows) {
  Store store(db_path());
  EXPECT_THROW(store.record_trial(trial(99, config(256), core::TrialStatus::ok, 1.0)), core::Error);
  EXPECT_EQ(store.sql("SELECT count(*) FROM problems").rows.at(0).at(0), "0");  // rolled back
  const auto run = store.begin_run(run_info());
  EXPECT_THROW(store.finish_run(run, "done"), core::Error);
  EXPECT_THROW(store.finish_run(run + 1, "failed"), core::Error);
  EXPECT_THROW(store.set_copy_bandwidth(run + 1, 1.0), core::Error);
  store.finish_run(run, "interrupted");
  EXPECT_EQ(store.runs().at(0).status, "interrupted");
}

TEST_F(StoreTest, StoreErrorCarriesCodeCallAndLocation) {
  std::filesystem::create_directories(m_dir);
  { std::ofstream(m_dir / "not_a_db") << std::string(4096, 'x'); }
  try {
    Store store(m_dir / "not_a_db");
    FAIL() << "opened a file that is not a database";
  } catch (const db::StoreError& e) {
    EXPECT_EQ(e.code() & 0xff, SQLITE_NOTADB) << e.what();
    EXPECT_NE(std::string(e.what()).find((m_dir / "not_a_db").string()), std::string::npos) << "names the file: " << e.what();
    EXPECT_FALSE(e.call().empty());
    EXPECT_NE(e.file().find("store.cpp"), std::string::npos) << e.file();
    EXPECT_GT(e.line(), 0);
  }
}

TEST_F(StoreTest, TrialSurvivesTheProcessBeingKilled) {
  std::filesystem::create_directories(db_path().parent_path());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // never returns: no gtest in here
    try {
      Store store(db_path());
      const auto run = store.begin_run(run_info());
      store.record_trial(trial(run, config(256), core::TrialStatus::ok, 1.0));
    } catch (...) {
      _exit(3);
    }
    raise(SIGKILL);  // in the middle of the Store's life: nothing closed, no checkpoint
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  Store store(db_path());
  EXPECT_EQ(store.find_trial("weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem().key(),
                             config(256).key(), "src1", "h100-sm_90a"),
            core::TrialStatus::ok);
  // Never finished, and its process is gone: marked interrupted (issue 23; it stayed 'running' forever).
  EXPECT_EQ(store.runs().at(0).status, "interrupted");
  EXPECT_EQ(store.sql("SELECT status, finished_at IS NOT NULL FROM runs").rows.at(0),
            (std::vector<std::string>{"interrupted", "1"}));
}

TEST_F(StoreTest, AllTrialsBeforeAKillMidRunArePresent) {
  std::filesystem::create_directories(db_path().parent_path());
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    try {
      Store store(db_path());
      const auto run = store.begin_run(run_info());
      for (int i = 0; i < 100000; ++i) {  // until killed
        store.record_trial(trial(run, config(i + 1), core::TrialStatus::ok, 1.0 + i));
        const char done = 1;
        if (write(pipe_fds[1], &done, 1) != 1) _exit(5);  // tell the parent trial i is committed
      }
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  close(pipe_fds[1]);
  constexpr int kCommitted = 7;
  for (int got = 0; got < kCommitted;) {
    char c;
    ASSERT_EQ(read(pipe_fds[0], &c, 1), 1) << "child died early";
    ++got;
  }
  kill(child, SIGKILL);  // most likely in the middle of trial kCommitted + 1
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(pipe_fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;

  Store store(db_path());
  for (int i = 0; i < kCommitted; ++i)
    EXPECT_EQ(store.find_trial("weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem().key(),
                               config(i + 1).key(), "src1", "h100-sm_90a"),
              core::TrialStatus::ok)
        << "trial " << i;
  EXPECT_GE(std::stoi(store.sql("SELECT count(*) FROM trials").rows.at(0).at(0)), kCommitted);
  EXPECT_EQ(store.sql("PRAGMA integrity_check").rows.at(0).at(0), "ok");
  // No half-recorded trial: every trial has its problem and config.
  EXPECT_EQ(store.sql("SELECT count(*) FROM trials t LEFT JOIN configs c ON c.id = t.config_id "
                      "WHERE c.id IS NULL").rows.at(0).at(0),
            "0");
}

TEST_F(StoreTest, TwoProcessesWriteConcurrentlyWithoutLosingTrials) {
  { Store store(db_path()); }  // migrate once, then race
  constexpr int kPerProcess = 40;
  auto write_trials = [&](int offset) {
    Store store(db_path());
    const auto run = store.begin_run(run_info());
    for (int i = 0; i < kPerProcess; ++i)
      store.record_trial(trial(run, config(offset + i), core::TrialStatus::ok, 1.0));
  };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      write_trials(1000);
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  write_trials(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  Store store(db_path());
  EXPECT_EQ(store.sql("SELECT count(*) FROM trials").rows.at(0).at(0), std::to_string(2 * kPerProcess));
  EXPECT_EQ(store.runs().size(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Store::merge_from (flashtune db merge)

namespace {

std::string file_bytes(const std::filesystem::path& p) { return read_text(p); }

// (run uid, problem, config, status, median) of every trial, sorted: what a merge must carry over.
std::vector<std::vector<std::string>> merged_view(const Store& s) {
  auto q = s.sql(
      "SELECT r.uid, p.key, c.key, t.status, t.median_ms, t.samples_json, coalesce(k.cache_key, '') "
      "FROM trials t JOIN runs r ON r.id = t.run_id JOIN problems p ON p.id = t.problem_id "
      "JOIN configs c ON c.id = t.config_id LEFT JOIN compiles k ON k.id = t.compile_id ORDER BY 1, 2, 3");
  return q.rows;
}

}  // namespace

TEST_F(StoreTest, MergeJoinsDatabasesWithoutDuplicatesAndAgainAddsNothing) {
  const auto a = m_dir / "a.sqlite", b = m_dir / "b.sqlite", all = m_dir / "all.sqlite";
  std::vector<std::vector<std::string>> expected;
  {
    Store sa(a), sb(b);
    const auto ra = sa.begin_run(run_info());
    auto t = trial(ra, config(128), core::TrialStatus::ok, 1.0);
    t.result.compile = compile_record("key128");
    sa.record_trial(t);
    sa.record_trial(trial(ra, config(256), core::TrialStatus::incorrect, 2.0));
    sa.finish_run(ra, "finished");
    const auto rb = sb.begin_run(run_info());
    t = trial(rb, config(512), core::TrialStatus::ok, 0.5);
    t.result.compile = compile_record("key128");  // the same cubin: one compile row
    sb.record_trial(t);
    sb.record_trial(trial(rb, config(256), core::TrialStatus::ok, 3.0));  // a's key: not added again
    for (const Store* s : {&sa, &sb})
      for (auto& row : merged_view(*s)) expected.push_back(row);
  }
  const std::string a_bytes = file_bytes(a), b_bytes = file_bytes(b);
  Store out(all);
  const auto na = out.merge_from(a);
  EXPECT_EQ(na.runs_added, 1);
  EXPECT_EQ(na.trials_added, 2);
  EXPECT_EQ(na.compiles_added, 1);
  const auto nb = out.merge_from(b);
  EXPECT_EQ(nb.runs_added, 1);
  EXPECT_EQ(nb.trials_added, 1);
  EXPECT_EQ(nb.trials_known, 1);
  EXPECT_EQ(nb.compiles_added, 0);
  // b's trial of config 256 shares a's resume key and is left out; the rest arrive whole, linked right.
  expected.erase(std::remove_if(expected.begin(), expected.end(),
                                [](const auto& r) { return r[2] == "block=256,vec=4" && r[3] == "ok"; }),
                 expected.end());
  std::sort(expected.begin(), expected.end());
  auto got = merged_view(out);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(out.sql("SELECT count(*) FROM runs").rows.at(0).at(0), "2");
  EXPECT_EQ(out.find_trial("weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem().key(),
                           config(512).key(), "src1", "h100-sm_90a"),
            core::TrialStatus::ok);

  for (const auto& in : {a, b}) {  // idempotent
    const auto again = out.merge_from(in);
    EXPECT_EQ(again.runs_added + again.trials_added + again.compiles_added, 0);
    EXPECT_EQ(again.runs_known, 1);
  }
  EXPECT_EQ(out.sql("SELECT count(*) FROM trials").rows.at(0).at(0), "3");
  EXPECT_EQ(file_bytes(a), a_bytes);  // the inputs are never written
  EXPECT_EQ(file_bytes(b), b_bytes);
}

// A warm start (v5) is recorded against its run and travels with it through a merge, once.
TEST_F(StoreTest, WarmStartsAreRecordedAndMergedWithTheirRun) {
  const auto a = m_dir / "wa.sqlite", all = m_dir / "wall.sqlite";
  std::string uid;
  {
    Store sa(a);
    sa.begin_run(run_info());  // a run without a warm start, so that the ids of the two files differ
    const auto r = sa.begin_run(run_info());
    sa.record_warm_start(r, "attn_fwd", "forward", "seq=2048,dtype=bf16", R"([{"problem":"seq=1024,dtype=bf16"}])",
                         R"(["block_m=64"])");
    uid = sa.sql("SELECT uid FROM runs WHERE id = " + std::to_string(r)).rows.at(0).at(0);
  }
  Store out(all);
  out.begin_run(run_info());  // occupies id 1 here
  out.merge_from(a);
  out.merge_from(a);  // again: nothing new
  const auto q = out.sql("SELECT r.uid, w.family, w.stage, w.problem_key, w.sources, w.first FROM warm_starts w "
                         "JOIN runs r ON r.id = w.run_id");
  ASSERT_EQ(q.rows.size(), 1u);
  EXPECT_EQ(q.rows[0], (std::vector<std::string>{uid, "attn_fwd", "forward", "seq=2048,dtype=bf16",
                                                 R"([{"problem":"seq=1024,dtype=bf16"}])", R"(["block_m=64"])"}));
}

TEST_F(StoreTest, MergeTakesAnOlderSchemaWithoutMigratingTheInput) {
  const auto old = m_dir / "old.sqlite";
  {
    Raw raw(old);
    write_version1_db(raw);
  }
  Store out(m_dir / "all.sqlite");
  EXPECT_EQ(out.merge_from(old).trials_added, 1);
  EXPECT_EQ(out.find_trial("old_sweep", "fwd", "softmax", "rows=8,dtype=f32", "block=32", "s", "a100"),
            core::TrialStatus::ok);
  EXPECT_EQ(Raw(old).query("PRAGMA user_version").at(0).at(0), "1");
}

TEST_F(StoreTest, MergeRefusesMissingForeignAndNewerFilesWithOneLine) {
  const auto all = m_dir / "all.sqlite";
  Store out(all);
  auto refused = [&](const std::filesystem::path& p, const std::string& words) {
    try {
      out.merge_from(p);
      ADD_FAILURE() << p << " was merged";
    } catch (const core::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(p.string() + ": " + words), std::string::npos) << e.what();
    }
  };
  refused(m_dir / "missing.sqlite", "no such file");
  std::ofstream(m_dir / "notes.txt") << "not a database, though long enough to look like one? no.\n";
  refused(m_dir / "notes.txt", "not an SQLite database");
  { Raw(m_dir / "other.sqlite").exec("CREATE TABLE runs (x); CREATE TABLE trials (y)"); }
  refused(m_dir / "other.sqlite", "not a flashtune database");
  { Store newer(m_dir / "newer.sqlite"); }
  { Raw(m_dir / "newer.sqlite").exec("PRAGMA user_version = " + std::to_string(Store::latest_version() + 1)); }
  refused(m_dir / "newer.sqlite", "database schema version");
  refused(all, "is the output database itself");
  { Store bad(m_dir / "bad.sqlite"); }
  { Raw(m_dir / "bad.sqlite").exec("ALTER TABLE trials DROP COLUMN device_bytes"); }
  refused(m_dir / "bad.sqlite", "schema mismatch: table trials has no column device_bytes");
  EXPECT_EQ(out.sql("SELECT count(*) FROM runs").rows.at(0).at(0), "0");
}

TEST_F(StoreTest, FindTrialResultGivesTheRecordedTimeBackForResume) {
  Store store(db_path());
  const auto run = store.begin_run(run_info());
  store.record_trial(trial(run, config(256), core::TrialStatus::ok, 0.25));
  auto t = trial(run, config(128), core::TrialStatus::compiled, 1.0);
  t.result.timing.reset();  // compile-only: no time
  store.record_trial(t);
  const auto ok = store.find_trial_result("weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem().key(),
                                          config(256).key(), "src1", "h100-sm_90a");
  ASSERT_TRUE(ok && ok->timing);
  EXPECT_EQ(ok->status, core::TrialStatus::ok);
  EXPECT_DOUBLE_EQ(ok->timing->median_ms, 0.25);
  EXPECT_EQ(ok->timing->samples_ms, (std::vector<double>{0.25 * 1.01, 0.25, 0.25 * 0.99}));
  EXPECT_TRUE(ok->timing->converged);
  EXPECT_FALSE(ok->timing->stopped_early);
  EXPECT_DOUBLE_EQ(ok->gbps, 100.0 / 0.25);
  EXPECT_FALSE(ok->timing->sm_clock_mhz);  // recorded without a clock: NULL, read back as unknown
  EXPECT_FALSE(ok->timing->power_capped);
  const auto compiled = store.find_trial_result("weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem().key(),
                                                config(128).key(), "src1", "h100-sm_90a");
  ASSERT_TRUE(compiled);
  EXPECT_EQ(compiled->status, core::TrialStatus::compiled);
  EXPECT_FALSE(compiled->timing);
  EXPECT_EQ(compiled->reason, "because compiled");
}

// The SM clock and power-cap fraction a trial's samples ran at (v7) are stored and read back with its time.
TEST_F(StoreTest, TrialClocksRoundTrip) {
  Store store(db_path());
  const auto run = store.begin_run(run_info());
  auto t = trial(run, config(256), core::TrialStatus::ok, 0.25);
  t.result.timing->sm_clock_mhz = 1722.5;
  t.result.timing->power_capped = 0.8;
  store.record_trial(t);
  const auto back = store.find_trial_result("weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem().key(),
                                            config(256).key(), "src1", "h100-sm_90a");
  ASSERT_TRUE(back && back->timing);
  ASSERT_TRUE(back->timing->sm_clock_mhz && back->timing->power_capped);
  EXPECT_DOUBLE_EQ(*back->timing->sm_clock_mhz, 1722.5);
  EXPECT_DOUBLE_EQ(*back->timing->power_capped, 0.8);
  EXPECT_EQ(store.sql("SELECT sm_clock_mhz, power_capped FROM trials").rows.at(0),
            (std::vector<std::string>{"1722.5", "0.8"}));
}

// ---------------------------------------------------------------------------------------------
// Issue 23: claims, read-only opens, corruption, runs whose process is gone.

namespace {

db::ResumeKey resume_key(const core::Config& c) {
  return {"weighted_row_sum_sweep", "fwd", "weighted_row_sum", problem().key(), c.key(), "src1", "h100-sm_90a"};
}

// A database at schema version 3 (migrations 1-3) holding the same trial twice, as two processes running
// one experiment at once recorded it before version 4.
void write_version3_db_with_duplicates(Raw& raw) {
  for (const char* m : {"001_initial.sql", "002_resume_and_early_stop.sql", "003_device_bytes.sql"})
    raw.exec(read_text(std::filesystem::path(FT_SOURCE_DIR) / "db/migrations" / m));
  raw.exec("PRAGMA user_version = 3");
  raw.exec("INSERT INTO runs (experiment_name, device_key, uid) VALUES ('dup', 'a100', 'u1'), ('dup', 'a100', 'u2')");
  raw.exec("INSERT INTO problems (family, key, json) VALUES ('softmax', 'rows=8,dtype=f32', '{}')");
  raw.exec("INSERT INTO configs (family, key, hash, json) VALUES ('softmax', 'block=32', 'h', '{}')");
  for (const char* run : {"1", "2"})
    raw.exec(std::string("INSERT INTO trials (run_id, experiment_name, family, stage, problem_id, config_id, "
                         "source_hash, device_key, status, median_ms) VALUES (") +
             run + ", 'dup', 'softmax', 'fwd', 1, 1, 's', 'a100', 'ok', 0.5)");
}

}  // namespace

// Two writers of one experiment recorded 22-25 of 27 trials twice: each key is now claimed once.
TEST_F(StoreTest, ClaimGivesEachResumeKeyToOneRunAndSaysWhoHasIt) {
  Store a(db_path()), b(db_path());  // two connections, as two processes
  const auto run_a = a.begin_run(run_info()), run_b = b.begin_run(run_info());
  const auto key = resume_key(config(256));
  EXPECT_EQ(a.claim_trial(run_a, key).outcome, db::Claim::Outcome::claimed);
  const auto other = b.claim_trial(run_b, key);
  EXPECT_EQ(other.outcome, db::Claim::Outcome::taken);
  EXPECT_EQ(other.holder_run, run_a);
  EXPECT_NE(other.holder.find("run " + std::to_string(run_a) + " (pid " + std::to_string(::getpid())), std::string::npos)
      << other.holder;
  EXPECT_EQ(a.claim_trial(run_a, key).outcome, db::Claim::Outcome::claimed);  // its own claim again
  a.record_trial(trial(run_a, config(256), core::TrialStatus::ok, 1.0));
  const auto done = b.claim_trial(run_b, key);
  ASSERT_EQ(done.outcome, db::Claim::Outcome::recorded);
  EXPECT_EQ(done.recorded->status, core::TrialStatus::ok);
  // A claim of a run that ended (here: finished without recording it) is taken over.
  const auto key2 = resume_key(config(512));
  EXPECT_EQ(a.claim_trial(run_a, key2).outcome, db::Claim::Outcome::claimed);
  a.finish_run(run_a, "interrupted");
  EXPECT_EQ(b.claim_trial(run_b, key2).outcome, db::Claim::Outcome::claimed);
  EXPECT_EQ(b.sql("SELECT count(*) FROM trial_claims").rows.at(0).at(0), "2");
}

TEST_F(StoreTest, ConcurrentWritersThatClaimFirstRecordEveryTrialOnce) {
  { Store store(db_path()); }
  constexpr int kKeys = 30, kProcesses = 3;
  auto work = [&] {
    Store store(db_path());
    const auto run = store.begin_run(run_info());
    for (int i = 0; i < kKeys; ++i)
      if (store.claim_trial(run, resume_key(config(i + 1))).outcome == db::Claim::Outcome::claimed)
        store.record_trial(trial(run, config(i + 1), core::TrialStatus::ok, 1.0));
    store.finish_run(run, "finished");
  };
  std::vector<pid_t> children;
  for (int p = 1; p < kProcesses; ++p) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        work();
      } catch (...) {
        _exit(3);
      }
      _exit(0);
    }
    children.push_back(child);
  }
  work();
  for (const pid_t c : children) {
    int status = 0;
    ASSERT_EQ(waitpid(c, &status, 0), c);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  Store store(db_path());
  EXPECT_EQ(store.sql("SELECT count(*) FROM trials").rows.at(0).at(0), std::to_string(kKeys));
  EXPECT_EQ(store.sql("SELECT count(*) FROM (SELECT 1 FROM trials GROUP BY config_id HAVING count(*) > 1)")
                .rows.at(0).at(0),
            "0");
}

// Databases written before version 4 may hold a trial twice: they open, migrate and keep every row.
TEST_F(StoreTest, Version3DatabaseWithDuplicateTrialsMigratesKeepingEveryRow) {
  {
    Raw raw(db_path());
    write_version3_db_with_duplicates(raw);
  }
  Store store(db_path());
  EXPECT_EQ(store.version(), Store::latest_version());
  EXPECT_EQ(store.sql("SELECT count(*) FROM trials").rows.at(0).at(0), "2");
  EXPECT_EQ(store.sql("SELECT count(*) FROM runs WHERE owner_pid IS NULL").rows.at(0).at(0), "2");
  const auto key = db::ResumeKey{"dup", "fwd", "softmax", "rows=8,dtype=f32", "block=32", "s", "a100"};
  EXPECT_EQ(store.claim_trial(store.begin_run(run_info()), key).outcome, db::Claim::Outcome::recorded);
  // Pre-v4 runs have no owner: their liveness is unknown and they stay as recorded.
  EXPECT_EQ(store.runs().at(0).status, "running");
}

// A read-only open never writes: not the journal mode, not a migration, not a dead run's status.
TEST_F(StoreTest, ReadOnlyOpenWritesNothingAndMigratesAnOlderSchemaInMemory) {
  {
    Raw raw(db_path());
    write_version1_db(raw);
  }
  const std::string before = read_text(db_path());
  {
    Store ro(db_path(), Store::Access::read_only);
    EXPECT_EQ(ro.version(), Store::latest_version());  // the private copy is migrated
    EXPECT_EQ(ro.runs().size(), 1u);
    EXPECT_EQ(ro.best().at(0).trial.median_ms, 0.75);
    EXPECT_THROW(ro.begin_run(run_info()), db::StoreError);
  }
  EXPECT_EQ(read_text(db_path()), before);
  EXPECT_EQ(Raw(db_path()).query("PRAGMA journal_mode").at(0).at(0), "delete");
  EXPECT_EQ(Raw(db_path()).query("PRAGMA user_version").at(0).at(0), "1");
  EXPECT_FALSE(std::filesystem::exists(db_path().string() + "-wal"));
  try {
    Store missing(m_dir / "missing.sqlite", Store::Access::read_only);
    ADD_FAILURE() << "opened a missing file";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.sqlite: no such database file"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(m_dir / "missing.sqlite"));
}

// A partly corrupt file was not checked on open: `run` inserted a run row and then failed "malformed".
TEST_F(StoreTest, CorruptDatabaseIsRefusedNamingTheFileBeforeAnythingIsWritten) {
  {
    Store store(db_path());
    const auto run = store.begin_run(run_info());
    for (int i = 0; i < 200; ++i) store.record_trial(trial(run, config(i + 1), core::TrialStatus::ok, 1.0));
    store.finish_run(run, "finished");
  }
  std::string root_page;
  {
    Raw raw(db_path());
    raw.exec("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE");
    root_page = raw.query("SELECT rootpage FROM sqlite_master WHERE name = 'trials'").at(0).at(0);
  }
  {  // damage the cell pointers of the trials table's root page
    std::fstream f(db_path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((std::stoll(root_page) - 1) * 4096 + 12);
    const std::string junk(64, '\xff');
    f.write(junk.data(), std::streamsize(junk.size()));
  }
  const std::string before = read_text(db_path());
  try {
    Store store(db_path());
    ADD_FAILURE() << "opened a corrupt database";
  } catch (const core::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(db_path().string() + ": database is corrupt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nothing was written"), std::string::npos) << msg;
  }
  EXPECT_EQ(read_text(db_path()), before);
}

// A run killed with -9 stayed `running` forever. A read-only open shows it interrupted; a read-write one
// records it; a run whose process lives (this one) stays running.
TEST_F(StoreTest, RunWhoseProcessIsGoneShowsAndIsMarkedInterrupted) {
  std::int64_t mine = 0;
  {
    Store store(db_path());
    mine = store.begin_run(run_info());
  }
  // A child process that begins a run and is killed (SIGKILL) before it ends it.
  auto fork_killed_run = [&] {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        Store store(db_path());
        store.begin_run(run_info());
      } catch (...) {
        _exit(3);
      }
      raise(SIGKILL);
      _exit(4);
    }
    return pid;
  };
  const pid_t child = fork_killed_run();
  ASSERT_GE(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;
  const std::string killed = std::to_string(mine + 1);
  {
    Store ro(db_path(), Store::Access::read_only);
    const auto runs = ro.runs();
    EXPECT_EQ(runs.at(0).status, "running");
    EXPECT_EQ(runs.at(1).status, "interrupted");
    EXPECT_EQ(ro.sql("SELECT status FROM runs WHERE id = " + killed).rows.at(0).at(0), "running");  // not written
  }
  // Killed and not yet waited for by its parent (a zombie, as when `flashtune run &` is killed): gone too.
  const pid_t zombie = fork_killed_run();
  ASSERT_GE(zombie, 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, id_t(zombie), &info, WEXITED | WNOWAIT), 0);  // dead, not reaped
  EXPECT_EQ(Store(db_path(), Store::Access::read_only).runs().at(2).status, "interrupted");
  Store rw(db_path());
  ASSERT_EQ(waitpid(zombie, &status, 0), zombie);
  EXPECT_EQ(rw.sql("SELECT status FROM runs ORDER BY id").rows,
            (std::vector<std::vector<std::string>>{{"running"}, {"interrupted"}, {"interrupted"}}));
  EXPECT_EQ(rw.sql("SELECT owner_pid FROM runs WHERE id = " + std::to_string(mine)).rows.at(0).at(0),
            std::to_string(::getpid()));
}
