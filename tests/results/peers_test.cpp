// tests/results/peers_test.cpp: peer measurements (db peer_trials, `flashtune peers`) on CPU: recording and reading
// them, merging, their join with flashtune's best in `query peers`, grade, the course CSV and the report, the export
// left unchanged by them, and the `flashtune peers` command's child protocol and error paths (the Python side's
// GPU measurement is python/tests/test_peers_gpu.py, run on the GPU machine).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/results/results_fixture.hpp"

using namespace ft_results_test;
namespace db = flashtune::db;

namespace {

struct PeersTest : ::testing::Test {
  Temp tmp{"peers"};
  std::string db = (tmp.dir / "p.sqlite").string();
  void SetUp() override { FixtureDb fx(db); }
};

// A cuDNN backward of 5.2 ms on "NVIDIA H200" for `problem` in run `run` (power-capped at `mhz` when given).
void record_cudnn_bwd(db::Store& store, std::int64_t run, const std::string& experiment, const flashtune::core::Problem& problem,
                      std::optional<double> mhz) {
  db::PeerRecord r;
  r.run_id = run, r.experiment_name = experiment, r.peer = "sdpa_cudnn", r.library = "torch", r.pass = "bwd";
  r.problem = problem, r.device_key = "NVIDIA H200", r.status = "ok";
  flashtune::core::Timing t;
  t.samples_ms = {5.2, 5.2, 5.2};
  t.median_ms = t.mean_ms = t.min_ms = t.max_ms = 5.2;
  if (mhz) t.sm_clock_mhz = *mhz, t.power_capped = 1;
  r.timing = t;
  store.record_peer_trial(r);
}

}  // namespace

TEST_F(PeersTest, StoreRecordsTypedRowsAndRefusesUnknownPassOrStatus) {
  const auto run = add_fixture_peers(db);
  db::Store store(db, db::Store::Access::read_only);
  const auto rows = store.peer_trials(run);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].peer, "flex");
  EXPECT_EQ(rows[0].gpu, "NVIDIA H200");
  EXPECT_EQ(rows[0].problem, attn_problem(4096, 1).key());
  ASSERT_TRUE(rows[0].median_ms);
  EXPECT_DOUBLE_EQ(*rows[0].median_ms, 0.5);
  EXPECT_TRUE(rows[0].measured());
  EXPECT_FALSE(rows[1].measured());
  EXPECT_EQ(rows[1].reason, "no kernel for this mask");
  EXPECT_TRUE(store.peer_trials(run + 1).empty());
  EXPECT_EQ(store.peer_trials(0).size(), 4u);
  // a peer never becomes a trial: best and the trials table do not see it
  EXPECT_EQ(store.sql("SELECT count(*) FROM trials WHERE run_id = " + std::to_string(run)).rows.at(0).at(0), "0");

  db::Store rw(db);
  db::PeerRecord bad;
  bad.run_id = run, bad.peer = "flex", bad.pass = "both", bad.status = "ok", bad.problem = attn_problem(1024, 0);
  EXPECT_THROW(rw.record_peer_trial(bad), flashtune::core::Error);
  bad.pass = "bwd", bad.status = "fine";
  EXPECT_THROW(rw.record_peer_trial(bad), flashtune::core::Error);
}

TEST_F(PeersTest, MergeCopiesPeerMeasurementsOnce) {
  add_fixture_peers(db);
  const std::string out = (tmp.dir / "merged.sqlite").string();
  const auto first = run_cli("db merge " + db + " -o " + out);
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_NE(first.out.find("4 peer measurements"), std::string::npos) << first.out;
  const auto again = run_cli("db merge " + db + " -o " + out);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("0 peer measurements"), std::string::npos) << again.out;
  db::Store merged(out, db::Store::Access::read_only);
  const auto rows = merged.peer_trials();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[2].problem, attn_problem(1024, 0).key());
}

