// tests/attention/attn_bwd_gpu_test.cpp (label gpu; skips without a GPU): the attention backward stages
// on a GPU. (1) Each stage through the real pipeline against the double reference on every variant of
// experiments/tests/attn_bwd_variants.yaml. (2) Determinism: two launches give bitwise-equal dK, dV, dQ
// and d(sink). (3) End to end: the real forward (attn_fwd) gives O and LSE, then preprocess, dkdv, dq and
// dsink run on them, and dQ, dK, dV, d(sink) are compared with the double backward of the double forward.
// (4) On sm_90a, the Hopper dkdv kernel (mma 90) on experiments/tests/attn_bwd_sm90_variants.yaml, in the
// determinism and end-to-end checks, and against a planted mask bug. (5) fp32, exact and TF32
// (attn_bwd_f32.cuh): every stage on experiments/tests/attn_bwd_f32_variants.yaml, determinism (both), and
// end to end (exact) from the fp32 forward.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "db/store.hpp"
#include "harness/cuda/buffer.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/module.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/attention.hpp"
#include "harness/kernels/attn_bwd.hpp"
#include "harness/runner/runner.hpp"
#include "kernel_templates/attn_params.cuh"
#include "reference/attention_bwd.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"
#include "tests/attention/gpu_launcher.hpp"
#include "tests/runner/runner_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;
using flashtune::testing::count;
using flashtune::testing::Launcher;
using flashtune::testing::draw;
using flashtune::testing::expect_all_pass;
using flashtune::testing::fam;
using flashtune::testing::problem;
using flashtune::testing::have_gpu;
using flashtune::testing::quiet_options;
using flashtune::testing::TempDir;

namespace {

// Runs experiments/tests/<file> on the GPU into a fresh database: every trial ok, at least min_ok of them.
void expect_variants_file_passes(const std::string& file, std::int64_t min_ok) {
  TempDir dir;
  const auto exp = experiment::load_experiment(fs::path(FT_SOURCE_DIR) / "experiments/tests" / file);
  auto opts = quiet_options(dir.path / "v.sqlite", false);
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_FALSE(s.compile_only) << file;
  expect_all_pass(opts.db_path, min_ok);
}

// Configs every head dim 16..128 can run (one 16-row MMA tile per warp).
const core::Config kDkdv{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 1}, {"sink_split", 1}}};
// The sink tiles split over 7 extra blocks each (an odd count: chunks of unequal size).
const core::Config kDkdvSplit{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 1}, {"sink_split", 7}}};
// Every key tile's items split over 5 blocks (item_split; unequal and, on short tiles, empty chunks).
const core::Config kDkdvItems{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 1}, {"item_split", 5}}};
// The Hopper kernel (mma 90, sm_90a only): one warpgroup per 64 keys, head dims 64 and 128.
const core::Config kDkdvWgmma{
    {{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}, {"sink_split", 1}, {"mma", 90}}};
const core::Config kDq{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}}};
// dK, dV and dQ in one pass (sm_90a, head dims 64 and 128): two warpgroups, dQ pieces of 64 columns.
const core::Config kFused{{{"block_m", 64}, {"block_n", 128}, {"num_warps", 8}, {"num_stages", 2}}};
// The same split on the warp-specialized TMA kernel (mma 91): a producer warpgroup and two consumer warpgroups.
const core::Config kFusedTma{{{"block_m", 64}, {"block_n", 128}, {"num_warps", 8}, {"num_stages", 2}, {"mma", 91}}};
// The same with dQ added in key-block order (dq_order 2: deterministic).
const core::Config kFusedTmaDet{
    {{"block_m", 64}, {"block_n", 128}, {"num_warps", 8}, {"num_stages", 2}, {"mma", 91}, {"dq_order", 2}}};
// The same with 80-row items (head_dim 128: dQ^T pieces, turns per 80-row accumulator block).
const core::Config kFusedTmaDet80{
    {{"block_m", 80}, {"block_n", 128}, {"num_warps", 8}, {"num_stages", 2}, {"mma", 91}, {"dq_order", 2}}};
// The same with 128-row items (head_dim 64: two 64-row dQ pieces an item, each its own turn; epilogue 2).
const core::Config kFusedTmaDet128{{{"block_m", 128}, {"block_n", 128}, {"num_warps", 8}, {"num_stages", 2}, {"mma", 91},
                                    {"dq_order", 2}, {"epilogue", 2}}};
