// tests/attention/attn_fwd_gpu_test.cpp (label gpu; skips without a GPU): the fp16 / bf16 attn_fwd kernel
// through the real pipeline (fresh random inputs, NaN-poisoned outputs, double reference, pass rule) on
// every mask variant x dtype x head dim, ragged lengths, seq_q != seq_k, GQA / MQA, large logits, a large
// learned sink, window 1 and window >= seq, sink tokens > window; and a planted masking bug is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "db/store.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/attn_fwd.hpp"
#include "harness/runner/runner.hpp"
#include "tests/attention/gpu_launcher.hpp"
#include "tests/runner/runner_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;
using namespace flashtune::testing;

TEST(AttnFwdGpu, EveryVariantDtypeAndHeadDimMatchesTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  // The problems and configs live in a YAML file so that their kernels can be compiled ahead on the CPU
  // (FLASHTUNE_CACHE_DIR=.gpu/cache flashtune run --compile-only --arch sm_90a FILE).
  const auto exp = experiment::load_experiment(fs::path(FT_SOURCE_DIR) / "experiments/tests/attn_fwd_variants.yaml");
  auto opts = quiet_options(dir.path / "a.sqlite", false);
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_FALSE(s.compile_only);
  expect_all_pass(opts.db_path, 400);
}

// A kernel that ignores the causal mask on boundary tiles must be caught (the reference is not fooled
// by a mask that only interior tiles see).
TEST(AttnFwdGpu, PlantedMaskBugIsCaught) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const fs::path tdir = dir.path / "templates";
  ASSERT_TRUE(plant_bug(tdir, "attn_fwd.cuh", "const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);", "const bool need_mask = n0 + kBlockN > p.seq_k;"))
      << "the planted bug's anchor moved";
  const auto exp = experiment::parse_experiment(R"(
name: attn_fwd_planted
measure: {warmup: 1, min_samples: 2, max_samples: 2, max_time_s: 0.05}
studies:
  - family: attn_fwd
    problems: [{batch: 1, heads_q: 2, seq_q: 200, head_dim: 64, dtype: f16, causal: 1}]
    space: {mma: 80, block_m: 64, block_n: 64, num_warps: 4, num_stages: 2}
)", "attn_fwd_planted.yaml");
  auto opts = quiet_options(dir.path / "p.sqlite", false);
  opts.templates = tdir;
  runner::run_experiment(exp, opts);
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "status = 'incorrect'"), 1);
}

// The Hopper kernel (mma 90, wgmma): every variant, dtype and head dim 64 / 128 / 256 against the
// reference. Needs an sm_90 GPU (wgmma exists nowhere else).
TEST(AttnFwdGpu, WgmmaKernelMatchesTheReferenceOnEveryVariant) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  if (gpu_arch() != "sm_90a") GTEST_SKIP() << "wgmma needs an sm_90 GPU, this one is " << gpu_arch();
  TempDir dir;
  const auto exp =
      experiment::load_experiment(fs::path(FT_SOURCE_DIR) / "experiments/tests/attn_fwd_sm90_variants.yaml");
  auto opts = quiet_options(dir.path / "w.sqlite", false);
  runner::run_experiment(exp, opts);
  db::Store store(opts.db_path);
  // head_dim 256 with two warpgroups and two 128-key stages does not fit in shared memory, nor its
  // two such blocks an SM (min_blocks 2): pruned, and nothing else is.
  EXPECT_EQ(count(store, "status = 'invalid_config'"),
            count(store, "status = 'invalid_config' AND (reason LIKE 'shared memory%' OR "
                         "(reason LIKE 'min_blocks 2 %' AND "
                         "problem_id IN (SELECT id FROM problems WHERE key LIKE '%head_dim=256%')))"));
  const auto bad = store.sql(
      "SELECT p.key, c.key, t.status, t.reason FROM trials t JOIN problems p ON p.id = t.problem_id "
      "JOIN configs c ON c.id = t.config_id WHERE t.status NOT IN ('ok', 'invalid_config') LIMIT 20");
  for (const auto& row : bad.rows) ADD_FAILURE() << row[0] << " | " << row[1] << ": " << row[2] << ": " << row[3];
  EXPECT_GE(count(store, "status = 'ok'"), 800);
  EXPECT_EQ(count(store, "status = 'ok' AND (max_abs_err > tolerance OR nan_count > 0)"), 0);
}

