// tests/results/query_test.cpp: flashtune query compare | convergence | config | problem on the fixture
// database: verdicts within noise, the summary line, best-so-far curves, and the three output formats.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/results/results_fixture.hpp"

using namespace ft_results_test;

namespace {

struct QueryTest : ::testing::Test {
  Temp tmp{"query"};
  std::string db = (tmp.dir / "r.sqlite").string();
  FixtureDb fx{db};
  std::string q(const std::string& args) { return "query " + args + " --db " + db; }
};

// The row of a JSON array whose `key` column equals `value`.
nlohmann::json row_where(const nlohmann::json& rows, const std::string& key, const std::string& value) {
  for (const auto& r : rows)
    if (r.at(key).is_string() && r.at(key).get<std::string>() == value) return r;
  return nullptr;
}

}  // namespace

TEST_F(QueryTest, CompareCallsFasterSlowerAndSameWithinNoise) {
  const auto r = run_cli(q("compare " + std::to_string(fx.run1) + " " + std::to_string(fx.run2) + " --format json"), false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  const std::string p = attn_problem(1024, 0).key();
  auto verdict = [&](const std::string& config) {
    for (const auto& row : rows)
      if (row.at("problem") == p && row.at("config") == config) return row.at("verdict").get<std::string>();
    return std::string("missing");
  };
  EXPECT_EQ(verdict(attn_config(128, 64, 4).key()), "faster");
  EXPECT_EQ(verdict(attn_config(128, 64, 8).key()), "slower");
  EXPECT_EQ(verdict(attn_config(128, 32, 4).key()), "same");
  EXPECT_EQ(verdict(attn_config(128, 32, 8).key()), "same");
  EXPECT_EQ(verdict(attn_config(64, 32, 4).key()), "only_a");
  EXPECT_EQ(verdict(attn_config(64, 64, 4).key()).rfind("not_comparable", 0), 0u);

  const auto table = run_cli(q("compare " + std::to_string(fx.run1) + " " + std::to_string(fx.run2)));
  ASSERT_EQ(table.status, 0) << table.out;
  EXPECT_NE(table.out.find("1 faster, 1 slower, 2 same within noise, 1 not comparable"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("geometric mean time ratio B/A"), std::string::npos);

  const auto csv = run_cli(q("compare " + std::to_string(fx.run1) + " " + std::to_string(fx.run2) + " --format csv"), false);
  ASSERT_EQ(csv.status, 0);
  EXPECT_EQ(csv.out.rfind("family,stage,problem,config,a_median_ms,a_noise,b_median_ms,b_noise,diff,verdict,a_mhz,b_mhz,"
                          "cycles_diff\n", 0), 0u) << csv.out;
  EXPECT_EQ(csv.out.find("geometric"), std::string::npos) << "the summary stays off stdout in csv";
}

TEST_F(QueryTest, CompareRejectsBadRunIdsWithOneLine) {
  const auto r = run_cli(q("compare 1 x"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("'x' is not a run id"), std::string::npos) << r.out;
  const auto none = run_cli(q("compare 1 99"));
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.out.find("run 99 has no trials"), std::string::npos) << none.out;
  const auto one = run_cli(q("compare 1"));
  EXPECT_EQ(one.status, 2);
}

TEST_F(QueryTest, ConvergenceIsMonotoneAndEndsAtTheBest) {
  const auto r = run_cli(q("convergence " + std::to_string(fx.run1) + " --format json"), false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  const std::string p = attn_problem(4096, 1).key();
  double last = 1e300;
  int n = 0;
  for (const auto& row : rows) {
    if (row.at("family") != "attn_fwd" || row.at("problem") != p) continue;
    ++n;
    EXPECT_EQ(row.at("trial").get<int>(), n);
    EXPECT_EQ(row.at("strategy"), "unknown") << "the fixture run has no experiment file";
    const double best = row.at("best_so_far_ms").get<double>();
    EXPECT_LE(best, last);
    last = best;
  }
  EXPECT_EQ(n, 8);
  EXPECT_NEAR(last, 4 * 0.6 * 0.1, 1e-9);
  const auto csv = run_cli(q("convergence " + std::to_string(fx.run1) + " --format csv"), false);
  EXPECT_EQ(csv.out.rfind("family,stage,problem,strategy,trial,config,status,median_ms,best_so_far_ms,improved\n", 0), 0u);
}

TEST_F(QueryTest, ConfigAcrossProblemsGivesRatioToTheBest) {
  const auto r = run_cli(q("config attn_fwd " + attn_config(64, 64, 4).key() + " --format json"), false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 4u) << "four problems (the GQA one was never measured)";
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("best_config"), attn_config(128, 64, 4).key());
    // run 2 measured the best config at 0.08 ms on L = 1024 non-causal; elsewhere 0.15 / 0.10
    const double want = row.at("problem") == attn_problem(1024, 0).key() ? 0.15 / 0.08 : 1.5;
    EXPECT_NEAR(row.at("ratio_to_best").get<double>(), want, 1e-3);
  }
  const auto bad = run_cli(q("config attn_fwd block_m=7"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.out.find("no trial of attn_fwd matches"), std::string::npos) << bad.out;
}

TEST_F(QueryTest, ProblemRanksConfigsFastestFirst) {
  const auto r = run_cli(q("problem attn_fwd " + attn_problem(1024, 1).key() + " --format json"), false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_GE(rows.size(), 8u);
  EXPECT_EQ(rows[0].at("rank"), 1);
  EXPECT_EQ(rows[0].at("config"), attn_config(128, 64, 4).key());
  const auto slowest = row_where(rows, "config", attn_config(64, 32, 8).key());
  ASSERT_NE(slowest, nullptr);
  EXPECT_NEAR(slowest.at("slowdown").get<double>(), 0.18 / 0.10, 1e-3);  // 0.6 x (0.1 + 0.05 + 0.02 + 0.01) vs 0.6 x 0.1
  EXPECT_EQ(slowest.at("rank"), 8);
  const auto table = run_cli(q("problem attn_fwd " + attn_problem(1024, 1).key()));
  EXPECT_EQ(table.status, 0);
  EXPECT_NE(table.out.find("rank"), std::string::npos);
}

TEST_F(QueryTest, SqlStillRefusesWrites) {
  const auto r = run_cli(q("sql \"UPDATE trials SET median_ms = 0\""));
  EXPECT_EQ(r.status, 2);
  const auto n = run_cli(q("sql \"SELECT count(*) AS n FROM trials WHERE median_ms = 0\" --format csv"));
  EXPECT_EQ(n.out, "n\n0\n");
}

TEST(QueryConvergence, NamesTheStrategyOfACompileOnlyRunFromItsExperiment) {
  Temp tmp("convergence");
  const fs::path yaml = tmp.dir / "tiny.yaml";
  std::ofstream(yaml) << "name: tiny_random\nstudies:\n  - family: weighted_row_sum\n    problems: [{rows: 64, cols: 64}]\n"
                         "    space: {block_threads: [128, 256], rows_per_block: [1], vec: [4]}\n"
                         "    strategy: {name: random, budget_trials: 2, seed: 3}\n";
  const std::string db = (tmp.dir / "c.sqlite").string();
  const auto run = run_cli("run " + yaml.string() + " --compile-only --arch sm_80 --db " + db + " --cache " + (tmp.dir / "cache").string());
  ASSERT_EQ(run.status, 0) << run.out;
  const auto r = run_cli("query convergence 1 --format json --db " + db, false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("strategy"), "random");
    EXPECT_EQ(row.at("status"), "compiled");
    EXPECT_TRUE(row.at("best_so_far_ms").is_null()) << "nothing was timed";
  }
}

namespace {

// One ok trial of a backward fixture: config block_m bm, block_n 64, 4 warps; tflops = 1 / ms (1e9 FLOP).
void record_stage(flashtune::db::Store& store, std::int64_t run, const std::string& experiment, const std::string& family,
                  const flashtune::core::Problem& p, std::int64_t bm, double ms) {
  auto t = make_trial(run, family, p, attn_config(bm, 64, 4), TrialStatus::ok, ms);
  t.experiment_name = experiment;
  store.record_trial(t);
}

}  // namespace

// The backward's end-to-end score: per problem, the sum of the stage winners, the forward beside it, and
// TFLOP/s from the forward's FLOPs (2.5x for the backward, 3.5x for both). A problem missing a stage (the
// sink gradient, with learned sinks) has no score.
TEST(QueryBackward, SumsTheStageWinnersAndSkipsIncompleteProblems) {
  Temp tmp{"query_backward"};
  const std::string db = (tmp.dir / "b.sqlite").string();
  {
    flashtune::db::Store store(db);
    const auto run = begin_fixture_run(store, "bwd_fixture");
    auto rec = [&](const std::string& family, const flashtune::core::Problem& p, std::int64_t bm, double ms) {
      record_stage(store, run, "bwd_fixture", family, p, bm, ms);
    };
    auto plain = attn_problem(2048, 1);
    plain.dims["learned_sinks"] = 0;
    auto sinks = attn_problem(2048, 1, 2, 128);
    sinks.dims["learned_sinks"] = 1;
    auto no_dsink = attn_problem(4096, 1, 2, 128);
    no_dsink.dims["learned_sinks"] = 1;
    for (const auto& p : {plain, sinks, no_dsink}) {
      rec("attn_fwd", p, 64, 0.2);
      rec("attn_fwd", p, 128, 0.25);
      rec("attn_bwd_preprocess", p, 128, 0.01);
      rec("attn_bwd_dkdv", p, 32, 0.5);
      rec("attn_bwd_dkdv", p, 64, 0.4);  // the winner
      rec("attn_bwd_dq", p, 64, 0.3);
    }
    rec("attn_bwd_dsink", sinks, 1, 0.02);
    store.finish_run(run, "finished");
  }
  const auto r = run_cli("query backward bwd_fixture --format json --db " + db, false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (const auto& row : rows) {
    const bool with_sinks = row.at("problem").get<std::string>().find("learned_sinks=1") != std::string::npos;
    const double bwd = 0.01 + 0.4 + 0.3 + (with_sinks ? 0.02 : 0.0);
    EXPECT_NEAR(row.at("fwd_ms").get<double>(), 0.2, 1e-9);
    EXPECT_NEAR(row.at("dkdv_ms").get<double>(), 0.4, 1e-9);
    EXPECT_NEAR(row.at("bwd_ms").get<double>(), bwd, 1e-4);
    EXPECT_NEAR(row.at("fwd_bwd_ms").get<double>(), 0.2 + bwd, 1e-4);
    EXPECT_NEAR(row.at("fwd_tflops").get<double>(), 5.0, 1e-3);
    EXPECT_NEAR(row.at("bwd_tflops").get<double>(), 2.5 / bwd, 1e-3);
    EXPECT_NEAR(row.at("fwd_bwd_tflops").get<double>(), 3.5 / (0.2 + bwd), 1e-3);
    EXPECT_EQ(row.at("gpu"), "NVIDIA H200");
    EXPECT_NE(row.at("configs").get<std::string>().find("dkdv: block_m=64"), std::string::npos) << row.at("configs");
    EXPECT_EQ(row.at("problem").get<std::string>().find("seq_q=4096"), std::string::npos) << "no dsink: no score";
  }
  const auto none = run_cli("query backward other_experiment --db " + db);
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.out.find("has every backward stage measured"), std::string::npos) << none.out;
}

// attn_bwd_fused (dK, dV and dQ in one pass) stands in for attn_bwd_dkdv + attn_bwd_dq where it is faster,
// or where the two were not run; the configs column names the stages summed.
TEST(QueryBackward, TakesTheFusedPassWhereItIsFaster) {
  Temp tmp{"query_backward_fused"};
  const std::string db = (tmp.dir / "f.sqlite").string();
  {
    flashtune::db::Store store(db);
    const auto run = begin_fixture_run(store, "fused_fixture");
    auto rec = [&](const std::string& family, const flashtune::core::Problem& p, std::int64_t bm, double ms) {
      record_stage(store, run, "fused_fixture", family, p, bm, ms);
    };
    auto faster = attn_problem(1024, 1), slower = attn_problem(2048, 1), alone = attn_problem(4096, 1);
    for (auto* p : {&faster, &slower, &alone}) p->dims["learned_sinks"] = 0;
    for (const auto& p : {faster, slower, alone}) rec("attn_bwd_preprocess", p, 128, 0.01);
    for (const auto& p : {faster, slower}) {
      rec("attn_bwd_dkdv", p, 64, 0.4);
      rec("attn_bwd_dq", p, 64, 0.3);
    }
    rec("attn_bwd_fused", faster, 64, 0.5);
    rec("attn_bwd_fused", slower, 64, 0.9);
    rec("attn_bwd_fused", alone, 128, 0.6);
    store.finish_run(run, "finished");
  }
  const auto r = run_cli("query backward fused_fixture --format json --db " + db, false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const auto& row : rows) {
    const std::string problem = row.at("problem"), configs = row.at("configs");
    const bool fused = problem.find("seq_q=2048") == std::string::npos;
    const double expect = problem.find("seq_q=1024") != std::string::npos ? 0.51 : fused ? 0.61 : 0.71;
    EXPECT_NEAR(row.at("bwd_ms").get<double>(), expect, 1e-4) << problem;
    EXPECT_EQ(configs.find("fused: ") != std::string::npos, fused) << problem << ": " << configs;
    EXPECT_EQ(configs.find("dkdv: ") != std::string::npos, !fused) << problem << ": " << configs;
  }
}

// attn_bwd_dq_delta (dQ with D = rowsum(dO * O) computed inline) + attn_bwd_dkdv stands in for the
// preprocess + dkdv + dq where it is faster, also where no preprocess was run; the preprocess is not summed then.
TEST(QueryBackward, TakesDqWithInlineDeltaWhereItIsFaster) {
  Temp tmp{"query_backward_dq_delta"};
  const std::string db = (tmp.dir / "d.sqlite").string();
  {
    flashtune::db::Store store(db);
    const auto run = begin_fixture_run(store, "dqd_fixture");
    auto rec = [&](const std::string& family, const flashtune::core::Problem& p, std::int64_t bm, double ms) {
      record_stage(store, run, "dqd_fixture", family, p, bm, ms);
    };
    auto faster = attn_problem(1024, 1), slower = attn_problem(2048, 1), alone = attn_problem(4096, 1);
    for (auto* p : {&faster, &slower, &alone}) p->dims["learned_sinks"] = 0;
    for (const auto& p : {faster, slower}) {
      rec("attn_bwd_preprocess", p, 128, 0.05);
      rec("attn_bwd_dq", p, 64, 0.3);
    }
    for (const auto& p : {faster, slower, alone}) rec("attn_bwd_dkdv", p, 64, 0.4);
    rec("attn_bwd_dq_delta", faster, 64, 0.32);  // 0.72 against 0.75
    rec("attn_bwd_dq_delta", slower, 64, 0.36);  // 0.76 against 0.75
    rec("attn_bwd_dq_delta", alone, 32, 0.33);
    store.finish_run(run, "finished");
  }
  const auto r = run_cli("query backward dqd_fixture --format json --db " + db, false);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const auto& row : rows) {
    const std::string problem = row.at("problem"), configs = row.at("configs");
    const bool inline_delta = problem.find("seq_q=2048") == std::string::npos;
    const double expect = problem.find("seq_q=1024") != std::string::npos ? 0.72 : inline_delta ? 0.73 : 0.75;
    EXPECT_NEAR(row.at("bwd_ms").get<double>(), expect, 1e-4) << problem;
    EXPECT_EQ(configs.find("dq_delta: ") != std::string::npos, inline_delta) << problem << ": " << configs;
    EXPECT_EQ(configs.find("preprocess: ") != std::string::npos, !inline_delta) << problem << ": " << configs;
    EXPECT_NE(configs.find("dkdv: "), std::string::npos) << problem << ": " << configs;
  }
}
