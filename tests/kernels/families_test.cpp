// tests/kernels/families_test.cpp: every built-in family's descriptor is self-consistent on the CPU:
// each config of its default space either has a reason not to run or a launch that covers the problem;
// arguments match the kernel signature in its template; buffers are sized; the f64 and same-precision
// references agree within the pass rule's atol-scaled tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "harness/kernels/family.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace flashtune::kernels {
namespace {

using testing::default_space;

std::vector<core::Problem> problems(core::DType d) {
  std::vector<core::Problem> out;
  for (auto [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {1, 1}, {3, 17}, {5, 333}, {37, 1000}, {8, 4096}, {1000, 7}})
    out.push_back(core::Problem{{{"rows", rows}, {"cols", cols}}, d});
  return out;
}

// Parameter types of `<kernel>(...)` in the template text, in order ("const T*", "long long", ...).
std::vector<std::string> kernel_parameters(const std::string& source, const std::string& kernel) {
  const std::regex sig(kernel + R"(\s*\(([^)]*)\))");
  std::smatch m;
  if (!std::regex_search(source, m, sig)) return {};
  std::vector<std::string> params;
  std::stringstream ss(m[1].str());
  for (std::string p; std::getline(ss, p, ',');) params.push_back(p);
  return params;
}

std::string read_template(const std::string& file) {
  std::ifstream in(std::string(FT_SOURCE_DIR) + "/kernel_templates/" + file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The row-wise families (rows x cols problems); attention families have their own tests.
std::vector<const KernelFamily*> row_families() {
  std::vector<const KernelFamily*> out;
  for (const char* name : {"weighted_row_sum", "softmax"}) out.push_back(find_family(name));
  return out;
}

TEST(Registry, FindsEveryFamilyByNameAndNothingElse) {
  for (const auto& f : all_families()) EXPECT_EQ(find_family(f->name()), f.get());
  for (const auto* f : row_families()) EXPECT_NE(f, nullptr);
  EXPECT_NE(find_family("attn_fwd"), nullptr);
  EXPECT_NE(find_family("weighted_row_sum"), nullptr);
  EXPECT_NE(find_family("softmax"), nullptr);
  EXPECT_EQ(find_family("nope"), nullptr);
}

TEST(Families, DescribeThemselves) {
  for (const auto* f : row_families()) {
    EXPECT_EQ(f->stage(), "forward");
    EXPECT_FALSE(f->description().empty());
    EXPECT_EQ(f->problem_dims(), (std::vector<std::string>{"rows", "cols"}));
    EXPECT_EQ(f->dtypes().size(), 3u);
    EXPECT_FALSE(read_template(f->template_file()).empty()) << f->template_file();
  }
}

TEST(Families, CheckProblemRejectsMalformedProblems) {
  for (const auto* f : row_families()) {
    EXPECT_EQ(f->check_problem(core::Problem{{{"rows", 4}, {"cols", 5}}, core::DType::f16}), std::nullopt);
    EXPECT_NE(f->check_problem(core::Problem{{{"rows", 0}, {"cols", 5}}, core::DType::f32}), std::nullopt);
    EXPECT_NE(f->check_problem(core::Problem{{{"rows", 4}, {"cols", -1}}, core::DType::f32}), std::nullopt);
    EXPECT_NE(f->check_problem(core::Problem{{{"rows", 4}}, core::DType::f32}), std::nullopt);
  }
}

TEST(Families, ArgumentsMatchTheKernelSignature) {
  const core::Problem p{{{"rows", 3}, {"cols", 17}}, core::DType::f16};
  const core::Config c{{{"block_threads", 128}, {"rows_per_block", 1}, {"vec", 8}}};
  for (const auto* f : row_families()) {
    const std::string name_expr = f->specialize(c, p).name_expression;
    const std::string kernel = name_expr.substr(0, name_expr.find('<'));
    EXPECT_EQ(name_expr, kernel + "<ft_half, 128, 1, 8>");
    const auto params = kernel_parameters(read_template(f->template_file()), kernel);
    const auto args = f->arguments(c, p);
    const auto buffers = f->buffers(p);
    ASSERT_EQ(params.size(), args.size()) << f->name();
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (const auto* b = std::get_if<BufferArg>(&args[i])) {
        EXPECT_NE(params[i].find('*'), std::string::npos) << f->name() << " arg " << i << ": " << params[i];
        ASSERT_GE(b->index, 0);
        ASSERT_LT(b->index, int(buffers.size()));
        // const pointers are inputs, the others outputs.
        const bool is_const = params[i].find("const") != std::string::npos;
        EXPECT_EQ(is_const, buffers[b->index].role == BufferRole::input) << f->name() << " arg " << i;
      } else {
        EXPECT_TRUE(std::holds_alternative<std::int64_t>(args[i])) << f->name() << " arg " << i;
        EXPECT_NE(params[i].find("long long"), std::string::npos) << f->name() << " arg " << i << ": " << params[i];
      }
    }
  }
}

TEST(Families, EveryDefaultConfigIsRejectedOrCoversTheProblem) {
  const auto device = core::DeviceLimits::for_arch("sm_90a");
  for (const auto* f : row_families()) {
    const auto configs = default_space(*f);
    ASSERT_EQ(configs.size(), 5u * 4u * 4u) << f->name();
    for (core::DType d : f->dtypes()) {
      int runnable = 0;
      for (const auto& p : problems(d)) {
        ASSERT_EQ(f->check_problem(p), std::nullopt) << p.key();
        for (const auto& c : configs) {
          const std::string what = f->name() + " " + p.key() + " " + c.key();
          if (const auto why = f->can_run(c, p, device)) {
            EXPECT_FALSE(why->empty()) << what;
            // The only rejection in the default space: a load wider than 16 bytes.
            EXPECT_GT(c.at("vec") * std::int64_t(core::dtype_size(d)), 16) << what << ": " << *why;
            continue;
          }
          ++runnable;
          const auto s = f->launch_shape(c, p, device);
          EXPECT_LE(s.threads_per_block(), device.max_threads_per_block) << what;
          EXPECT_EQ(s.threads_per_block(), c.at("block_threads")) << what;
          EXPECT_GE(std::int64_t(s.grid[0]) * c.at("rows_per_block"), p.at("rows")) << what;
          EXPECT_LT(std::int64_t(s.grid[0] - 1) * c.at("rows_per_block"), p.at("rows")) << what << ": no idle block";
          EXPECT_EQ(s.grid[1] * s.grid[2], 1u) << what;
          const auto spec = f->specialize(c, p);
          EXPECT_NE(spec.name_expression.find(", " + std::to_string(c.at("block_threads")) + ", "),
                    std::string::npos) << what;
        }
      }
      EXPECT_GT(runnable, 0) << f->name() << " " << to_string(d);
    }
  }
}

TEST(Families, CanRunGivesReasons) {
  const auto device = core::DeviceLimits::for_arch("sm_80");
  const core::Problem p{{{"rows", 3}, {"cols", 17}}, core::DType::f32};
  auto config = [](std::int64_t threads, std::int64_t rows_per_block, std::int64_t vec) {
    return core::Config{{{"block_threads", threads}, {"rows_per_block", rows_per_block}, {"vec", vec}}};
  };
  for (const auto* f : row_families()) {
    EXPECT_EQ(f->can_run(config(256, 2, 4), p, device), std::nullopt);
    EXPECT_NE(f->can_run(config(2048, 1, 1), p, device), std::nullopt);  // over the device limit
    EXPECT_NE(f->can_run(config(100, 1, 1), p, device), std::nullopt);   // not whole warps
    EXPECT_NE(f->can_run(config(256, 3, 1), p, device), std::nullopt);   // 3 does not divide 256
    EXPECT_NE(f->can_run(config(96, 2, 1), p, device), std::nullopt);    // 48 threads per row
    EXPECT_NE(f->can_run(config(256, 1, 3), p, device), std::nullopt);   // vec not a power of two
    EXPECT_NE(f->can_run(config(256, 1, 8), p, device), std::nullopt);   // 32-byte fp32 load
  }
}

TEST(Families, BuffersAreSizedAndBytesCounted) {
  for (core::DType d : {core::DType::f32, core::DType::f16, core::DType::bf16}) {
    const core::Problem p{{{"rows", 37}, {"cols", 1000}}, d};
    const double e = double(core::dtype_size(d));
    const auto* wrs = find_family("weighted_row_sum");
    const auto b = wrs->buffers(p);
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[0].elements, 37 * 1000);
    EXPECT_EQ(b[1].elements, 1000);
    EXPECT_EQ(b[2].elements, 37);
    EXPECT_EQ(b[2].dtype, core::DType::f32);
    EXPECT_EQ(b[2].role, BufferRole::output);
    EXPECT_DOUBLE_EQ(wrs->bytes_moved(p), 37 * 1000 * e + 1000 * e + 37 * 4);
    EXPECT_DOUBLE_EQ(wrs->flops(p), 2.0 * 37 * 1000);

    const auto* sm = find_family("softmax");
    const auto s = sm->buffers(p);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].elements, 37 * 1000);
    EXPECT_EQ(s[1].elements, 37 * 1000);
    EXPECT_EQ(s[1].dtype, d);
    EXPECT_EQ(s[0].role, BufferRole::input);
    EXPECT_EQ(s[1].role, BufferRole::output);
    EXPECT_DOUBLE_EQ(sm->bytes_moved(p), 2 * 37 * 1000 * e);
    for (const auto* f : {wrs, sm}) EXPECT_GT(f->default_atol(p), 0.0);
  }
}