// The same planted mask bug in the wgmma kernel is caught too.
TEST(AttnFwdGpu, PlantedMaskBugInTheWgmmaKernelIsCaught) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  if (gpu_arch() != "sm_90a") GTEST_SKIP() << "wgmma needs an sm_90 GPU, this one is " << gpu_arch();
  expect_planted_bug_caught("attn_fwd_sm90.cuh",
                            "const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);",
                            "const bool need_mask = n0 + kBlockN > p.seq_k;", R"(
name: attn_fwd_sm90_planted
measure: {warmup: 1, min_samples: 2, max_samples: 2, max_time_s: 0.05}
studies:
  - family: attn_fwd
    problems: [{batch: 1, heads_q: 2, seq_q: 200, head_dim: 64, dtype: f16, causal: 1}]
    space: {mma: [80, 90], mma_pipe: [1, 2], block_m: 64, block_n: 64, num_warps: 4, num_stages: 2, min_blocks: 1, epilogue: 1, pack_heads: 1}
)",
                            1, 2);  // mma 80, untouched; mma 90, planted, in both pipelines
}

// The warp-specialized TMA kernel (mma 91): every variant, dtype and head dim 64 / 128 / 256, ragged lengths (TMA
// boxes past the rows read zero, the TMA store skips them), windows, sinks, head packing, one to three consumer
// warpgroups, ping-pong on and off, both epilogues. Only head_dim 256 configs that do not fit shared memory (the
// 128 x 128 tiles), a consumer's registers or the launch share (three consumers) are pruned.
TEST(AttnFwdGpu, TmaKernelMatchesTheReferenceOnEveryVariant) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  if (gpu_arch() != "sm_90a") GTEST_SKIP() << "TMA and wgmma need an sm_90 GPU, this one is " << gpu_arch();
  TempDir dir;
  const auto exp = experiment::load_experiment(fs::path(FT_SOURCE_DIR) / "experiments/tests/attn_fwd_tma_variants.yaml");
  auto opts = quiet_options(dir.path / "t.sqlite", false);
  runner::run_experiment(exp, opts);
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "status = 'invalid_config'"),
            count(store, "status = 'invalid_config' AND (reason LIKE 'shared memory%' OR reason LIKE 'about % registers%' OR "
                         "reason LIKE 'min_blocks % leaves % registers per thread at launch%') AND "
                         "problem_id IN (SELECT id FROM problems WHERE key LIKE '%head_dim=256%')"));
  const auto bad = store.sql(
      "SELECT p.key, c.key, t.status, t.reason FROM trials t JOIN problems p ON p.id = t.problem_id "
      "JOIN configs c ON c.id = t.config_id WHERE t.status NOT IN ('ok', 'invalid_config') LIMIT 20");
  for (const auto& row : bad.rows) ADD_FAILURE() << row[0] << " | " << row[1] << ": " << row[2] << ": " << row[3];
  EXPECT_GE(count(store, "status = 'ok'"), 500);
  EXPECT_EQ(count(store, "status = 'ok' AND (max_abs_err > tolerance OR nan_count > 0)"), 0);
}

// The planted boundary-mask bug in the TMA kernel is caught: both pipelines, ping-pong, a block per unit or a
// persistent grid (static or dynamic).
TEST(AttnFwdGpu, PlantedMaskBugInTheTmaKernelIsCaught) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  if (gpu_arch() != "sm_90a") GTEST_SKIP() << "TMA and wgmma need an sm_90 GPU, this one is " << gpu_arch();
  expect_planted_bug_caught("attn_fwd_sm90_tma.cuh",
                            "const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);",
                            "const bool need_mask = n0 + kBlockN > p.seq_k;", R"(
name: attn_fwd_tma_planted
measure: {warmup: 1, min_samples: 2, max_samples: 2, max_time_s: 0.05}
studies:
  - family: attn_fwd
    problems: [{batch: 1, heads_q: 2, seq_q: 300, head_dim: 64, dtype: f16, causal: 1}]
    space: {mma: [80, 91], mma_pipe: [1, 2], mma_sched: [1, 2], block_m: 128, block_n: 64, num_warps: 8, num_stages: 2, min_blocks: 1, epilogue: 1, pack_heads: 1, exp_poly: 1, rescale: 1, persistent: [1, 2, 3]}
)",
                            1, 9);  // mma 80, untouched; mma 91, planted: pipe 1, pipe 2, pipe 2 + ping-pong, each with 3 grids
}

