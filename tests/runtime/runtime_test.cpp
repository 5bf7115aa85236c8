// tests/runtime/runtime_test.cpp: the runtime library without a GPU: the export lookup rule (ConfigTable), the choice of
// configs and backward way through the C ABI's explain for sm_90a (chosen and compiled, never launched), and the C
// ABI's errors (status and one-line message, never an abort). The launches are runtime_gpu_test's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "harness/cuda/device.hpp"
#include "tests/command.hpp"
#include "runtime/configs.hpp"
#include "runtime/runtime.hpp"
#include "tests/runtime/runtime_support.hpp"

namespace flashtune {
namespace {

using runtime::ConfigTable;
using testing::explain;
using testing::make_runtime;
using testing::shape;

core::Problem dims(std::map<std::string, std::int64_t> d, core::DType t = core::DType::bf16) { return {std::move(d), t}; }

const char* kEntry = R"({"family": "attn_fwd", "stage": "forward", "gpu": "G1", "dtype": "bf16",
  "problem": {"seq_q": 1024, "head_dim": 64}, "config": {"block_m": 64}, "evidence": {"median_ms": 0.5}})";

std::string table_text(const std::string& entries, int schema = 2) {
  return R"({"generator": "t", "schema": )" + std::to_string(schema) + R"(, "entries": [)" + entries + "]}";
}

TEST(RuntimeConfigTable, DistanceIsTheExportRule) {
  // sum over dims of |s(a) - s(b)|, s(x) = sign(x) log2(|x| + 1); a dim missing on one side counts as 0.
  EXPECT_NEAR(ConfigTable::distance(dims({{"seq_q", 4096}}), dims({{"seq_q", 2048}})), std::log2(4097.0 / 2049.0), 1e-12);
  EXPECT_NEAR(ConfigTable::distance(dims({{"seq_q", 7}}), dims({})), 3.0, 1e-12);
  EXPECT_NEAR(ConfigTable::distance(dims({{"sink_bias", -3}}), dims({{"sink_bias", 3}})), 4.0, 1e-12);
  EXPECT_EQ(ConfigTable::distance(dims({{"a", 5}, {"b", 2}}), dims({{"a", 5}, {"b", 2}})), 0.0);
}

TEST(RuntimeConfigTable, RanksThisGpuFirstThenNearestThenFileOrder) {
  auto entry = [](const std::string& gpu, int seq, double ms) {
    return R"({"family": "attn_fwd", "stage": "forward", "gpu": ")" + gpu + R"(", "dtype": "bf16", "problem": {"seq_q": )" +
           std::to_string(seq) + R"(}, "config": {"block_m": )" + std::to_string(seq / 64) +
           R"(}, "evidence": {"median_ms": )" + std::to_string(ms) + "}}";
  };
  const auto t = ConfigTable::parse(
      table_text(entry("G2", 1024, 1) + "," + entry("G1", 8192, 1) + "," + entry("G1", 2048, 1) + "," + entry("G1", 2048, 2) +
                 R"(, {"family": "attn_fwd", "stage": "forward", "gpu": "G1", "dtype": "f16", "problem": {"seq_q": 1024},
                      "config": {"block_m": 1}, "evidence": {}})"),
      "t");
  const auto r = t.rank("attn_fwd", dims({{"seq_q", 1024}}), "G1");
  ASSERT_EQ(r.size(), 4u);  // the f16 entry is not a candidate for a bf16 problem
  EXPECT_EQ(r[0].entry->index, 2u);  // G1, nearest (2048), earlier of the two equal ones
  EXPECT_EQ(r[1].entry->index, 3u);
  EXPECT_EQ(r[2].entry->index, 1u);  // G1, farther
  EXPECT_EQ(r[3].entry->index, 0u);  // exact, but another GPU's
  EXPECT_FALSE(r[3].same_gpu);
  EXPECT_EQ(r[3].distance, 0.0);
  const auto any = t.rank("attn_fwd", dims({{"seq_q", 1024}}), "");  // no GPU named: every entry counts as this GPU's
  EXPECT_EQ(any[0].entry->index, 0u);
  EXPECT_TRUE(t.rank("attn_bwd_dq", dims({{"seq_q", 1024}}), "G1").empty());
}

