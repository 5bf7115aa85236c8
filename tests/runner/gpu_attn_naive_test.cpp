// tests/runner/gpu_attn_naive_test.cpp (gpu; skips only without a GPU): the attn_naive baseline through the
// whole pipeline (cuBLAS GEMMs + the softmax kernel, launched by the family): every dtype, every mask
// variant (causal, window, sink tokens, rows with no visible key), GQA and MQA, learned sinks, TF32 and
// large logits match the double reference; each trial's device_bytes includes the score matrix; a
// planted mask bug is recorded as incorrect.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "db/store.hpp"
#include "harness/cuda/cublas.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/family.hpp"
#include "harness/runner/runner.hpp"
#include "tests/runner/runner_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;
using namespace flashtune::testing;

TEST(GpuAttnNaive, MatchesTheReferenceOnEveryMaskGqaAndSinkVariant) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::string why;
  ASSERT_TRUE(cuda::cublas_available(&why)) << why;
  TempDir dir;
  // The matrix lives in a YAML file so that its kernels can be compiled ahead on the CPU
  // (FLASHTUNE_CACHE_DIR=.gpu/cache flashtune run --compile-only --arch sm_90a FILE).
  const auto exp = experiment::load_experiment(fs::path(FT_SOURCE_DIR) / "experiments/tests/attn_naive_variants.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.cache_dir = cache_dir(dir);
  const auto s = runner::run_experiment(exp, opts);
  EXPECT_FALSE(s.compile_only);
  db::Store store(opts.db_path);
  const std::int64_t problems = std::int64_t(exp.studies.at(0).problems.size());
  EXPECT_EQ(problems, 72 + 24 + 32 + 24 + 3 + 4 + 2);
  EXPECT_EQ(count(store, "status = 'ok'"), 2 * problems);
  const auto bad = store.sql("SELECT status, reason FROM trials WHERE status != 'ok' LIMIT 5");
  for (const auto& row : bad.rows) ADD_FAILURE() << row[0] << ": " << row[1];
  EXPECT_EQ(count(store, "status = 'ok' AND (max_abs_err > tolerance OR nan_count > 0)"), 0);

  // device_bytes: inputs, outputs and the batch * heads_q * seq_q * seq_k score matrix.
  const auto& family = *exp.studies.at(0).kernel;
  const auto* fused = kernels::find_family("attn_fwd");
  ASSERT_NE(fused, nullptr);
  for (const auto& p : exp.studies.at(0).problems) {
    const auto q = store.sql("SELECT t.device_bytes FROM trials t JOIN problems p ON p.id = t.problem_id "
                             "WHERE p.family = 'attn_naive' AND p.key = '" + p.key() + "'");
    ASSERT_EQ(q.rows.size(), 2u) << p.key();
    const std::int64_t scores = p.at("batch") * p.at("heads_q") * p.at("seq_q") * p.at("seq_k") *
                                std::int64_t(core::dtype_size(p.dtype));
    for (const auto& row : q.rows) {
      EXPECT_EQ(std::stoll(row.at(0)), expected_device_bytes(family, p)) << p.key();
      EXPECT_GE(std::stoll(row.at(0)), expected_device_bytes(*fused, p, false) + scores) << p.key();  // less attn_fwd's scheduler words
    }
  }
}

// Without the mask (a template override that builds it with causal and window off) a causal problem's
// masked keys get probability: the reference must catch it.
TEST(GpuAttnNaive, PlantedMaskBugIsCaughtByTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const fs::path tdir = dir.path / "templates";
  ASSERT_TRUE(plant_bug(tdir, "attn_naive.cuh", "FtAttnMask<kCausal, kWindow> mask(", "FtAttnMask<false, false> mask("))
      << "attn_naive.cuh no longer builds its mask this way: update the test";
  const auto exp = experiment::parse_experiment(R"(
name: gpu_attn_naive_planted
measure: {mode: hot, warmup: 1, min_samples: 3, max_samples: 3, max_time_s: 0.1}
studies:
  - family: attn_naive
    problems: [{batch: 1, heads_q: 2, seq_q: 64, seq_k: 64, head_dim: 64, dtype: [f32, bf16], causal: 1}]
    space: {block_threads: 256}
)", "gpu_attn_naive_planted.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.templates = tdir;
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_EQ(s.by_status.count("incorrect"), 1u) << "the planted bug was not caught";
  EXPECT_EQ(s.by_status.at("incorrect"), 2);
}