// mma 91 persistent 3 deals its work units by a global ticket counter (ft/schedule.cuh) that every launch must
// leave zero. Three back-to-back launches on shapes with several times more units than blocks (outputs poisoned
// before each): every launch computes every unit (bitwise equal to the first: a unit's result does not depend on
// the block that ran it; no NaN left) and leaves both counters zero. (That the results are right, on shapes with
// more units than blocks too, is the TMA matrix's part: experiments/tests/attn_fwd_tma_variants.yaml.)
TEST(AttnFwdGpu, DynamicSchedulerLeavesItsCountersZeroAfterEveryLaunch) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  if (gpu_arch() != "sm_90a") GTEST_SKIP() << "TMA and wgmma need an sm_90 GPU, this one is " << gpu_arch();
  Launcher gpu;
  const auto& f = fam("attn_fwd");
  const core::Config wide{{{"mma", 91}, {"block_m", 192}, {"num_warps", 12}, {"block_n", 128}, {"num_stages", 2}, {"mma_pipe", 2},
                           {"mma_sched", 1}, {"epilogue", 2}, {"min_blocks", 1}, {"pack_heads", 1}, {"exp_poly", 1},
                           {"rescale", 2}, {"persistent", 3}}};
  const core::Config packed{{{"mma", 91}, {"block_m", 64}, {"num_warps", 4}, {"block_n", 32}, {"num_stages", 2}, {"mma_pipe", 2},
                             {"mma_sched", 1}, {"epilogue", 2}, {"min_blocks", 4}, {"pack_heads", 4}, {"exp_poly", 1},
                             {"rescale", 2}, {"persistent", 3}}};
  for (const auto* c : {&wide, &packed})
    for (std::int64_t causal : {0, 1}) {
      const auto p = problem({{"batch", 2}, {"heads_q", 16}, {"heads_kv", 4}, {"seq_q", 2000}, {"head_dim", 64}, {"causal", causal},
                              {"window", c == &packed ? 128 : 0}, {"learned_sinks", c == &packed ? 1 : 0}},
                             core::DType::bf16);
      const std::string what = c->key() + " | " + p.key();
      const auto in = draw(f, p, 5);
      std::vector<std::vector<kernels::HostTensor>> each;
      gpu.run_repeated(f, *c, p, in, 3, Launcher::Workspaces::zero, each);
      ASSERT_EQ(each.size(), 3u) << what;
      for (std::size_t k = 0; k < each.size(); ++k) {
        const auto& words = each[k][kernels::attn::kSchedule].values;
        ASSERT_EQ(words.size(), 2u) << what;
        EXPECT_EQ(words[0], 0.0) << what << ": tickets left after launch " << k;
        EXPECT_EQ(words[1], 0.0) << what << ": done count left after launch " << k;
        for (int b : {kernels::attn::kO, kernels::attn::kLse}) {
          const auto& got = each[k][std::size_t(b)].values;
          const auto& first = each[0][std::size_t(b)].values;
          ASSERT_EQ(got.size(), first.size()) << what;
          std::size_t nan = 0, differ = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            nan += std::isnan(got[i]) ? 1 : 0;
            differ += std::memcmp(&got[i], &first[i], sizeof(double)) != 0 ? 1 : 0;
          }
          EXPECT_EQ(nan, 0u) << what << ": launch " << k << " left elements unwritten (buffer " << b << ")";
          EXPECT_EQ(differ, 0u) << what << ": launch " << k << " differs from the first (buffer " << b << ")";
        }
      }
    }
}
