// tests/runner/gpu_softmax_matmul_test.cpp (gpu; skips only without a GPU): the fused softmax(X) @ V
// kernel through the whole pipeline: ragged shapes (d1, d2, d3 not multiples of any tile; d2 = 1) in every
// dtype over a spread of configs, every default config on one ragged fp32 problem, large logits, and the
// course's shape with its sampled reference all match the double reference; memory stays linear; a
// planted bug (accumulators never rescaled when the running max grows) is recorded as incorrect.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "db/store.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/runner/runner.hpp"
#include "tests/runner/runner_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;
using namespace flashtune::testing;

TEST(GpuSoftmaxMatmul, MatchesTheReferenceOnRaggedShapesAndTheCourseShape) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  // The matrix lives in a YAML file so that its kernels can be compiled ahead on the CPU
  // (FLASHTUNE_CACHE_DIR=.gpu/cache flashtune run --compile-only --arch sm_90a FILE).
  const auto exp =
      experiment::load_experiment(fs::path(FT_SOURCE_DIR) / "experiments/tests/softmax_matmul_variants.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  const char* env = std::getenv("FLASHTUNE_CACHE_DIR");  // tools/gpu_run.sh: a cache filled ahead
  opts.cache_dir = env && *env ? fs::path(env) : dir.path / "cache";
  const auto s = runner::run_experiment(exp, opts);
  EXPECT_FALSE(s.compile_only);
  db::Store store(opts.db_path);
  // 72 ragged problems x the 6 configs the constraints keep, the default space's 20, 3 x 1.
  EXPECT_EQ(count(store, "status = 'ok'"), 72 * 6 + 20 + 3);
  const auto bad = store.sql("SELECT status, reason FROM trials WHERE status != 'ok' LIMIT 5");
  for (const auto& row : bad.rows) ADD_FAILURE() << row[0] << ": " << row[1];
  EXPECT_EQ(count(store, "status = 'ok' AND (max_abs_err > tolerance OR nan_count > 0)"), 0);
  // Linear memory: X, V and out, nothing of size d1 x d2 beside X.
  const auto course = store.sql("SELECT t.device_bytes FROM trials t JOIN problems p ON p.id = t.problem_id "
                                "WHERE p.key LIKE '%d1=2048%'");
  ASSERT_EQ(course.rows.size(), 1u);
  EXPECT_EQ(std::stoll(course.rows[0][0]), 4LL * (16 * 2048 * 512 + 16 * 512 * 512 + 16 * 2048 * 512));
}

TEST(GpuSoftmaxMatmul, PlantedMissingRescaleIsCaughtByTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const fs::path tdir = dir.path / "templates";
  ASSERT_TRUE(plant_bug(tdir, "softmax_matmul.cuh", "acc[i][j] *= alpha;", "acc[i][j] *= 1.0f;"))
      << "softmax_matmul.cuh no longer rescales this way: update the test";
  const auto exp = experiment::parse_experiment(R"(
name: gpu_softmax_matmul_planted
measure: {mode: hot, warmup: 1, min_samples: 3, max_samples: 3, max_time_s: 0.1}
studies:
  - family: softmax_matmul
    problems: [{batch: 1, d1: 64, d2: 1000, d3: 64, dtype: f32}]
    space: {block_m: 64, block_n: 64, block_k: 16, num_warps: 4}
)", "gpu_softmax_matmul_planted.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.templates = tdir;
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_EQ(s.by_status.count("incorrect"), 1u) << "the planted bug was not caught";
}