// The windowed sweep (mma 92: causal windows at head_dim 64, three consumer warpgroups, one key tile each).
const core::Config kFusedSweep{{{"block_m", 64}, {"block_n", 192}, {"num_warps", 12}, {"num_stages", 2}, {"mma", 92}}};
const core::Config kFwd{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}}};
const core::Config kPre{{{"block_m", 64}, {"num_warps", 4}}};
const core::Config kSink{{{"num_warps", 8}}};


}  // namespace

TEST(AttnBwdGpu, EveryStageAndVariantMatchesTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  expect_variants_file_passes("attn_bwd_variants.yaml", 300);
}

// The fp32 kernels, exact FFMA and TF32, on every variant against the double reference.
TEST(AttnBwdGpu, Fp32ExactAndTf32StagesMatchTheReferenceOnEveryVariant) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  expect_variants_file_passes("attn_bwd_f32_variants.yaml", 300);
}

// The Hopper kernels (wgmma): attn_bwd_dkdv's mma 90 and attn_bwd_fused, every variant, dtype and head dim
// 64 / 128 against the reference. Needs an sm_90 GPU (wgmma exists nowhere else).
TEST(AttnBwdGpu, WgmmaKernelsMatchTheReferenceOnEveryVariant) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  if (flashtune::testing::gpu_arch() != "sm_90a")
    GTEST_SKIP() << "wgmma needs an sm_90 GPU, this one is " << flashtune::testing::gpu_arch();
  expect_variants_file_passes("attn_bwd_sm90_variants.yaml", 150);
}

// The planted boundary-mask bug in the wgmma dkdv loop's P^T (ft/attn_bwd.cuh) is caught, in attn_bwd_dkdv's mma 90
// and in attn_bwd_fused's mma 90 and 91, which share it (mma 80 untouched passes).
TEST(AttnBwdGpu, PlantedMaskBugInTheWgmmaDkdvKernelIsCaught) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  if (flashtune::testing::gpu_arch() != "sm_90a")
    GTEST_SKIP() << "wgmma needs an sm_90 GPU, this one is " << flashtune::testing::gpu_arch();
  TempDir dir;
  const fs::path tdir = dir.path / "templates";
  ASSERT_TRUE(flashtune::testing::plant_bug(
      tdir, "ft/attn_bwd.cuh",
      "const bool need_mask = m0 + kBlockM > seq_q || ft_attn_tile_needs_mask(mask, m0, m0 + kBlockM, n0, kBlockN);",
      "const bool need_mask = m0 + kBlockM > seq_q || n0 + kBlockN > mask.seq_k;"))
      << "the planted bug's anchor moved";
  const auto exp = experiment::parse_experiment(R"(
name: attn_bwd_sm90_planted
measure: {warmup: 1, min_samples: 2, max_samples: 2, max_time_s: 0.05}
studies:
  - family: attn_bwd_dkdv
    problems: [{batch: 1, heads_q: 2, seq_q: 200, head_dim: 64, dtype: f16, causal: 1}]
    space: {mma: [80, 90], block_m: 64, block_n: 64, num_warps: 4, num_stages: 1, sink_split: 1}
  - family: attn_bwd_fused
    problems: [{batch: 1, heads_q: 2, seq_q: 200, head_dim: 64, dtype: f16, causal: 1}]
    space: {mma: [90, 91], block_m: 64, block_n: 64, num_warps: 4, num_stages: 1}
)", "attn_bwd_sm90_planted.yaml");
  auto opts = quiet_options(dir.path / "p.sqlite", false);
  opts.templates = tdir;
  runner::run_experiment(exp, opts);
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "status = 'ok'"), 1);         // mma 80, untouched
  EXPECT_EQ(count(store, "status = 'incorrect'"), 3);  // mma 90 and the fused mma 90 / 91 (the same P^T), planted
}

