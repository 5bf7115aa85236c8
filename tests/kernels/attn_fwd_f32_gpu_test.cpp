// tests/kernels/attn_fwd_f32_gpu_test.cpp (label gpu; skips without a GPU): the fp32 attn_fwd kernels on a
// GPU through the real runner pipeline (can_run -> NVRTC -> launch -> pass rule against the double
// reference -> measure -> SQLite). All 16 variants (FFMA / TF32 x causal x window x learned sinks) at
// head dims 16..128 on ragged shapes (seq 1, 17, 333, 1000, seq_q != seq_k, GQA / MQA, sink tokens,
// learned sinks with bias 20, rows that see no key, logits from qk_range 8), then a spread of tile
// configs (16 / 32 rows per warp, 1..3 stages, block_n 16..128), then the course's shape (batch 8, one
// head of dim 64, seq 4096) whose TFLOP/s are printed. The kernels are compiled in parallel into a CUBIN
// cache first, which the runner then hits: it compiles one config at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "db/store.hpp"
#include "harness/cuda/device.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/family.hpp"
#include "tests/runner/runner_test_support.hpp"

using namespace flashtune;
using namespace flashtune::testing;

namespace {

struct Cfg {
  int block_m, block_n, num_warps, num_stages;
};

// One study: explicit problems (YAML flow maps without lists) and explicit configs.
struct StudySpec {
  std::vector<std::string> problems;
  std::vector<Cfg> configs;
};

std::string config_constraint(const std::vector<Cfg>& cs) {
  std::string e;
  for (const auto& c : cs)
    e += std::string(e.empty() ? "" : " || ") + "(block_m == " + std::to_string(c.block_m) +
         " && block_n == " + std::to_string(c.block_n) + " && num_warps == " + std::to_string(c.num_warps) +
         " && num_stages == " + std::to_string(c.num_stages) + ")";
  return e;
}

std::string experiment_yaml(const std::string& name, const std::vector<StudySpec>& studies, const std::string& measure) {
  std::ostringstream y;
  y << "name: " << name << "\nmeasure: " << measure << "\nstudies:\n";
  for (const auto& s : studies) {
    y << "  - family: attn_fwd\n    problems:\n";
    for (const auto& p : s.problems) y << "      - " << p << "\n";
    y << "    space: {block_m: [16, 32, 64, 128], block_n: [16, 32, 64, 128], num_warps: [1, 2, 4, 8], "
         "num_stages: [1, 2, 3]}\n";
    y << "    constraints: [\"" << config_constraint(s.configs) << "\"]\n";
  }
  return y.str();
}

// Compiles every (problem, config) the runner will run, in parallel, into `cache`: the same requests the
// runner makes (template text, headers, arch, name expression), so its compiles are cache hits.
// Returns the number of runnable (problem, config) pairs.
std::int64_t prewarm(const experiment::Experiment& exp, const std::vector<StudySpec>& specs,
                     const fs::path& cache, const core::DeviceLimits& limits) {
  const jit::Compiler compiler(cache);
  const std::string source = jit::load_template("attn_fwd_f32.cuh", std::nullopt);  // fp32 problems only
  const auto headers = jit::template_headers(std::nullopt);
  std::set<std::string> names;
  std::int64_t runnable = 0;
  for (std::size_t s = 0; s < exp.studies.size(); ++s) {
    const auto& study = exp.studies[s];
    for (const auto& p : study.problems)
      for (const auto& c : specs[s].configs) {
        const core::Config config{{{"block_m", c.block_m},
                                   {"block_n", c.block_n},
                                   {"num_warps", c.num_warps},
                                   {"num_stages", c.num_stages}}};
        if (study.kernel->can_run(config, p, limits)) continue;
        ++runnable;
        names.insert(study.kernel->specialize(config, p).name_expression);
      }
  }
  const std::vector<std::string> todo(names.begin(), names.end());
  std::atomic<std::size_t> next{0};
  std::atomic<int> failed{0};
  auto worker = [&] {
    for (std::size_t i; (i = next++) < todo.size();) {
      jit::CompileRequest req;
      req.source = source;
      req.source_name = "attn_fwd_f32.cuh";
      req.name_expression = todo[i];
      req.arch = limits.arch;
      req.headers = headers;
      if (!compiler.compile(req).record.ok) ++failed;
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  std::printf("  prewarmed %zu kernels (%d failed to compile)\n", todo.size(), failed.load());
  return runnable;
}

// Runs the studies and checks: every runnable pair is a trial with status ok (within tolerance, no NaN);
// everything else is invalid_config. Prints what failed, with its errors.
void run_and_check(const std::string& name, const std::vector<StudySpec>& specs, const std::string& measure,
                   bool print_best) {
  TempDir dir;
  const auto exp = experiment::parse_experiment(experiment_yaml(name, specs, measure), name + ".yaml");
  const auto info = cuda::query_device(0);
  const std::int64_t runnable = prewarm(exp, specs, dir.path / "cache", info.limits);
  auto opts = quiet_options(dir.path / "t.sqlite", false);
  opts.cache_dir = dir.path / "cache";
  const auto s = runner::run_experiment(exp, opts);
  ASSERT_FALSE(s.compile_only);
  ASSERT_FALSE(s.poisoned) << "a kernel hit an illegal address";
  db::Store store(opts.db_path);
  const auto bad = store.sql(
      "SELECT t.status, p.key, c.key, t.reason, t.max_abs_err, t.tolerance, t.nan_count FROM trials t "
      "JOIN problems p ON p.id = t.problem_id JOIN configs c ON c.id = t.config_id "
      "WHERE t.status <> 'invalid_config' AND (t.status <> 'ok' OR t.max_abs_err > t.tolerance OR t.nan_count > 0) "
      "LIMIT 40");
  for (const auto& r : bad.rows)
    ADD_FAILURE() << r[0] << " " << r[1] << " " << r[2] << ": " << r[3] << " max_abs_err " << r[4] << " tolerance "
                  << r[5] << " nan " << r[6];
  EXPECT_EQ(count(store, "status = 'ok'"), runnable) << "every config can_run admits must run and pass";
  const auto misses = store.sql("SELECT count(*), coalesce(sum(compile_ms), 0) FROM compiles WHERE compile_ms > 0");
  std::printf("  %lld trials ok, %lld invalid_config; runner compiles not from the cache: %s (%s ms)\n",
              static_cast<long long>(count(store, "status = 'ok'")),
              static_cast<long long>(count(store, "status = 'invalid_config'")), misses.rows.at(0).at(0).c_str(),
              misses.rows.at(0).at(1).c_str());
  if (print_best) {
    const auto rows = store.sql(
        "SELECT p.key, c.key, t.median_ms, t.tflops FROM trials t JOIN problems p ON p.id = t.problem_id "
        "JOIN configs c ON c.id = t.config_id WHERE t.status = 'ok' ORDER BY p.key, t.tflops DESC");
    for (const auto& r : rows.rows)
      std::printf("  %-70s %-50s %8.3f ms %7.2f TFLOP/s\n", r[0].c_str(), r[1].c_str(), std::stod(r[2]),
                  std::stod(r[3]));
  }
}

const char* kQuickMeasure = "{warmup: 1, min_samples: 2, max_samples: 3, max_time_s: 0.05}";

// The problems of the variant sweep: every mask switch combination, each on shapes that stress it.
std::vector<std::string> variant_problems() {
  std::vector<std::string> shapes = {
      // plain: MQA, 17 queries over 1000 keys, large logits; and single-element problems
      "batch: 2, heads_q: 4, heads_kv: 1, seq_q: 17, seq_k: 1000, qk_range: 8",
      "batch: 1, heads_q: 1, seq_q: 1, seq_k: 1",
      "batch: 1, heads_q: 2, seq_q: 1, seq_k: 1000",
      // causal: more queries than keys (the first 667 rows see nothing: O = 0, LSE = -inf), GQA
      "batch: 1, heads_q: 4, heads_kv: 2, seq_q: 1000, seq_k: 333, causal: 1",
      "batch: 1, heads_q: 2, seq_q: 333, seq_k: 1000, causal: 1, qk_range: 8",
      // sliding window with sink tokens, causal and not
      "batch: 1, heads_q: 2, heads_kv: 1, seq_q: 1000, seq_k: 1000, causal: 1, window: 100, sink_tokens: 4",
      "batch: 1, heads_q: 2, seq_q: 333, seq_k: 1000, window: 64, sink_tokens: 17",
      // learned sinks: dominating (bias 20), rows with no key (O = 0, LSE = sink), with a window, all switches
      "batch: 2, heads_q: 2, heads_kv: 1, seq_q: 17, seq_k: 333, learned_sinks: 1, sink_bias: 20",
      "batch: 1, heads_q: 2, seq_q: 17, seq_k: 1, causal: 1, learned_sinks: 1",
      "batch: 1, heads_q: 2, seq_q: 333, seq_k: 333, window: 50, learned_sinks: 1, sink_bias: 20",
      "batch: 1, heads_q: 2, heads_kv: 1, seq_q: 1000, seq_k: 1000, causal: 1, window: 33, sink_tokens: 1, "
      "learned_sinks: 1, qk_range: 8",
  };
  std::vector<std::string> out;
  for (int hd : {16, 32, 64, 128})
    for (int tf32 : {0, 1})
      for (const auto& s : shapes)
        out.push_back("{" + s + ", head_dim: " + std::to_string(hd) + ", tf32: " + std::to_string(tf32) +
                      ", dtype: f32}");
  return out;
}

TEST(AttnFwdF32Gpu, EveryVariantAndHeadDimPassesOnRaggedShapes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  run_and_check("attn_f32_variants", {{variant_problems(), {{64, 32, 4, 2}}}}, kQuickMeasure, false);
}

TEST(AttnFwdF32Gpu, TileConfigsPassOnRaggedShapes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::vector<std::string> problems;
  for (int hd : {16, 32, 64, 128})
    for (int tf32 : {0, 1}) {
      const std::string tail = ", head_dim: " + std::to_string(hd) + ", tf32: " + std::to_string(tf32) + ", dtype: f32}";
      problems.push_back("{batch: 2, heads_q: 4, heads_kv: 1, seq_q: 333, seq_k: 1000, qk_range: 8" + tail);
      problems.push_back("{batch: 1, heads_q: 2, seq_q: 1000, seq_k: 1000, causal: 1, window: 100, sink_tokens: 3, "
                         "learned_sinks: 1, sink_bias: 20" + tail);
    }
  // 16 and 32 rows per warp, one to three stages, block_n 16 to 128, 1 to 8 warps.
  const std::vector<Cfg> configs = {{16, 16, 1, 1},  {32, 16, 1, 3}, {32, 128, 2, 1},
                                    {64, 64, 2, 2},  {128, 64, 8, 2}, {128, 32, 4, 3}};
  run_and_check("attn_f32_configs", {{problems, configs}}, kQuickMeasure, false);
}

TEST(AttnFwdF32Gpu, HeadDim256WhereItFits) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::vector<std::string> problems;
  for (int tf32 : {0, 1})
    problems.push_back("{batch: 1, heads_q: 2, seq_q: 333, seq_k: 1000, causal: 1, learned_sinks: 1, head_dim: 256, "
                       "tf32: " + std::to_string(tf32) + ", dtype: f32}");
  run_and_check("attn_f32_d256", {{problems, {{16, 16, 1, 1}, {16, 16, 1, 2}, {32, 16, 2, 2}}}}, kQuickMeasure, false);
}

// The course's benchmark shape (fp32, batch 8, one head of dim 64), non-causal: prints TFLOP/s per config.
TEST(AttnFwdF32Gpu, CourseShapeSpeed) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::vector<std::string> problems;
  for (int tf32 : {0, 1})
    problems.push_back("{batch: 8, heads_q: 1, seq_q: 4096, head_dim: 64, tf32: " + std::to_string(tf32) +
                       ", dtype: f32}");
  const std::vector<Cfg> configs = {{16, 64, 1, 2}, {32, 64, 1, 2}, {32, 32, 2, 2}, {64, 32, 4, 2},
                                    {64, 64, 4, 2}, {64, 64, 2, 2}, {128, 32, 8, 2}, {128, 64, 4, 2}};
  run_and_check("attn_f32_course", {{problems, configs}},
                "{warmup: 2, min_samples: 5, max_samples: 20, max_time_s: 0.2}", true);
}

}  // namespace