TEST_F(PeersTest, QueryPeersSetsTheLatestOfEachBesideFlashtunesBest) {
  add_fixture_peers(db);
  const auto r = run_cli("query peers --format csv --db " + db, false);
  ASSERT_EQ(r.status, 0) << r.out;
  // flashtune's best: L = 4096 causal 2.4 * 0.1 = 0.24 ms; L = 1024 non-causal 0.08 (run 2's faster config)
  EXPECT_NE(r.out.find("NVIDIA H200,fwd,flex,torch 2.11.0,ok,0.5,0.24,2.08,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA H200,fwd,sdpa_flash,torch 2.11.0,unsupported,,0.24,,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA H200,fwd,sdpa_cudnn,torch 2.11.0,ok,0.2,0.08,2.5,"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(",0.3,"), std::string::npos) << "the earlier sdpa_cudnn measurement is replaced: " << r.out;
  const auto none = run_cli("query peers other_experiment --db " + db);
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.out.find("no peer measurements of experiment 'other_experiment'"), std::string::npos) << none.out;
}

// The clocks beside the times: the peer's (its samples), and flashtune's backward's longest stage's (here the fused pass
// at 1673 MHz, not the preprocess at 1980), both as recorded by their trials (schema v7).
TEST_F(PeersTest, QueryPeersShowsTheClocksBothRanAt) {
  {
    db::Store store(db);
    const auto run = begin_fixture_run(store, "clocks");
    const auto p = attn_problem(2048, 0);
    auto pre = make_trial(run, "attn_bwd_preprocess", p, flashtune::core::Config{{{"block_m", 64}, {"num_warps", 4}}},
                          TrialStatus::ok, 0.05);
    pre.result.timing->sm_clock_mhz = 1980, pre.result.timing->power_capped = 0;
    auto fused = make_trial(run, "attn_bwd_fused", p, attn_config(64, 128, 8), TrialStatus::ok, 4.9);
    fused.result.timing->sm_clock_mhz = 1673, fused.result.timing->power_capped = 1;
    pre.experiment_name = fused.experiment_name = "clocks";
    store.record_trial(pre);
    store.record_trial(fused);
    record_cudnn_bwd(store, run, "clocks", p, 1683);
    store.finish_run(run, "finished");
  }
  const auto r = run_cli("query peers clocks --format csv --db " + db, false);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("NVIDIA H200,bwd,sdpa_cudnn,torch,ok,5.2,4.95,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(",1683,1673\n"), std::string::npos) << r.out;
}

// A backward stage without the rest of its way (the fused pass without the preprocess) has no flashtune backward:
// the row says which stages were measured instead of leaving flashtune_ms empty without a word.
TEST_F(PeersTest, QueryPeersSaysWhyABackwardHasNoFlashtuneTime) {
  {
    db::Store store(db);
    const auto run = begin_fixture_run(store, "partial");
    const auto p = attn_problem(2048, 0);
    auto fused = make_trial(run, "attn_bwd_fused", p, attn_config(64, 128, 8), TrialStatus::ok, 4.9);
    fused.experiment_name = "partial";
    store.record_trial(fused);
    record_cudnn_bwd(store, run, "partial", p, std::nullopt);
    store.finish_run(run, "finished");
  }
  const auto r = run_cli("query peers partial --format csv --db " + db, false);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("NVIDIA H200,bwd,sdpa_cudnn,torch,ok,5.2,,,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no flashtune backward: only attn_bwd_fused measured, no whole way"), std::string::npos) << r.out;
}