// No atomics anywhere: the same inputs give the same bits, launch after launch (dK, dV with GQA and the
// sink-token hot spot, unsplit, split over extra blocks and item-split, dQ, dQ and D inline, and the sink gradient's
// fixed-order reduction), in bf16 and in fp32 exact and TF32; and the fused TMA pass with deterministic dQ (its bulk
// reduce-adds in key-block order), dQ, dK and dV, on sm_90a.
TEST(AttnBwdGpu, TwoRunsAreBitwiseEqual) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  Launcher gpu;
  for (std::int64_t dt = 0; dt < 3; ++dt) {  // bf16, fp32 exact, fp32 TF32
    for (const char* name : {"attn_bwd_dkdv", "attn_bwd_dkdv_split", "attn_bwd_dkdv_items", "attn_bwd_dkdv_wgmma", "attn_bwd_dq",
                             "attn_bwd_dq_delta", "attn_bwd_dsink", "attn_bwd_fused_det", "attn_bwd_fused_det80",
                             "attn_bwd_fused_det128"}) {
      const std::string n = name;
      const bool det80 = n == "attn_bwd_fused_det80";
      const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 777}, {"seq_k", 777}, {"head_dim", det80 ? 128 : 64},
                              {"causal", 1}, {"window", 100}, {"sink_tokens", 4}, {"learned_sinks", 1}, {"sink_bias", 3},
                              {"tf32", dt == 2}},
                             dt == 0 ? core::DType::bf16 : core::DType::f32);
      const bool fused = n.rfind("attn_bwd_fused", 0) == 0;
      if ((n == "attn_bwd_dkdv_wgmma" || fused) && gpu.info().arch != "sm_90a") continue;  // sm_90a only
      if (dt > 0 && (n == "attn_bwd_dkdv_wgmma" || n == "attn_bwd_dkdv_split" || n == "attn_bwd_dkdv_items" ||
                     n == "attn_bwd_dq_delta" || fused))
        continue;  // fp16 / bf16 only
      const auto& f = fam(n.rfind("attn_bwd_dkdv", 0) == 0 ? "attn_bwd_dkdv" : fused ? "attn_bwd_fused" : n);
      const core::Config& c = n == "attn_bwd_dsink" ? kSink
                              : n == "attn_bwd_dkdv" ? kDkdv
                              : n == "attn_bwd_dq" || n == "attn_bwd_dq_delta" ? kDq
                              : n == "attn_bwd_dkdv_wgmma" ? kDkdvWgmma
                              : n == "attn_bwd_dkdv_items" ? kDkdvItems
                              : n == "attn_bwd_fused_det" ? kFusedTmaDet
                              : det80                       ? kFusedTmaDet80
                              : n == "attn_bwd_fused_det128" ? kFusedTmaDet128
                                                           : kDkdvSplit;
      auto a = draw(f, p, 42), b = a;
      gpu.run(f, c, p, a);
      gpu.run(f, c, p, b);
      const auto specs = f.buffers(p);
      for (std::size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].role != kernels::BufferRole::output) continue;
        ASSERT_EQ(a[i].values.size(), b[i].values.size());
        EXPECT_EQ(std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(double)), 0)
            << name << " " << p.key() << " " << specs[i].name << " differs between two runs";
      }
    }
  }
}