TEST(RuntimeConfigTable, MalformedFilesAreOneLineNamingTheProblem) {
  auto error_of = [](const std::string& text) {
    try {
      ConfigTable::parse(text, "x.json");
    } catch (const core::UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("{").find("x.json: not JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"schema": 2})").find("no \"entries\" list"), std::string::npos);
  EXPECT_NE(error_of(table_text(kEntry, 1)).find("schema 1, expected 2"), std::string::npos);
  std::string bad = kEntry;
  bad.replace(bad.find("\"bf16\""), 6, "\"f8\"");
  EXPECT_NE(error_of(table_text(bad)).find("x.json entry 0: unknown dtype"), std::string::npos);
  std::string noninteger = kEntry;
  noninteger.replace(noninteger.find("\"block_m\": 64"), 13, "\"block_m\": \"big\"");
  EXPECT_NE(error_of(table_text(noninteger)).find("config.block_m is not an integer"), std::string::npos);
  EXPECT_EQ(ConfigTable::parse(table_text(kEntry), "x").entries().size(), 1u);
  EXPECT_THROW(ConfigTable::load("/nonexistent/configs.json"), core::UserError);
}

// A database serves as its export does: the same entries, in the same order, with the same evidence, as
// `flashtune export --format json` of it (a recorded database with GPU trials: tests/data/tuner_surfaces.sqlite).
TEST(RuntimeConfigTable, ADatabaseServesTheEntriesItsExportWould) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ft_runtime_db_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path db = dir / "surfaces.sqlite", json = dir / "best.json";
  fs::copy_file(fs::path(FT_SOURCE_DIR) / "tests" / "data" / "tuner_surfaces.sqlite", db);
  const auto r = ft_test::run_command(ft_test::flashtune_binary() + " export --format json --db " + db.string() +
                                      " --out " + json.string() + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto from_db = ConfigTable::load(db), from_json = ConfigTable::load(json);
  ASSERT_GT(from_json.entries().size(), 10u);
  ASSERT_EQ(from_db.entries().size(), from_json.entries().size());
  for (std::size_t i = 0; i < from_db.entries().size(); ++i) {
    const auto &a = from_db.entries()[i], &b = from_json.entries()[i];
    EXPECT_EQ(a.family, b.family);
    EXPECT_EQ(a.gpu, b.gpu);
    EXPECT_EQ(a.problem.key(), b.problem.key());
    EXPECT_EQ(a.config.key(), b.config.key());
    EXPECT_EQ(a.median_ms, b.median_ms);
  }
  // through the C ABI too, and a file that is SQLite but not a flashtune database is one line naming it
  ft_runtime* rt = nullptr;
  ASSERT_EQ(ft_runtime_create(db.c_str(), "", &rt), FT_OK) << ft_last_error();
  ft_runtime_destroy(rt);
  const fs::path other = dir / "other.sqlite";
  {
    std::ofstream(other, std::ios::binary) << std::string("SQLite format 3\0", 16) << std::string(4080, '\0');
  }
  EXPECT_EQ(ft_runtime_create(other.c_str(), "", &rt), FT_ERR_CONFIGS);
  EXPECT_NE(std::string(ft_last_error()).find("other.sqlite"), std::string::npos) << ft_last_error();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(RuntimeCApi, CreateErrorsAreStatusesWithMessages) {
  ft_runtime* rt = reinterpret_cast<ft_runtime*>(1);
  EXPECT_EQ(ft_runtime_create("/nonexistent/best.json", "", &rt), FT_ERR_CONFIGS);
  EXPECT_EQ(rt, nullptr);
  EXPECT_NE(std::string(ft_last_error()).find("/nonexistent/best.json"), std::string::npos) << ft_last_error();
  const char* old = std::getenv("FLASHTUNE_CONFIGS");
  const std::string keep = old ? old : "";
  unsetenv("FLASHTUNE_CONFIGS");
  EXPECT_EQ(ft_runtime_create(nullptr, "", &rt), FT_ERR_CONFIGS);
  EXPECT_NE(std::string(ft_last_error()).find("FLASHTUNE_CONFIGS"), std::string::npos);
  setenv("FLASHTUNE_CONFIGS", testing::runtime_configs().c_str(), 1);
  ASSERT_EQ(ft_runtime_create(nullptr, "", &rt), FT_OK) << ft_last_error();  // from the variable
  EXPECT_STREQ(ft_last_error(), "");
  ft_runtime_destroy(rt);
  if (old) setenv("FLASHTUNE_CONFIGS", keep.c_str(), 1);
  else unsetenv("FLASHTUNE_CONFIGS");
  EXPECT_EQ(ft_runtime_create(testing::runtime_configs().c_str(), "", nullptr), FT_ERR_ARGUMENT);
  EXPECT_EQ(ft_runtime_abi_version(), FT_RUNTIME_ABI_VERSION);
}

TEST(RuntimeCApi, ExplainChoosesExactEntriesAndCompilesForSm90a) {
  ft_runtime* rt = make_runtime(testing::runtime_configs());
  ASSERT_NE(rt, nullptr);
  // GStar's stage shape, tuned exactly: the forward and the deterministic way (preprocess + dkdv + dq is cheapest).
  const auto gstar = shape(1, 16, 16, 1024, 1024, 16, FT_F16, 1);
  auto f = explain(rt, gstar, false, "sm_90a");
  EXPECT_EQ(f["pass"], "forward");
  EXPECT_EQ(f["arch"], "sm_90a");
  ASSERT_EQ(f["stages"].size(), 1u);
  EXPECT_EQ(f["stages"][0]["family"], "attn_fwd");
  EXPECT_EQ(f["stages"][0]["exact"], true);
  EXPECT_EQ(f["stages"][0]["compile"]["ok"], true);
  EXPECT_GT(f["stages"][0]["compile"]["registers"].get<int>(), 0);
  auto b = explain(rt, gstar, true, "sm_90a");
  EXPECT_EQ(b["way"], nlohmann::json({"attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq"}));
  EXPECT_GT(b["workspace_bytes"].get<std::size_t>(), 0u);  // D at least
  // The fused way cannot run at head_dim 16 (mma 91's constraint head_dim % 64 == 0), nor the sweep with D inline
  // (no configs for it in the table): said, not hidden.
  ASSERT_EQ(b["passed_over"].size(), 3u);
  EXPECT_NE(b["passed_over"][0].get<std::string>().find("constraint head_dim % 64 == 0"), std::string::npos) << b;
  EXPECT_NE(b["passed_over"].dump().find("attn_bwd_fused_delta"), std::string::npos) << b;
  for (const auto& st : b["stages"]) EXPECT_EQ(st["untuned"], false);
  // GPT-OSS's shape, never tuned: the nearest entries (bf16, window, learned sinks) and d(sinks) after the way.
  auto g = explain(rt, shape(4, 64, 8, 4096, 4096, 64, FT_BF16, 1, 128, 0, 1), true, "sm_90a");
  EXPECT_EQ(g["way"], nlohmann::json({"attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq", "attn_bwd_dsink"}));
  for (const auto& st : g["stages"]) {
    EXPECT_EQ(st["exact"], false);
    EXPECT_NE(st["tuned_problem"].get<std::string>().find("learned_sinks=1"), std::string::npos);
    EXPECT_EQ(st["compile"]["ok"], true);
  }
  ft_runtime_destroy(rt);
}

TEST(RuntimeCApi, TheFastestCompleteWayWins) {
  // dQ with D inline made cheap: dq_delta + dkdv beats preprocess + dkdv + dq.
  const auto cheap_delta = testing::edited_configs("cheap_delta.json", [](nlohmann::json& e) {
    if (e["family"] == "attn_bwd_dq_delta") e["evidence"]["median_ms"] = 0.001;
    return true;
  });
  ft_runtime* rt = make_runtime(cheap_delta);
  ASSERT_NE(rt, nullptr);
  const auto s = shape(1, 8, 2, 512, 512, 64, FT_BF16, 1, 128, 0, 1);
  EXPECT_EQ(explain(rt, s, true, "sm_90a")["way"],
            nlohmann::json({"attn_bwd_dq_delta", "attn_bwd_dkdv", "attn_bwd_dsink"}));
  ft_runtime_destroy(rt);
  // An attn_bwd_fused_delta entry (the windowed sweep, mma 92: everything and D in one pass) made cheapest: its way of
  // one stage wins, then dsink, and its kernel compiles for sm_90a.
  const auto with_sweep = testing::configs_with_sweep("with_sweep.json", 0.001);
  rt = make_runtime(with_sweep);
  ASSERT_NE(rt, nullptr);
  const auto w = explain(rt, s, true, "sm_90a");
  EXPECT_EQ(w["way"], nlohmann::json({"attn_bwd_fused_delta", "attn_bwd_dsink"})) << w;
  for (const auto& st : w["stages"]) EXPECT_EQ(st["compile"]["ok"], true) << st;
  ft_runtime_destroy(rt);
  // Without any dsink entry the backward of a learned-sinks shape takes the built-in fallback for that stage, and says
  // so; the tuned stages are still the file's.
  const auto no_dsink = testing::edited_configs("no_dsink.json", [](nlohmann::json& e) { return e["family"] != "attn_bwd_dsink"; });
  rt = make_runtime(no_dsink);
  ASSERT_NE(rt, nullptr);
  const auto b = explain(rt, s, true, "sm_90a");
  ASSERT_EQ(b["stages"].size(), 4u) << b;
  EXPECT_EQ(b["stages"][3]["family"], "attn_bwd_dsink");
  EXPECT_EQ(b["stages"][3]["untuned"], true);
  EXPECT_EQ(b["stages"][0]["untuned"], false);
  ft_runtime_destroy(rt);
  // With an empty file every stage is a fallback; a shape none of them can run (fp32 head_dim 256: no backward kernel
  // takes it) has no complete way, and the error names each stage's reason.
  const auto empty = testing::edited_configs("empty.json", [](nlohmann::json&) { return false; });
  rt = make_runtime(empty);
  ASSERT_NE(rt, nullptr);
  for (const auto& d : {testing::shape(1, 4, 4, 256, 256, 128, FT_BF16, 1), testing::shape(1, 4, 1, 200, 333, 16, FT_F16, 1),
                        testing::shape(1, 4, 2, 130, 130, 64, FT_F32, 0, 0, 0, 1)}) {
    const auto e = explain(rt, d, true, "sm_90a");
    ASSERT_FALSE(e["stages"].empty()) << e;
    for (const auto& st : e["stages"]) EXPECT_EQ(st["untuned"], true) << e;
    EXPECT_EQ(explain(rt, d, false, "sm_90a")["stages"][0]["untuned"], true);
  }
  const auto d256 = testing::shape(1, 4, 4, 256, 256, 256, FT_F32);
  std::string buf(4096, '\0');
  EXPECT_EQ(ft_attention_explain(rt, &d256, 1, "sm_90a", buf.data(), buf.size(), nullptr), FT_ERR_NO_CONFIG);
  EXPECT_NE(std::string(ft_last_error()).find("no complete way (attn_bwd_preprocess: head_dim 256 not supported"),
            std::string::npos) << ft_last_error();
  ft_runtime_destroy(rt);
}

TEST(RuntimeCApi, BuiltInFallbacksAreTheHopperKernelsOnSm90aAndMmaSyncElsewhere) {
  // An empty file: on sm_90a the f16 / bf16 head_dim 64 and 128 shapes without a window get the TMA forward (mma 91)
  // and the fused wgmma backward at the configs tuned for each (head_dim 128: 80-row items non-causal, 64-row causal;
  // head_dim 64: 128-row items); causal windows at head_dim 64 the GPT-OSS forward and the windowed sweep (mma 92);
  // their kernels compile. On sm_80, and for the shapes none of those takes, the mma.sync ones. Every stage says it
  // is untuned.
  const auto empty = testing::edited_configs("empty_hopper.json", [](nlohmann::json&) { return false; });
  ft_runtime* rt = make_runtime(empty);
  ASSERT_NE(rt, nullptr);
  auto has = [](const nlohmann::json& stage, const std::string& item) {
    return ("," + stage["config"].get<std::string>() + ",").find("," + item) != std::string::npos;
  };
  struct Case {
    ft_attn_shape s;
    std::string bwd_way;  // the backward's second stage on sm_90a (attn_bwd_dsink: the windowed sweep came first)
    std::string bwd_item, fwd_item;  // in the chosen configs on sm_90a
  };
  const std::vector<Case> cases = {
      {shape(2, 8, 8, 1024, 1024, 128, FT_BF16, 0), "attn_bwd_fused", "block_m=80,", "block_m=128,"},
      {shape(1, 8, 2, 1000, 1000, 128, FT_F16, 1), "attn_bwd_fused", "block_m=64,", "block_m=128,"},
      {shape(1, 8, 2, 512, 700, 64, FT_BF16, 1), "attn_bwd_fused", "block_m=128,", "block_m=192,"},
      {shape(1, 8, 2, 512, 512, 64, FT_BF16, 1, 128, 0, 1), "attn_bwd_dsink", "mma=92,", "pack_heads=4,"},
      {shape(1, 8, 2, 512, 512, 128, FT_BF16, 1, 128), "attn_bwd_dkdv", "mma=80,", "mma=80,"},
      {shape(1, 4, 1, 200, 333, 16, FT_F16, 1), "attn_bwd_dkdv", "mma=80,", "mma=80,"},
      {shape(1, 4, 2, 130, 130, 64, FT_F32, 0), "attn_bwd_dkdv", "mma=80,", "mma=80,"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.bwd_way + " " + c.bwd_item);
    const auto b = explain(rt, c.s, true, "sm_90a");
    const auto f = explain(rt, c.s, false, "sm_90a");
    ASSERT_GE(b["stages"].size(), 2u) << b;
    for (const auto& j : {b, f})
      for (const auto& st : j["stages"]) {
        EXPECT_EQ(st["untuned"], true) << j;
        EXPECT_EQ(st["compile"]["ok"], true) << st;
      }
    EXPECT_EQ(b["way"][1], c.bwd_way) << b;
    const auto& main_stage = c.bwd_way == "attn_bwd_dsink" ? b["stages"][0] : b["stages"][1];
    EXPECT_TRUE(has(main_stage, c.bwd_item)) << b;
    EXPECT_TRUE(has(f["stages"][0], c.fwd_item)) << f;
    EXPECT_EQ(has(f["stages"][0], "mma=91,"), c.fwd_item != "mma=80,") << f;
    const auto b80 = explain(rt, c.s, true, "sm_80");
    EXPECT_EQ(b80["way"][1], "attn_bwd_dkdv") << b80;
    EXPECT_TRUE(has(explain(rt, c.s, false, "sm_80")["stages"][0], "mma=80,"));
  }
  ft_runtime_destroy(rt);
}

TEST(RuntimeCApi, BadShapesAndBuffersAreStatusesWithMessages) {
  ft_runtime* rt = make_runtime(testing::runtime_configs());
  ASSERT_NE(rt, nullptr);
  std::string buf(8, '\0');
  std::size_t needed = 0;
  auto s = shape(1, 6, 4, 256, 256, 64, FT_BF16);
  EXPECT_EQ(ft_attention_explain(rt, &s, 0, "sm_90a", buf.data(), buf.size(), &needed), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_last_error()).find("heads_q (6) must be a multiple of heads_kv (4)"), std::string::npos);
  s = shape(1, 4, 4, 256, 256, 64, 7);
  EXPECT_EQ(ft_attention_explain(rt, &s, 0, "sm_90a", buf.data(), buf.size(), &needed), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_last_error()).find("dtype 7"), std::string::npos);
  s = shape(1, 4, 4, 256, 256, 64, FT_BF16, 0, 0, 4);
  EXPECT_EQ(ft_attention_explain(rt, &s, 0, "sm_90a", buf.data(), buf.size(), &needed), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_last_error()).find("sink_tokens needs a window"), std::string::npos);
  s = shape(1, 4, 4, 256, 256, 64, FT_BF16);
  EXPECT_EQ(ft_attention_explain(rt, &s, 0, "sm_99", buf.data(), buf.size(), &needed), FT_ERR_ARGUMENT);
  // Too small a buffer: FT_ERR_BUFFER and the size needed; that size then works.
  EXPECT_EQ(ft_attention_explain(rt, &s, 0, "sm_90a", buf.data(), buf.size(), &needed), FT_ERR_BUFFER);
  ASSERT_GT(needed, buf.size());
  buf.assign(needed, '\0');
  EXPECT_EQ(ft_attention_explain(rt, &s, 0, "sm_90a", buf.data(), buf.size(), &needed), FT_OK) << ft_last_error();
  EXPECT_EQ(std::string(buf.c_str()).size() + 1, needed);
  EXPECT_EQ(ft_attention_explain(nullptr, &s, 0, "sm_90a", buf.data(), buf.size(), &needed), FT_ERR_ARGUMENT);
  EXPECT_EQ(ft_attention_explain(rt, nullptr, 0, "sm_90a", buf.data(), buf.size(), &needed), FT_ERR_ARGUMENT);
  ft_runtime_destroy(rt);
}

