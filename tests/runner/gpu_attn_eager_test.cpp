// tests/runner/gpu_attn_eager_test.cpp (gpu; skips only without a GPU): the attn_eager baseline (eager
// PyTorch replayed op for op) through the whole pipeline: experiments/tests/attn_eager_variants.yaml, every
// dtype, every mask variant (causal, window, sink tokens and their combinations), GQA and MQA, learned
// sinks, TF32, large logits and ragged lengths match the double reference; causal problems with rows that
// see no key are refused as invalid_config; each trial's device_bytes is the workspace model's; a planted
// mask bug is recorded as incorrect.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "db/store.hpp"
#include "harness/cuda/cublas.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/kernels/family.hpp"
#include "harness/runner/runner.hpp"
#include "tests/runner/runner_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;
using namespace flashtune::testing;

TEST(GpuAttnEager, MatchesTheReferenceOnEveryMaskGqaAndSinkVariant) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::string why;
  ASSERT_TRUE(cuda::cublas_available(&why)) << why;
  TempDir dir;
  const auto exp = experiment::load_experiment(fs::path(FT_SOURCE_DIR) / "experiments/tests/attn_eager_variants.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.cache_dir = cache_dir(dir);
  const auto s = runner::run_experiment(exp, opts);
  EXPECT_FALSE(s.compile_only);
  db::Store store(opts.db_path);
  const std::int64_t problems = std::int64_t(exp.studies.at(0).problems.size());
  ASSERT_EQ(problems, 72 + 24 + 48 + 24 + 6 + 4 + 2);
  // Refused: causal, seq_q 333 > seq_k 17, no learned sinks (2 head dims x 3 dtypes), for both configs.
  EXPECT_EQ(count(store, "status = 'invalid_config'"), 2 * 6);
  EXPECT_EQ(count(store, "status = 'ok'"), 2 * (problems - 6));
  const auto bad = store.sql("SELECT status, reason FROM trials WHERE status NOT IN ('ok', 'invalid_config') LIMIT 5");
  for (const auto& row : bad.rows) ADD_FAILURE() << row[0] << ": " << row[1];
  EXPECT_EQ(count(store, "status = 'ok' AND (max_abs_err > tolerance OR nan_count > 0)"), 0);

  const auto& family = *exp.studies.at(0).kernel;
  for (const auto& p : exp.studies.at(0).problems) {
    const auto q = store.sql("SELECT t.device_bytes FROM trials t JOIN problems p ON p.id = t.problem_id "
                             "WHERE p.family = 'attn_eager' AND t.status = 'ok' AND p.key = '" + p.key() + "'");
    for (const auto& row : q.rows) EXPECT_EQ(std::stoll(row.at(0)), expected_device_bytes(family, p)) << p.key();
  }
}

// Without the mask (a template override that builds it with causal and window off) a causal problem's
// masked keys get probability: the reference must catch it.
TEST(GpuAttnEager, PlantedMaskBugIsCaughtByTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const fs::path tdir = dir.path / "templates";
  ASSERT_TRUE(plant_bug(tdir, "attn_eager.cuh", "const FtAttnMask<kCausal, kWindow> mask(",
                        "const FtAttnMask<false, false> mask("))
      << "attn_eager.cuh no longer builds its mask this way: update the test";
  const auto exp = experiment::parse_experiment(R"(
name: gpu_attn_eager_planted
measure: {mode: hot, warmup: 1, min_samples: 3, max_samples: 3, max_time_s: 0.1}
studies:
  - family: attn_eager
    problems: [{batch: 1, heads_q: 2, seq_q: 64, seq_k: 64, head_dim: 64, dtype: [f32, bf16], causal: 1}]
    space: {block_threads: 256}
)", "gpu_attn_eager_planted.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.templates = tdir;
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_EQ(s.by_status.count("incorrect"), 1u) << "the planted bug was not caught";
  EXPECT_EQ(s.by_status.at("incorrect"), 2);
}