// timeline 2 (a diagnostic, kernel_templates/ft/timeline.cuh): every launched block of the pass leaves a record of
// its phases after the accumulator's counters. Two launches back to back (the second's records read): every block's
// record is there (entry stamps set; no more distinct SM ids than SMs), the items of the blocks sum to the grid's (non-
// causal: every block sees every query tile), and a block's stamps run in its phases' order. With FT_TIMELINE_OUT
// set, each config's records go to FT_TIMELINE_OUT/timeline_<n>.csv for `python -m flashtune.timeline`; with
// FT_TIMELINE_SHAPE="batch,heads,seq" (the measurement: 2,16,8192) they are taken at that shape instead of b1 h8 4k;
// FT_TIMELINE_EPILOGUE=2 takes the configs' epilogue 2 (dK, dV by TMA stores) instead of 1.
TEST(AttnBwdGpu, TimelineRecordsEveryBlocksPhasesInOrder) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  Launcher gpu;
  if (gpu.info().arch != "sm_90a") GTEST_SKIP() << "mma 91 needs sm_90a, this GPU is " << gpu.info().arch;
  const auto& f = fam("attn_bwd_fused");
  std::int64_t batch = 1, heads = 8, seq = 4096;
  if (const char* shape = std::getenv("FT_TIMELINE_SHAPE")) {
    ASSERT_EQ(std::sscanf(shape, "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &batch, &heads, &seq), 3) << "FT_TIMELINE_SHAPE=" << shape;
  }
  // The tuned d128 configs (experiments/tests/attn_bwd_standings.yaml) at tail 1: non-causal 80-row items, causal
  // 64-row items in sections of two pairs.
  std::int64_t epilogue = 1;
  if (const char* e = std::getenv("FT_TIMELINE_EPILOGUE")) epilogue = std::atoi(e);
  ASSERT_TRUE(epilogue == 1 || epilogue == 2) << "FT_TIMELINE_EPILOGUE=" << epilogue;
  auto tma = [&](std::int64_t bm, std::int64_t ug) {
    return core::Config{{{"block_m", bm}, {"block_n", 128}, {"num_warps", 8}, {"num_stages", 2}, {"mma", 91},
                         {"unit_group", ug}, {"timeline", 2}, {"epilogue", epilogue}}};
  };
  const std::vector<std::pair<core::Config, std::int64_t>> cases{{tma(80, 1), 0}, {tma(64, 2), 1}};
  int n = 0;
  for (const auto& [c, causal] : cases) {
    const auto p = problem({{"batch", batch}, {"heads_q", heads}, {"seq_q", seq}, {"head_dim", 128}, {"causal", causal}},
                           core::DType::bf16);
    const std::string what = c.key() + " | " + p.key();
    const auto shape = f.launch_shape(c, p, gpu.info().limits);
    const std::size_t blocks = std::size_t(shape.grid[0]) * shape.grid[1] * shape.grid[2];
    std::vector<std::vector<kernels::HostTensor>> each;
    gpu.run_repeated(f, c, p, draw(f, p, 3), 2, Launcher::Workspaces::zero, each);
    ASSERT_EQ(each.size(), 2u) << what;
    const auto& words = each[1][kernels::attn_bwd::kFusedAcc].values;
    const auto base = std::size_t(kernels::attn_bwd::fused_timeline_words(c, p));
    constexpr std::size_t kSlots = FtBwdTimeline::slots();
    ASSERT_LE(base + blocks * kSlots * 2, words.size()) << what << ": the records do not fit the workspace";
    auto at = [&](std::size_t b, std::size_t slot) {
      const std::size_t w = base + (b * kSlots + slot) * 2;
      return std::uint64_t(words[w]) | std::uint64_t(words[w + 1]) << 32;
    };
    std::uint64_t items = 0;
    std::size_t unordered = 0, missing = 0;
    std::set<std::uint64_t> sms;  // %smid need not be below the SM count (PTX: not contiguous); how many there are is
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint64_t n_items = at(b, 0) & 0xffffffffu, sm = at(b, 0) >> 32;
      items += n_items;
      sms.insert(sm);
      if (at(b, 1) == 0 || at(b, 2) == 0 || sm >= 4096) ++missing;
      if (n_items == 0) continue;
      const bool ordered = at(b, 2) <= at(b, 3) && at(b, 3) <= at(b, 4) && at(b, 4) <= at(b, 5) && at(b, 5) <= at(b, 6) &&
                           at(b, 2) <= at(b, 7) && at(b, 2) <= at(b, 8) && at(b, 1) <= at(b, 9);
      unordered += ordered ? 0 : 1;
    }
    EXPECT_EQ(missing, 0u) << what << ": blocks without a whole record";
    EXPECT_LE(sms.size(), std::size_t(gpu.info().limits.num_sms)) << what << ": more SM ids than SMs";
    EXPECT_EQ(unordered, 0u) << what << ": blocks whose stamps are out of their phases' order";
    const std::uint64_t tiles = std::uint64_t((seq + c.at("block_m") - 1) / c.at("block_m"));
    if (!causal) {
      const std::int64_t bn = c.at("block_n");
      EXPECT_EQ(items, tiles * std::uint64_t(heads * batch) * std::uint64_t((seq + bn - 1) / bn)) << what;
    }
    EXPECT_GT(items, 0u) << what;
    if (const char* dir = std::getenv("FT_TIMELINE_OUT")) {
      const std::string path = std::string(dir) + "/timeline_" + std::to_string(n) + ".csv";
      std::FILE* out = std::fopen(path.c_str(), "w");
      ASSERT_NE(out, nullptr) << path;
      std::fprintf(out, "# %s\nblock,sm,items,gt_entry,entry,kv,first,last,stored,writer,last1,gt_stored\n", what.c_str());
      for (std::size_t b = 0; b < blocks; ++b) {
        std::fprintf(out, "%zu,%llu,%llu", b, static_cast<unsigned long long>(at(b, 0) >> 32),
                     static_cast<unsigned long long>(at(b, 0) & 0xffffffffu));
        for (std::size_t slot = 1; slot < kSlots; ++slot) std::fprintf(out, ",%llu", static_cast<unsigned long long>(at(b, slot)));
        std::fprintf(out, "\n");
      }
      std::fclose(out);
    }
    ++n;
  }
}