// The runner's data path on the CPU: fill inputs as it does, compute both references, and check the
// naive same-precision result passes against the oracle while a perturbed output fails.
TEST(Families, SamePrecisionReferencePassesAndPerturbedOutputFails) {
  for (const auto* f : row_families()) {
    for (core::DType d : f->dtypes()) {
      for (const auto& p : problems(d)) {
        const std::string what = f->name() + " " + p.key();
        std::vector<HostTensor> inputs, ref64, naive;
        std::uint64_t stream = 0;
        for (const auto& b : f->buffers(p)) {
          if (b.role == BufferRole::input) {
            inputs.push_back({b.dtype, reference::uniform(std::size_t(b.elements), b.lo, b.hi, 11 + ++stream)});
            reference::round_all(b.dtype, inputs.back().values);
          } else {
            ref64.push_back({b.dtype, std::vector<double>(std::size_t(b.elements))});
          }
        }
        naive = ref64;
        f->reference(p, inputs, ref64, RefPrecision::f64);
        f->reference(p, inputs, naive, RefPrecision::same);
        ASSERT_EQ(ref64.size(), 1u);
        const double atol = f->default_atol(p);
        const auto& out = naive[0].values;
        ASSERT_EQ(out.size(), ref64[0].values.size()) << what;
        for (double v : out) ASSERT_EQ(v, reference::round_to(naive[0].dtype, v)) << what << ": not rounded";
        const auto ok = reference::compare(out, ref64[0].values, out, atol);
        EXPECT_TRUE(ok.passed) << what;
        EXPECT_LE(ok.naive_err, 4 * atol + 1e-3 * (d == core::DType::f32 ? 0 : 1)) << what;
        if (f->name() == "softmax")
          for (std::int64_t i = 0; i < p.at("rows"); ++i) {
            double sum = 0;
            for (std::int64_t j = 0; j < p.at("cols"); ++j) sum += ref64[0].values[std::size_t(i * p.at("cols") + j)];
            ASSERT_NEAR(sum, 1.0, 1e-12) << what;
          }
        std::vector<double> bad = out;
        bad[bad.size() / 2] += 3 * ok.tolerance + 1e-3;
        EXPECT_FALSE(reference::compare(bad, ref64[0].values, out, atol).passed) << what;
      }
    }
  }
}

}  // namespace
}  // namespace flashtune::kernels