TEST_F(PeersTest, GradeCourseCsvAndReportShowPeersAndExportIgnoresThem) {
  const auto json_before = run_cli("export --format json --db " + db, false);
  const auto course_before = run_cli("export --format course-attention -o " + (tmp.dir / "before.csv").string() + " --db " + db);
  add_fixture_peers(db);
  const auto json_after = run_cli("export --format json --db " + db, false);
  ASSERT_EQ(json_before.status, 0);
  auto strip_time = [](std::string s) {  // the export stamps its generation time
    const auto j = nlohmann::json::parse(s);
    auto e = j.at("entries");
    return e.dump();
  };
  EXPECT_EQ(strip_time(json_before.out), strip_time(json_after.out)) << "peers are never exported as configs";

  const auto g = run_cli("grade --db " + db);
  EXPECT_NE(g.out.find("flex (peer)               | 0.5000               | 0.0020"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("attn_fwd is 2.08x faster than flex (torch 2.11.0).\n"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("sdpa_flash: unsupported (no kernel for this mask).\n"), std::string::npos) << g.out;

  ASSERT_EQ(run_cli("export --format course-attention -o " + (tmp.dir / "after.csv").string() + " --db " + db).status, 0);
  const std::string before = read_file(tmp.dir / "before.csv"), after = read_file(tmp.dir / "after.csv");
  EXPECT_NE(after.find("peer_flex_f16_causal,256,4096,0.5,2.000,,,,ok,NVIDIA H200\n"), std::string::npos) << after;
  EXPECT_NE(after.find("peer_sdpa_flash_f16_causal,256,4096,,,,,,unsupported,NVIDIA H200\n"), std::string::npos) << after;
  // the flashtune rows are the same as before
  std::istringstream lines(before);
  for (std::string line; std::getline(lines, line);) EXPECT_NE(after.find(line + "\n"), std::string::npos) << line;

  const fs::path out = tmp.dir / "report";
  const auto rep = run_cli("report results_fixture -q --out " + out.string() + " --db " + db);
  ASSERT_EQ(rep.status, 0) << rep.out;
  const std::string dat = read_file(out / "per_problem.dat");
  EXPECT_EQ(dat.rfind("# label flashtune sdpa_cudnn flex\n", 0), 0u) << dat;
  EXPECT_NE(dat.find("\"fwd B1 H16\\nL4096 D16\\nf16 causal\" "), std::string::npos) << dat;
  const std::string html = read_file(out / "index.html");
  EXPECT_NE(html.find("<h2>Peers</h2>"), std::string::npos);
  EXPECT_NE(html.find("<img src=\"per_problem.png\""), std::string::npos);
  // the landscape's unmeasured cells are blank: its labels skip NaN
  EXPECT_NE(read_file(out / "landscape_w4.gp").find("(strcol(3) eq 'NaN' ? '' : sprintf('%.3g', $3))"), std::string::npos);
}

// `flashtune peers`: the job it writes, the child it runs (a stand-in interpreter here), what it records.
struct PeersCommand : ::testing::Test {
  Temp tmp{"peers_cmd"};
  fs::path yaml = tmp.dir / "e.yaml";
  std::string db = (tmp.dir / "c.sqlite").string();
  void SetUp() override {
    std::ofstream(yaml) << "name: peers_cmd\nstudies:\n"
                           "  - family: attn_fwd\n    problems: [{batch: 1, heads_q: 16, seq_q: 256, head_dim: 64, causal: 1, dtype: bf16}]\n"
                           "  - family: attn_bwd_dq\n    problems: [{batch: 1, heads_q: 16, seq_q: 256, head_dim: 64, causal: 1, dtype: bf16},"
                           " {batch: 2, heads_q: 8, heads_kv: 2, seq_q: 128, head_dim: 64, dtype: f16}]\n"
                           "  - family: weighted_row_sum\n    problems: [{rows: 64, cols: 64}]\n";
  }
  // A stand-in for `python -m flashtune.peers --job J --out O`: saves the job, writes `result` to O (unless empty),
  // then sleeps `sleep_s` and exits with `status`.
  fs::path fake_python(const std::string& result, int status, int sleep_s = 0) {
    const fs::path script = tmp.dir / "fake_python.sh";
    std::ofstream(tmp.dir / "result.json") << result;
    std::ofstream(script) << "#!/bin/sh\n[ \"$1 $2 $3 $5\" = \"-m flashtune.peers --job --out\" ] || exit 9\n"
                             "cp \"$4\" " << (tmp.dir / "seen_job.json").string() << "\n"
                          << (result.empty() ? "" : "cp " + (tmp.dir / "result.json").string() + " \"$6\"\n")
                          << (sleep_s ? "exec sleep " + std::to_string(sleep_s) + "\n" : "") << "exit " << status << "\n";
    fs::permissions(script, fs::perms::owner_all);
    return script;
  }
  static std::string result(const std::string& entries) {
    return R"({"version": 1, "gpu": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1"},
               "libraries": {"torch": "2.11.0", "cuda": "13.0", "flash_attn_4": null}, "results": [)" + entries + "]}";
  }
  static std::string ok_entry(int index, const std::string& pass) {
    return R"({"index": )" + std::to_string(index) + R"(, "peer": "sdpa_cudnn", "pass": ")" + pass +
           R"(", "library": "torch 2.11.0 cuDNN 91900", "status": "ok", "reason": "", "seed": 7,
              "timing": {"samples_ms": [0.1, 0.12, 0.11], "median_ms": 0.11, "iqr_ms": 0.01, "min_ms": 0.1, "max_ms": 0.12,
                         "mean_ms": 0.11, "rel_stdev": 0.09, "converged": false, "cold": true},
              "validation": {"max_abs_err": 0.001, "max_rel_err": 0.01, "naive_err": 0.002, "tolerance": 0.012,
                             "nan_count": 0, "output": "o"}, "device_bytes": 4096})";
  }
  std::string runs() const {
    if (!fs::exists(db)) return "";
    return run_cli("query sql \"SELECT status FROM runs\" --format csv --db " + db, false).out;
  }
};