// The whole backward on the real forward's O and LSE against the double backward of the double forward.
// The same-precision side of the pass rule: the fp32 forward (O rounded to the dtype, as the kernel
// stores it) followed by the fp32 backward, gradients rounded to the dtype.
TEST(AttnBwdGpu, EndToEndFromTheRealForwardMatchesTheReferenceBackward) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  Launcher gpu;
  using M = std::map<std::string, std::int64_t>;
  const std::vector<M> shapes{
      {{"batch", 2}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 333}, {"head_dim", 64}, {"causal", 1}, {"learned_sinks", 1}},
      {{"batch", 1}, {"heads_q", 4}, {"heads_kv", 1}, {"seq_q", 300}, {"head_dim", 128}, {"causal", 1}, {"window", 64}, {"sink_tokens", 100}},
      // the sink hot spot (split or not): a long sequence past a narrow window; seq_k < block_n
      {{"batch", 1}, {"heads_q", 4}, {"heads_kv", 1}, {"seq_q", 1000}, {"head_dim", 16}, {"causal", 1}, {"window", 64}, {"sink_tokens", 4}},
      {{"batch", 2}, {"heads_q", 2}, {"seq_q", 45}, {"head_dim", 32}, {"causal", 1}, {"window", 8}, {"sink_tokens", 3}},
      {{"batch", 1}, {"heads_q", 2}, {"seq_q", 100}, {"seq_k", 250}, {"head_dim", 32}, {"learned_sinks", 1}, {"sink_bias", 20}},
      {{"batch", 1}, {"heads_q", 2}, {"seq_q", 250}, {"seq_k", 100}, {"head_dim", 16}, {"causal", 1}},
      {{"batch", 1}, {"heads_q", 2}, {"seq_q", 200}, {"head_dim", 64}, {"causal", 1}, {"window", 1}, {"learned_sinks", 1}},
      {{"batch", 1}, {"heads_q", 2}, {"seq_q", 129}, {"head_dim", 64}, {"qk_range", 4}},
      // GPT-OSS-like (window 128, learned sinks, GQA 4): the windowed sweep over three chunks
      {{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 700}, {"head_dim", 64}, {"causal", 1}, {"window", 128}, {"learned_sinks", 1}},
  };
  for (core::DType dt : {core::DType::f16, core::DType::bf16, core::DType::f32})  // f32: exact FFMA
    for (const auto& dims : shapes) {
      const auto p = problem(dims, dt);
      const std::string what = p.key();
      const auto s = kernels::attn::Shape(p);
      const auto& fwd = fam("attn_fwd");
      auto ft = draw(fwd, p, 7);  // q, k, v, sinks, o, lse
      gpu.run(fwd, kFwd, p, ft);
      const auto& q = ft[kernels::attn::kQ].values;
      const auto& k = ft[kernels::attn::kK].values;
      const auto& v = ft[kernels::attn::kV].values;
      const auto& sinks = ft[kernels::attn::kSinks].values;
      auto dout = reference::uniform(q.size(), -1, 1, 99);
      reference::round_all(dt, dout);

      // The backward on the device.
      std::vector<kernels::HostTensor> pre{{dt, ft[kernels::attn::kO].values, {}}, {dt, dout, {}}, {core::DType::f32, {}, {}}};
      gpu.run(fam("attn_bwd_preprocess"), kPre, p, pre);
      const auto& delta = pre[kernels::attn_bwd::kPreDelta].values;
      const auto& lse = ft[kernels::attn::kLse].values;
      std::vector<kernels::HostTensor> kv{{dt, q, {}}, {dt, k, {}}, {dt, v, {}}, {dt, dout, {}},
                                          {core::DType::f32, lse, {}}, {core::DType::f32, delta, {}}, {dt, {}, {}}, {dt, {}, {}},
                                          {core::DType::f32, {}, {}}};  // + the workspace
      std::vector<kernels::HostTensor> dq(kv.begin(), kv.begin() + 7);
      auto kv_split = kv, kv_wgmma = kv, kv_items = kv;
      std::vector<kernels::HostTensor> fused{{dt, q, {}}, {dt, k, {}}, {dt, v, {}}, {dt, dout, {}}, {core::DType::f32, lse, {}},
                                             {core::DType::f32, delta, {}}, {dt, {}, {}}, {dt, {}, {}}, {dt, {}, {}},
                                             {core::DType::f32, {}, {}}};  // dq, dk, dv, the accumulator
      gpu.run(fam("attn_bwd_dkdv"), kDkdv, p, kv);
      const bool split = s.window > 0 && s.sink_tokens > 0 && dt != core::DType::f32;  // sink tiles split over extra blocks
      if (split) gpu.run(fam("attn_bwd_dkdv"), kDkdvSplit, p, kv_split);
      const bool items = dt != core::DType::f32;  // every key tile's items over 5 blocks (mma 80, 16-bit)
      if (items) gpu.run(fam("attn_bwd_dkdv"), kDkdvItems, p, kv_items);
      // The Hopper dkdv (mma 90) where it runs: sm_90a, head dims 64 and 128.
      const bool wgmma = !fam("attn_bwd_dkdv").can_run(kDkdvWgmma, p, gpu.info().limits);
      if (wgmma) gpu.run(fam("attn_bwd_dkdv"), kDkdvWgmma, p, kv_wgmma);
      gpu.run(fam("attn_bwd_dq"), kDq, p, dq);
      const bool one_pass = !fam("attn_bwd_fused").can_run(kFused, p, gpu.info().limits);
      if (one_pass) gpu.run(fam("attn_bwd_fused"), kFused, p, fused);
      auto fused_tma = fused, fused_det = fused;
      const bool tma = !fam("attn_bwd_fused").can_run(kFusedTma, p, gpu.info().limits);
      if (tma) gpu.run(fam("attn_bwd_fused"), kFusedTma, p, fused_tma);
      if (tma) gpu.run(fam("attn_bwd_fused"), kFusedTmaDet, p, fused_det);
      // The windowed sweep where it runs, twice: no atomics, the same bits.
      auto fused_sweep = fused, fused_sweep2 = fused;
      const bool sweep = !fam("attn_bwd_fused").can_run(kFusedSweep, p, gpu.info().limits);
      if (sweep) gpu.run(fam("attn_bwd_fused"), kFusedSweep, p, fused_sweep);
      if (sweep) gpu.run(fam("attn_bwd_fused"), kFusedSweep, p, fused_sweep2);
      for (int i : {kernels::attn_bwd::kFusedDq, kernels::attn_bwd::kFusedDk, kernels::attn_bwd::kFusedDv}) {
        if (sweep) {
          EXPECT_EQ(fused_sweep[i].values, fused_sweep2[i].values) << what << " mma 92 output " << i << " differs between two runs";
        }
      }
      // The sweep with D inline (attn_bwd_fused_delta: O in D's place, D out after the workspace).
      std::vector<kernels::HostTensor> fdelta{{dt, q, {}}, {dt, k, {}}, {dt, v, {}}, {dt, dout, {}}, {core::DType::f32, lse, {}},
                                              {dt, ft[kernels::attn::kO].values, {}}, {dt, {}, {}}, {dt, {}, {}}, {dt, {}, {}},
                                              {core::DType::f32, {}, {}}, {core::DType::f32, {}, {}}};
      const bool sweep_delta = sweep && !fam("attn_bwd_fused_delta").can_run(kFusedSweep, p, gpu.info().limits);
      if (sweep_delta) {
        gpu.run(fam("attn_bwd_fused_delta"), kFusedSweep, p, fdelta);
        const auto& d_inline = fdelta[kernels::attn_bwd::kFdDelta].values;
        ASSERT_EQ(d_inline.size(), delta.size());
        for (std::size_t r = 0; r < delta.size(); ++r)  // two fp32 sums of the same products, in another order
          ASSERT_NEAR(d_inline[r], delta[r], 1e-6 * double(s.head_dim)) << what << " D row " << r << " (fused_delta)";
      }
      // The preprocess fused into dQ (fp16 / bf16): dQ and D from O, then dK, dV from that D, in the launch
      // order of `query backward`'s dq_delta way.
      const bool inline_delta = dt != core::DType::f32;
      std::vector<kernels::HostTensor> dqd{{dt, q, {}}, {dt, k, {}}, {dt, v, {}}, {dt, dout, {}}, {core::DType::f32, lse, {}},
                                           {dt, ft[kernels::attn::kO].values, {}}, {dt, {}, {}}, {core::DType::f32, {}, {}}};
      std::vector<kernels::HostTensor> kv_dqd;
      if (inline_delta) {
        gpu.run(fam("attn_bwd_dq_delta"), kDq, p, dqd);
        kv_dqd = {{dt, q, {}}, {dt, k, {}}, {dt, v, {}}, {dt, dout, {}}, {core::DType::f32, lse, {}},
                  {core::DType::f32, dqd[kernels::attn_bwd::kDqdDelta].values, {}}, {dt, {}, {}}, {dt, {}, {}},
                  {core::DType::f32, {}, {}}};
        gpu.run(fam("attn_bwd_dkdv"), kDkdv, p, kv_dqd);
        const auto& d_inline = dqd[kernels::attn_bwd::kDqdDelta].values;
        ASSERT_EQ(d_inline.size(), delta.size());
        for (std::size_t r = 0; r < delta.size(); ++r)  // two fp32 sums of the same products, in another order
          ASSERT_NEAR(d_inline[r], delta[r], 1e-6 * double(s.head_dim)) << what << " D row " << r;
      }
      std::vector<double> dsinks;
      if (s.learned_sinks) {
        std::vector<kernels::HostTensor> ds{{core::DType::f32, sinks, {}}, {core::DType::f32, lse, {}},
                                            {core::DType::f32, delta, {}}, {core::DType::f32, {}, {}}};
        gpu.run(fam("attn_bwd_dsink"), kSink, p, ds);
        dsinks = ds[kernels::attn_bwd::kSinkDsinks].values;
      }

      // The references.
      std::vector<double> o64, lse64, o32, lse32;
      reference::attention_naive<double>(s, q, k, v, sinks, o64, lse64);
      reference::attention_naive<float>(s, q, k, v, sinks, o32, lse32);
      reference::round_all(dt, o32);
      reference::AttnGrads g64, g32;
      reference::attention_backward_naive<double>(s, q, k, v, sinks, o64, lse64, dout, g64);
      reference::attention_backward_naive<float>(s, q, k, v, sinks, o32, lse32, dout, g32);
      for (auto* x : {&g32.dq, &g32.dk, &g32.dv}) reference::round_all(dt, *x);
      const double atol = 2 * fam("attn_bwd_dq").default_atol(p);
      auto check = [&](const char* name, const std::vector<double>& out, const std::vector<double>& r64,
                       const std::vector<double>& r32, double tol) {
        const auto c = reference::compare(out, r64, r32, tol);
        EXPECT_TRUE(c.passed) << what << " " << name << ": max_abs_err " << c.max_abs_err << " > tolerance "
                              << c.tolerance << " (naive " << c.naive_err << "), NaN " << c.nan_count;
      };
      check("dq", dq[kernels::attn_bwd::kGradOut].values, g64.dq, g32.dq, atol);
      check("dk", kv[kernels::attn_bwd::kGradOut].values, g64.dk, g32.dk, atol);
      check("dv", kv[kernels::attn_bwd::kGradOut2].values, g64.dv, g32.dv, atol);
      if (wgmma) {
        check("dk (mma 90)", kv_wgmma[kernels::attn_bwd::kGradOut].values, g64.dk, g32.dk, atol);
        check("dv (mma 90)", kv_wgmma[kernels::attn_bwd::kGradOut2].values, g64.dv, g32.dv, atol);
      }
      // A one-pass variant's dQ, dK and dV (its outputs at the fused families' indices).
      auto check_fused = [&](const std::string& name, const std::vector<kernels::HostTensor>& out) {
        check(("dq (" + name + ")").c_str(), out[kernels::attn_bwd::kFusedDq].values, g64.dq, g32.dq, atol);
        check(("dk (" + name + ")").c_str(), out[kernels::attn_bwd::kFusedDk].values, g64.dk, g32.dk, atol);
        check(("dv (" + name + ")").c_str(), out[kernels::attn_bwd::kFusedDv].values, g64.dv, g32.dv, atol);
      };
      if (one_pass) check_fused("fused", fused);
      if (tma) check_fused("fused mma 91", fused_tma);
      if (tma) check_fused("fused mma 91, deterministic", fused_det);
      if (sweep) check_fused("fused mma 92", fused_sweep);
      if (sweep_delta) check_fused("fused_delta mma 92", fdelta);
      if (inline_delta) {
        check("dq (dq_delta)", dqd[kernels::attn_bwd::kDqdDq].values, g64.dq, g32.dq, atol);
        check("dk (D of dq_delta)", kv_dqd[kernels::attn_bwd::kGradOut].values, g64.dk, g32.dk, atol);
        check("dv (D of dq_delta)", kv_dqd[kernels::attn_bwd::kGradOut2].values, g64.dv, g32.dv, atol);
      }
      if (items) {
        check("dk (item_split 5)", kv_items[kernels::attn_bwd::kGradOut].values, g64.dk, g32.dk, atol);
        check("dv (item_split 5)", kv_items[kernels::attn_bwd::kGradOut2].values, g64.dv, g32.dv, atol);
      }
      if (split) {
        check("dk (sink_split 7)", kv_split[kernels::attn_bwd::kGradOut].values, g64.dk, g32.dk, atol);
        check("dv (sink_split 7)", kv_split[kernels::attn_bwd::kGradOut2].values, g64.dv, g32.dv, atol);
      }
      // d(sink) sums batch * seq_q terms, each carrying the rounding of O to the dtype through D.
      if (s.learned_sinks) check("dsinks", dsinks, g64.dsinks, g32.dsinks, atol * std::sqrt(double(s.batch * s.seq_q)));
    }
}

