// tests/results/export_test.cpp: export round trips on the fixture database: the JSON against
// Store::best(), the C++ header compiled by the system compiler and its lookup() called, and the course's
// CSVs with exactly the course's columns.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tests/results/results_fixture.hpp"

using namespace ft_results_test;

namespace {

struct ExportTest : ::testing::Test {
  Temp tmp{"export"};
  std::string db = (tmp.dir / "r.sqlite").string();
  FixtureDb fx{db};
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_F(ExportTest, JsonCarriesTheEvidenceOfEveryBestConfig) {
  const fs::path out = tmp.dir / "best.json";
  const auto r = run_cli("export --format json --out " + out.string() + " --db " + db);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto doc = nlohmann::json::parse(read_file(out));
  EXPECT_NE(doc.at("lookup_rule").get<std::string>().find("log2"), std::string::npos);
  const auto& entries = doc.at("entries");

  flashtune::db::Store store(db);
  const auto best = store.best();
  ASSERT_EQ(entries.size(), best.size());
  ASSERT_GT(entries.size(), 5u);
  for (const auto& b : best) {
    const auto& row = b.trial;
    const nlohmann::json* e = nullptr;
    for (const auto& x : entries)
      if (x.at("family") == row.family && x.at("stage") == row.stage && x.at("problem_key") == row.problem &&
          x.at("gpu") == row.gpu)
        e = &x;
    ASSERT_NE(e, nullptr) << row.problem;
    EXPECT_EQ(e->at("config_key"), row.config);
    const auto& ev = e->at("evidence");
    EXPECT_NEAR(ev.at("median_ms").get<double>(), *row.median_ms, 1e-12 * ev.at("median_ms").get<double>());
    EXPECT_NEAR(ev.at("tflops").get<double>(), *row.tflops, 1e-12 * ev.at("tflops").get<double>());
    EXPECT_EQ(ev.at("run_id").get<long long>(), row.run_id);
    EXPECT_EQ(ev.at("trial_id").get<long long>(), row.trial_id);
    EXPECT_EQ(ev.at("source_hash"), row.source_hash);
    EXPECT_TRUE(ev.at("max_abs_err").is_number());
    EXPECT_TRUE(e->at("problem").contains("seq_q") || e->at("problem").contains("d2"));
  }
}

TEST_F(ExportTest, HeaderCompilesAndItsLookupFindsExactAndNearestProblems) {
  const fs::path header = tmp.dir / "flashtune_best_configs.hpp";
  const auto r = run_cli("export --format header --family attn_fwd --out " + header.string() + " --db " + db);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(read_file(header).find("// run "), std::string::npos) << "evidence as comments";
  const fs::path main = tmp.dir / "use_header.cpp";
  std::ofstream(main) << R"(#include "flashtune_best_configs.hpp"
#include <cstdio>
using flashtune_export::Value;
static_assert(flashtune_export::kBestConfigs.size() == 4, "four tuned attn_fwd problems");
int main() {
  // tuned exactly: L = 4096 causal
  const Value exact[] = {{"batch", 1}, {"heads_q", 16}, {"heads_kv", 16}, {"seq_q", 4096}, {"seq_k", 4096},
                         {"head_dim", 16}, {"causal", 1}, {"window", 0}, {"sink_tokens", 0}};
  // never tuned: L = 3000 causal, nearest is L = 4096 causal
  const Value near[] = {{"batch", 1}, {"heads_q", 16}, {"heads_kv", 16}, {"seq_q", 3000}, {"seq_k", 3000},
                        {"head_dim", 16}, {"causal", 1}};
  const auto* a = flashtune_export::lookup("attn_fwd", "forward", "NVIDIA H200", "f16", exact, 9);
  const auto* b = flashtune_export::lookup("attn_fwd", "forward", "NVIDIA H200", "f16", near, 7);
  const auto* none = flashtune_export::lookup("attn_fwd", "forward", "NVIDIA H100", "f16", exact, 9);
  if (!a || !b || none) return 3;
  std::printf("%lld %lld %lld %g %lld\n", (long long)a->tunable("block_m"), (long long)a->tunable("block_n"),
              (long long)a->tunable("num_warps"), a->median_ms, (long long)b->problem[6].value);
  return a == b ? 0 : 4;
}
)";
  const fs::path exe = tmp.dir / "use_header";
  const std::string compile = std::string(FT_CXX) + " -std=c++17 -Wall -Werror -I" + tmp.dir.string() + " " +
                              main.string() + " -o " + exe.string() + " 2>&1";
  ASSERT_EQ(std::system(compile.c_str()), 0) << compile;
  const auto run = run_cli("--help");  // keep the binary warm; the real check follows
  const auto used = ft_test::run_command(exe.string());
  ASSERT_NE(used.status, -1) << "did not start or exit normally";
  EXPECT_EQ(used.status, 0) << used.out;
  // best at L = 4096 causal: block_m 128, block_n 64, 4 warps, 4 * 0.6 * 0.1 ms; problem[6] is seq_q (sorted dims)
  EXPECT_EQ(used.out, "128 64 4 0.24 4096\n");
}

TEST_F(ExportTest, CourseSoftmaxMatmulCsvHasTheCourseColumnsAndEmptyFailures) {
  {  // an f16 problem is not the course's benchmark (fp32): it must not appear
    flashtune::db::Store store(db);
    flashtune::core::Problem p;
    p.dims = {{"batch", 16}, {"d1", 2048}, {"d2", 256}, {"d3", 512}};
    p.dtype = flashtune::core::DType::f16;
    flashtune::core::Config c{{{"block_m", 16}, {"block_k", 16}, {"block_n", 64}, {"num_warps", 4}}};
    store.record_trial(make_trial(fx.run2, "softmax_matmul", p, c, TrialStatus::ok, 0.5));
  }
  const fs::path out = tmp.dir / "outputs" / "softmax_matmul_benchmark.csv";
  const auto r = run_cli("export --format course-softmax-matmul --out " + out.string() + " --db " + db);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto l = lines(read_file(out));
  ASSERT_EQ(l.size(), 5u) << read_file(out);
  EXPECT_EQ(l[0], "batch_size,d1,d2,d3,triton,BLOCK,forward_ms_mean,forward_ms_std,forward_peak_MiB");
  EXPECT_EQ(l[1], "16,2048,64,512,True,16,0.04,0.0008,100.000");   // fastest of B = 16 at d2 = 64: block_n 128
  EXPECT_EQ(l[2], "16,2048,64,512,True,64,,,");                    // B = 64 failed at d2 = 64
  EXPECT_EQ(l[4], "16,2048,128,512,True,64,0.02,0.0004,100.000");
}

TEST_F(ExportTest, CourseAttentionCsvHasTheCourseColumns) {
  const fs::path out = tmp.dir / "outputs" / "csv" / "attention_benchmark.csv";
  const auto r = run_cli("export --format course-attention --out " + out.string() + " --db " + db);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto l = lines(read_file(out));
  ASSERT_GE(l.size(), 9u) << read_file(out);
  EXPECT_EQ(l[0], "implementation,d_model,seq_len,forward_ms,forward_peak_MiB,backward_ms,backward_peak_MiB,"
                  "saved_activations_MiB,status,gpu");
  const std::string all = read_file(out);
  // L = 1024, 16 heads of 16, f16: q, k, v, o are 2 MiB, the fp32 lse 1/16 MiB; the naive one also keeps
  // its 64 MiB of fp32 probabilities. Peak = the fixture's device_bytes. Run 2's 0.08 ms is the best.
  EXPECT_NE(all.find("\nflashtune_attn_naive_f16,256,1024,4,64.000,,,66.062,ok,NVIDIA H200\n"), std::string::npos) << all;
  EXPECT_NE(all.find("\nflashtune_attn_fwd_f16,256,1024,0.08,1.000,,,2.062,ok,NVIDIA H200\n"), std::string::npos) << all;
  EXPECT_NE(all.find("\nflashtune_attn_fwd_f16_causal,256,4096,0.24,4.000,,,8.250,ok,NVIDIA H200\n"), std::string::npos) << all;
  EXPECT_NE(all.find("\nflashtune_attn_fwd_f16_gqa,256,1024,,,,,1.312,incorrect,NVIDIA H200\n"), std::string::npos) << all;
}

// The backward columns of an attn_fwd row: its problem's tuned backward stages summed, once every stage
// was measured; the largest stage allocation as the peak.
TEST_F(ExportTest, CourseAttentionCsvSumsTheTunedBackwardStages) {
  {
    flashtune::db::Store store(db);
    const auto run = begin_fixture_run(store);
    const auto p = attn_problem(4096, 1);  // the fixture's forward ran it (0.24 ms)
    store.record_trial(make_trial(run, "attn_bwd_preprocess", p, attn_config(128, 64, 4), TrialStatus::ok, 0.01, 0.01, 3 << 20));
    store.record_trial(make_trial(run, "attn_bwd_dkdv", p, attn_config(64, 64, 4), TrialStatus::ok, 0.5, 0.01, 6 << 20));
    store.record_trial(make_trial(run, "attn_bwd_dkdv", p, attn_config(32, 64, 4), TrialStatus::ok, 0.4, 0.01, 6 << 20));
    store.record_trial(make_trial(run, "attn_bwd_dq", p, attn_config(64, 64, 4), TrialStatus::ok, 0.3, 0.01, 5 << 20));
    store.record_trial(make_trial(run, "attn_bwd_dq", attn_problem(1024, 1), attn_config(64, 64, 4), TrialStatus::ok, 0.1));
    store.finish_run(run, "finished");
  }
  const fs::path out = tmp.dir / "a.csv";
  ASSERT_EQ(run_cli("export --format course-attention --out " + out.string() + " --db " + db).status, 0);
  const std::string all = read_file(out);
  EXPECT_NE(all.find("\nflashtune_attn_fwd_f16_causal,256,4096,0.24,4.000,0.71,6.000,8.250,ok,NVIDIA H200\n"), std::string::npos) << all;
  // L = 1024 causal has only a dQ trial: no backward sum
  EXPECT_NE(all.find("\nflashtune_attn_fwd_f16_causal,256,1024,0.06,1.000,,,2.062,ok,NVIDIA H200\n"), std::string::npos) << all;
}

TEST_F(ExportTest, UnknownFormatIsOneLine) {
  const auto r = run_cli("export --format xml --db " + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("not 'xml'"), std::string::npos);
}
