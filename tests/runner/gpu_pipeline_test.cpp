// tests/runner/gpu_pipeline_test.cpp (label gpu; skips without a GPU): the whole pipeline on a GPU. Every
// row kernel, dtype and a spread of configs match the double reference on ragged shapes; a planted bug
// (an unwritten row, left NaN by the poisoning) is caught and recorded as incorrect.
#include "harness/runner/runner.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "db/store.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/template_store.hpp"
#include "tests/runner/runner_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;

using namespace flashtune::testing;

// ------------------------------------------------------------------------------------------------
// GPU: every family and dtype against the double reference on ragged shapes, through the real pipeline.
TEST(GpuRunner, EveryKernelMatchesTheReferenceOnRaggedShapes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const auto exp = experiment::parse_experiment(R"(
name: gpu_ragged
measure: {warmup: 1, min_samples: 3, max_samples: 5, max_time_s: 0.2}
studies:
  - family: weighted_row_sum
    problems:
      - {rows: [1, 7, 333], cols: [1, 17, 333, 1000, 4099], dtype: [f32, f16, bf16]}
    space: {block_threads: [32, 256, 1024], rows_per_block: [1, 4], vec: [1, 4, 8]}
  - family: softmax
    problems:
      - {rows: [1, 7, 333], cols: [1, 17, 333, 1000, 4099], dtype: [f32, f16, bf16]}
    space: {block_threads: [32, 256, 1024], rows_per_block: [1, 4], vec: [1, 4, 8]}
)", "gpu_ragged.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  const auto s = runner::run_experiment(exp, opts);
  EXPECT_FALSE(s.compile_only);
  EXPECT_GT(s.copy_gbps, 100.0);
  db::Store store(opts.db_path);
  EXPECT_GT(count(store, "status = 'ok'"), 100);
  const auto bad = store.sql(
      "SELECT t.status, t.reason, t.family, p.key, c.key, t.seed FROM trials t JOIN problems p ON p.id = t.problem_id "
      "JOIN configs c ON c.id = t.config_id WHERE t.status NOT IN ('ok', 'invalid_config') LIMIT 5");
  for (const auto& row : bad.rows)
    ADD_FAILURE() << row[0] << ": " << row[1] << " (" << row[2] << " " << row[3] << " " << row[4] << ", seed " << row[5] << ")";
  EXPECT_EQ(count(store, "status = 'ok' AND (max_abs_err > tolerance OR nan_count > 0)"), 0);
}

TEST(GpuRunner, PlantedBugIsCaughtByTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const fs::path tdir = dir.path / "templates";
  // The planted bug: a plain kernel with the real signature that never writes the last row.
  const std::string planted = R"(#include "ft/types.cuh"
template <typename T, int kBlockThreads, int kRowsPerBlock, int kVec>
__global__ void weighted_row_sum_kernel(const T* x, const T* w, float* y, long long rows, long long cols,
                                        long long stride_x) {
  const long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (row >= rows - 1) return;
  float acc = 0.0f;
  for (long long j = 0; j < cols; ++j) acc += to_float(x[row * stride_x + j]) * to_float(w[j]);
  y[row] = acc;
}
)";
  jit::write_templates(tdir, [&](const std::string& name, std::string text) {
    return name == "weighted_row_sum.cuh" ? planted : text;
  });
  const auto exp = experiment::parse_experiment(R"(
name: gpu_planted
measure: {warmup: 1, min_samples: 3, max_samples: 5, max_time_s: 0.2}
studies:
  - family: weighted_row_sum
    problems: [{rows: 100, cols: 300, dtype: f32}]
    space: {block_threads: 128, rows_per_block: 1, vec: 1}
)", "gpu_planted.yaml");
  auto opts = quiet_options(dir.path / "g.sqlite", false);
  opts.templates = tdir;
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_EQ(s.by_status.count("incorrect"), 1u) << "the planted bug was not caught";
  db::Store store(opts.db_path);
  EXPECT_GT(std::stoll(store.sql("SELECT nan_count FROM trials").rows.at(0).at(0)), 0);
}