TEST_F(PeersCommand, WritesTheJobRunsTheChildAndRecordsItsResult) {
  // The backward's timing carries the SM clock its samples ran at (the peers' NVML probe; optional).
  std::string bwd = ok_entry(0, "bwd");
  bwd.replace(bwd.find(R"("cold": true})"), 13, R"("cold": true, "sm_clock_mhz": 1683.5, "power_capped": 1})");
  const auto py = fake_python(result(ok_entry(0, "fwd") + "," + bwd +
                                     R"(, {"index": 1, "peer": "flex", "pass": "bwd", "status": "unsupported",
                                          "reason": "GQA backward", "timing": null, "validation": null})"
                                     R"(, {"index": 1, "peer": "fa4", "pass": "bwd", "status": "wrong_result",
                                          "reason": "dq off", "timing": null, "validation": {"max_abs_err": null,
                                          "naive_err": 0.001, "tolerance": null, "nan_count": 3, "output": "dq"}})"),
                              0);
  const auto r = run_cli("peers " + yaml.string() + " --db " + db + " --python " + py.string() + " --seed 5");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("run 1: 4 peer measurement(s) on NVIDIA H100 80GB HBM3 (cuda 13.0, torch 2.11.0)"), std::string::npos) << r.out;
  const auto job = nlohmann::json::parse(read_file(tmp.dir / "seen_job.json"));
  EXPECT_EQ(job.at("version"), 1);
  EXPECT_EQ(job.at("seed"), 5);
  ASSERT_EQ(job.at("problems").size(), 2u) << "the attention problems, deduplicated; weighted_row_sum left out";
  EXPECT_EQ(job.at("problems")[0].at("passes"), nlohmann::json({"fwd", "bwd"}));
  EXPECT_EQ(job.at("problems")[1].at("passes"), nlohmann::json({"bwd"}));
  EXPECT_EQ(job.at("problems")[1].at("dims").at("heads_kv"), 2);
  EXPECT_EQ(job.at("measure").at("mode"), "cold");
  EXPECT_EQ(runs(), "status\nfinished\n");
  db::Store store(db, db::Store::Access::read_only);
  const auto rows = store.peer_trials();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].experiment, "peers_cmd");
  EXPECT_EQ(rows[0].device_key, "NVIDIA H100 80GB HBM3");
  // TFLOP/s from the visible pairs: causal 256 x 256 -> 32896 pairs per head, 16 heads, 4 x 64 FLOP each
  ASSERT_TRUE(rows[0].tflops);
  EXPECT_NEAR(*rows[0].tflops, 4.0 * 64 * 32896 * 16 / (0.11 * 1e9), 1e-9);
  EXPECT_NEAR(*rows[1].tflops, 2.5 * *rows[0].tflops, 1e-9);
  EXPECT_FALSE(rows[0].sm_clock_mhz) << "no clock in the result: NULL";
  ASSERT_TRUE(rows[1].sm_clock_mhz && rows[1].power_capped);
  EXPECT_DOUBLE_EQ(*rows[1].sm_clock_mhz, 1683.5);
  EXPECT_DOUBLE_EQ(*rows[1].power_capped, 1.0);
  EXPECT_EQ(rows[2].status, "unsupported");
  EXPECT_EQ(rows[3].status, "wrong_result");
  EXPECT_FALSE(rows[3].max_abs_err) << "a null (non-finite) error is stored as NULL";
  EXPECT_EQ(store.sql("SELECT count(*) FROM peer_trials WHERE samples_json = '[0.1,0.12,0.11]' AND checked_output = 'o'")
                .rows.at(0).at(0), "2");
}