TEST(RuntimeCApi, LaunchesSayWhyTheyCannotRun) {
  ft_runtime* rt = make_runtime(testing::runtime_configs());
  ASSERT_NE(rt, nullptr);
  const auto s = shape(1, 4, 4, 256, 256, 64, FT_BF16);
  ft_attn_tensors t{};  // every pointer NULL
  const int rc = ft_attention_forward(rt, &s, &t, nullptr, nullptr, 0);
  if (cuda::device_count() == 0) {
    EXPECT_EQ(rc, FT_ERR_CUDA);  // no driver or GPU: said, not crashed
  } else {
    EXPECT_EQ(rc, FT_ERR_ARGUMENT);
    EXPECT_NE(std::string(ft_last_error()).find("tensor 'q' is NULL"), std::string::npos) << ft_last_error();
  }
  EXPECT_GT(std::string(ft_last_error()).size(), 10u);
  std::size_t bytes = 0;
  EXPECT_EQ(ft_attention_workspace_bytes(rt, &s, 1, nullptr), FT_ERR_ARGUMENT);
  if (cuda::device_count() == 0) {
    EXPECT_EQ(ft_attention_workspace_bytes(rt, &s, 1, &bytes), FT_ERR_CUDA);
  }
  EXPECT_EQ(ft_attention_backward(nullptr, &s, &t, nullptr, nullptr, 0), FT_ERR_ARGUMENT);
  ft_runtime_destroy(rt);
}

}  // namespace
}  // namespace flashtune