// A kernel that skips the element-wise mask on boundary tiles must fail the reference check, in each of the
// two gradient kernels (the tests are not fooled by masks that only interior tiles see).
TEST(AttnBwdGpu, PlantedMaskBugsAreCaught) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  const struct {
    const char* family;
    const char* file;
    const char* dtype;  // f32: exact and TF32, one incorrect trial each
    const char* from;
    const char* to;
  } bugs[] = {
      {"attn_bwd_dkdv", "attn_bwd.cuh", "f16",
       "const bool need_mask = m0 + kBlockM > p.seq_q || ft_attn_tile_needs_mask(mask, m0, m0 + kBlockM, n0, kBlockN);",
       "const bool need_mask = m0 + kBlockM > p.seq_q || n0 + kBlockN > p.seq_k;"},
      {"attn_bwd_dq", "attn_bwd.cuh", "f16", "const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);",
       "const bool need_mask = n0 + kBlockN > p.seq_k;"},
      {"attn_bwd_dkdv", "attn_bwd_f32.cuh", "f32",
       "const bool need_mask = m0 + kBlockM > p.seq_q || ft_attn_tile_needs_mask(mask, m0, m0 + kBlockM, n0, kBlockN);",
       "const bool need_mask = m0 + kBlockM > p.seq_q || n0 + kBlockN > p.seq_k;"},
      {"attn_bwd_dq", "attn_bwd_f32.cuh", "f32", "const bool need_mask = ft_attn_tile_needs_mask(mask, w0, w1, n0, kBlockN);",
       "const bool need_mask = n0 + kBlockN > p.seq_k;"},
  };
  for (const auto& bug : bugs) {
    TempDir dir;
    const fs::path tdir = dir.path / "templates";
    ASSERT_TRUE(flashtune::testing::plant_bug(tdir, bug.file, bug.from, bug.to)) << "the planted bug's anchor moved";
    const bool f32 = std::string(bug.dtype) == "f32";
    const auto exp = experiment::parse_experiment(std::string(R"(
name: attn_bwd_planted
measure: {warmup: 1, min_samples: 2, max_samples: 2, max_time_s: 0.05}
studies:
  - family: )") + bug.family + R"(
    problems: [{batch: 1, heads_q: 2, seq_q: 200, head_dim: 64, dtype: )" + bug.dtype + (f32 ? ", tf32: [0, 1]" : "") + R"(, causal: 1}]
    space: {block_m: 64, block_n: 64, num_warps: 4, num_stages: 1}
)", "attn_bwd_planted.yaml");
    auto opts = quiet_options(dir.path / "p.sqlite", false);
    opts.templates = tdir;
    runner::run_experiment(exp, opts);
    db::Store store(opts.db_path);
    EXPECT_EQ(count(store, "status = 'incorrect'"), f32 ? 2 : 1) << bug.family << " " << bug.dtype;
  }
}