TEST_F(PeersCommand, BadInputsGetOneLineAndRecordNothing) {
  const auto unknown = run_cli("peers " + yaml.string() + " --db " + db + " --peers flex,sdpa_magic");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.out.find("--peers: unknown peer 'sdpa_magic'"), std::string::npos) << unknown.out;

  const fs::path rows_only = tmp.dir / "rows.yaml";
  std::ofstream(rows_only) << "name: rows\nstudies:\n  - family: weighted_row_sum\n    problems: [{rows: 64, cols: 64}]\n";
  const auto none = run_cli("peers " + rows_only.string() + " --db " + db);
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.out.find("no attention problems"), std::string::npos) << none.out;

  const auto missing = run_cli("peers " + yaml.string() + " --db " + db + " --python " + (tmp.dir / "nope").string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.out.find("cannot start"), std::string::npos) << missing.out;

  const auto fails = run_cli("peers " + yaml.string() + " --db " + db + " --python " + fake_python("", 2).string());
  EXPECT_EQ(fails.status, 2);
  EXPECT_NE(fails.out.find("exited with status 2 before measuring anything; nothing recorded"), std::string::npos) << fails.out;

  const auto placeholder = run_cli("peers " + yaml.string() + " --db " + db + " --python " +
                                   fake_python(R"({"version": 1, "results": []})", 2).string());
  EXPECT_EQ(placeholder.status, 2);
  EXPECT_NE(placeholder.out.find("no measurement (flashtune.peers exited with status 2); nothing recorded"),
            std::string::npos) << placeholder.out;

  const auto bad_index = run_cli("peers " + yaml.string() + " --db " + db + " --python " +
                                 fake_python(result(ok_entry(3, "fwd")), 0).string());
  EXPECT_EQ(bad_index.status, 2);
  EXPECT_NE(bad_index.out.find("results[0]: index 3 names no problem of the job (2 problems)"), std::string::npos) << bad_index.out;

  std::string not_passing = ok_entry(0, "fwd");
  not_passing.replace(not_passing.find("\"max_abs_err\": 0.001"), 20, "\"max_abs_err\": 0.5  ");
  const auto wrong = run_cli("peers " + yaml.string() + " --db " + db + " --python " + fake_python(result(not_passing), 0).string());
  EXPECT_EQ(wrong.status, 2);
  EXPECT_NE(wrong.out.find("status ok needs a timing and a validation that passes the rule"), std::string::npos) << wrong.out;

  std::ofstream(tmp.dir / "garbage.json") << "{not json";
  const auto garbage = run_cli("peers " + yaml.string() + " --db " + db + " --results " + (tmp.dir / "garbage.json").string());
  EXPECT_EQ(garbage.status, 2);
  EXPECT_NE(garbage.out.find("garbage.json: not JSON"), std::string::npos) << garbage.out;
  EXPECT_EQ(runs(), "") << "nothing was recorded, not even a run";
}