// Issue 23: the default spaces hold every value that has won a measured shape in docs/NOTES.md, so that a
// search over the defaults can find those winners (a study may still list fewer).
TEST(Families, DefaultSpacesHoldEveryValueThatWonInTheNotes) {
  struct Winner {
    const char* family;
    const char* tunable;
    std::int64_t value;
    const char* where;  // docs/NOTES.md
  };
  const Winner winners[] = {
      {"attn_fwd", "min_blocks", 2, "dense d128 / d64 seq 8k, bm128 bn64 8 warps (2026-11-23; session 16: 484.9 TFLOP/s)"},
      {"attn_fwd", "min_blocks", 5, "GPT-OSS forward, bm64 bn64 1 stage (sessions 13-14)"},
      {"attn_fwd", "min_blocks", 6, "GPT-OSS forward, bn32 pack 4 (sessions 15-17)"},
      {"attn_fwd", "pack_heads", 4, "GPT-OSS forward, bn32 pack 4 min_blocks 6 (sessions 15-17)"},
      {"attn_fwd", "epilogue", 2, "bf16 d128 seq 8192 forward, bm128 bn64 (session 18, multi_gpu_bench)"},
      {"attn_fwd", "block_n", 32, "GPT-OSS forward (session 15)"},
      {"attn_fwd", "num_stages", 1, "GPT-OSS forward (sessions 13-17)"},
      {"attn_bwd_dq", "num_warps", 1, "GPT-OSS dq, bm32 bn32 1 warp (session 13)"},
      {"attn_bwd_dq", "min_blocks", 12, "GPT-OSS dq, bm32 bn32 1 warp min_blocks 12 (session 13)"},
      {"attn_bwd_dq_delta", "num_warps", 1, "GPT-OSS dq_delta, 1 warp 2 stages (session 16)"},
      {"attn_bwd_dq_delta", "min_blocks", 7, "GPT-OSS dq_delta, min_blocks 7 (session 16)"},
      {"attn_bwd_dkdv", "min_blocks", 5, "GPT-OSS dkdv, mma.sync bm32 bn32 min_blocks 5 (sessions 16-17)"},
      {"attn_bwd_dkdv", "block_m", 32, "GPT-OSS dkdv (sessions 16-17)"},
      {"attn_bwd_dsink", "num_warps", 32, "GPT-OSS dsink, 32 warps (session 17)"},
  };
  for (const auto& w : winners) {
    const auto* f = flashtune::kernels::find_family(w.family);
    ASSERT_NE(f, nullptr) << w.family;
    const auto tunables = f->tunables();
    const auto t = std::find_if(tunables.begin(), tunables.end(), [&](const auto& s) { return s.name == w.tunable; });
    ASSERT_NE(t, tunables.end()) << w.family << " has no tunable " << w.tunable;
    EXPECT_NE(std::find(t->values.begin(), t->values.end(), w.value), t->values.end())
        << w.family << "." << w.tunable << " lacks " << w.value << ", the winner of " << w.where;
  }
}