TEST_F(PeersCommand, AChildThatDiesInANamedMeasurementLeavesTheRestToANewOne) {
  // First child: measures problem 0 fwd, then dies (abort) during problem 0 bwd, which it named in_flight. Second
  // child: must get a job that skips both; measures problem 1 bwd and ends normally.
  const fs::path first = tmp.dir / "first.json", second = tmp.dir / "second.json";
  std::string r1 = result(ok_entry(0, "fwd"));
  r1.insert(r1.rfind('}'), R"(, "in_flight": {"index": 0, "peer": "sdpa_cudnn", "pass": "bwd"})");
  std::ofstream(first) << r1;
  std::ofstream(second) << result(ok_entry(1, "bwd"));
  const fs::path script = tmp.dir / "crashing_python.sh";
  std::ofstream(script) << "#!/bin/sh\ncp \"$4\" " << (tmp.dir / "job_").string() << "$$.json\n"
                        << "if grep -q '\"skip\"' \"$4\"; then cp " << second.string() << " \"$6\"; exit 0; fi\n"
                        << "cp " << first.string() << " \"$6\"; exit 134\n";
  fs::permissions(script, fs::perms::owner_all);
  const auto r = run_cli("peers " + yaml.string() + " --db " + db + " --python " + script.string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("exited with status 134 during sdpa_cudnn bwd of problem 0: recorded as an error; the rest in "
                       "a new process"), std::string::npos) << r.out;
  EXPECT_EQ(runs(), "status\nfinished\n");
  db::Store store(db, db::Store::Access::read_only);
  const auto rows = store.peer_trials();
  ASSERT_EQ(rows.size(), 3u);
  std::map<std::string, std::string> status;
  for (const auto& p : rows) status[p.pass + (p.problem.find("heads_kv=2") != std::string::npos ? "1" : "0")] = p.status;
  EXPECT_EQ(status, (std::map<std::string, std::string>{{"fwd0", "ok"}, {"bwd0", "error"}, {"bwd1", "ok"}}));
  std::size_t jobs = 0;
  for (const auto& e : fs::directory_iterator(tmp.dir)) {
    if (e.path().filename().string().rfind("job_", 0) != 0) continue;
    ++jobs;
    const auto job = nlohmann::json::parse(std::ifstream(e.path()));
    if (!job.contains("skip")) continue;
    EXPECT_EQ(job["skip"], nlohmann::json::parse(R"([{"index": 0, "peer": "sdpa_cudnn", "pass": "fwd"},
                                                     {"index": 0, "peer": "sdpa_cudnn", "pass": "bwd"}])"));
  }
  EXPECT_EQ(jobs, 2u);
  for (const auto& p : rows)
    if (p.status == "error") {
      EXPECT_NE(p.reason.find("died during it (exit status 134)"), std::string::npos) << p.reason;
    }
}

TEST_F(PeersCommand, AChildThatDiesOrHangsKeepsWhatItMeasured) {
  const auto died = run_cli("peers " + yaml.string() + " --db " + db + " --python " +
                            fake_python(result(ok_entry(0, "fwd")), 1).string());
  EXPECT_EQ(died.status, 1);
  EXPECT_NE(died.out.find("exited with status 1: what it measured is recorded"), std::string::npos) << died.out;
  const auto hung = run_cli("peers " + yaml.string() + " --db " + db + " --timeout 1 --python " +
                            fake_python(result(ok_entry(1, "bwd")), 0, 30).string());
  EXPECT_EQ(hung.status, 1);
  EXPECT_NE(hung.out.find("ran past --timeout"), std::string::npos) << hung.out;
  EXPECT_EQ(runs(), "status\ninterrupted\ninterrupted\n");
  db::Store store(db, db::Store::Access::read_only);
  EXPECT_EQ(store.peer_trials().size(), 2u);
  // a result file from elsewhere is recorded as it is
  const auto again = run_cli("peers " + yaml.string() + " --db " + db + " --results " + (tmp.dir / "result.json").string());
  EXPECT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(store.peer_trials().size(), 3u);
}
