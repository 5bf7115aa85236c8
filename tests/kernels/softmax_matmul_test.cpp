// tests/kernels/softmax_matmul_test.cpp (cpu): the softmax_matmul family's descriptor on the CPU: its
// constraint expressions agree with can_run, launches cover the problem, arguments match the template
// (compiling it: tests/kernels/templates_compile_test.cpp), and the sampled reference equals the full one
// on the rows it checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "harness/kernels/family.hpp"
#include "reference/attention.hpp"
#include "reference/compare.hpp"
#include "tests/kernels/kernel_test_support.hpp"
#include "tuner/constraint.hpp"

namespace flashtune::kernels {
namespace {

const KernelFamily& family() {
  const KernelFamily* f = find_family("softmax_matmul");
  if (!f) throw core::Error("softmax_matmul is not registered");
  return *f;
}

core::Problem problem(core::DType d, std::int64_t b, std::int64_t d1, std::int64_t d2, std::int64_t d3) {
  core::Problem p{{{"batch", b}, {"d1", d1}, {"d2", d2}, {"d3", d3}}, d};
  for (const auto& o : family().optional_problem_dims()) p.dims.emplace(o.name, o.fallback);
  return p;
}

core::Config config(std::int64_t bm, std::int64_t bn, std::int64_t bk, std::int64_t warps) {
  return core::Config{{{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"num_warps", warps}}};
}

std::vector<core::Config> space(const std::vector<std::int64_t>& bm, const std::vector<std::int64_t>& bn,
                                const std::vector<std::int64_t>& bk, const std::vector<std::int64_t>& warps) {
  std::vector<core::Config> out;
  for (auto m : bm)
    for (auto n : bn)
      for (auto k : bk)
        for (auto w : warps) out.push_back(config(m, n, k, w));
  return out;
}

std::vector<core::Config> default_space() {
  std::map<std::string, std::vector<std::int64_t>> t;
  for (const auto& s : family().tunables()) t[s.name] = s.values;
  return space(t.at("block_m"), t.at("block_n"), t.at("block_k"), t.at("num_warps"));
}

// The space of experiments/course_softmax_matmul.yaml.
std::vector<core::Config> course_space() { return space({16, 32, 64, 128}, {64, 128, 256}, {16, 32, 64}, {2, 4, 8}); }

tuner::ConstraintSet family_constraints() {
  std::vector<std::string> vars{"dtype_bytes"};
  for (const auto& t : family().tunables()) vars.push_back(t.name);
  for (const auto& d : family().problem_dims()) vars.push_back(d);
  for (const auto& d : family().optional_problem_dims()) vars.push_back(d.name);
  return tuner::ConstraintSet(family().constraints(), vars);
}

TEST(SoftmaxMatmul, DescribesItself) {
  const auto& f = family();
  EXPECT_EQ(f.stage(), "forward");
  EXPECT_FALSE(f.launches_itself());
  EXPECT_EQ(f.problem_dims(), (std::vector<std::string>{"batch", "d1", "d2", "d3"}));
  EXPECT_EQ(f.dtypes().size(), 3u);
  EXPECT_FALSE(testing::read_template(f.template_file()).empty());
  EXPECT_EQ(f.check_problem(problem(core::DType::f32, 16, 2048, 8192, 512)), std::nullopt);
  EXPECT_NE(f.check_problem(problem(core::DType::f32, 0, 2, 2, 2)), std::nullopt);
  EXPECT_NE(f.check_problem(problem(core::DType::f32, 70000, 2, 2, 2)), std::nullopt);  // grid.z
  core::Problem missing{{{"batch", 1}, {"d1", 2}, {"d2", 3}}, core::DType::f32};
  EXPECT_NE(f.check_problem(missing), std::nullopt);
}

// Linear memory: X, V and out only (no d1 x d2 intermediate, no workspace), each moved once.
TEST(SoftmaxMatmul, BuffersAreLinearAndCounted) {
  for (core::DType d : {core::DType::f32, core::DType::f16, core::DType::bf16}) {
    const auto p = problem(d, 3, 37, 100, 20);
    const auto b = family().buffers(p);
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[0].elements, 3 * 37 * 100);
    EXPECT_EQ(b[1].elements, 3 * 100 * 20);
    EXPECT_EQ(b[2].elements, 3 * 37 * 20);
    EXPECT_EQ(b[2].role, BufferRole::output);
    EXPECT_EQ(b[0].lo, -8.0);
    for (const auto& x : b) EXPECT_EQ(x.dtype, d);
    const double e = double(core::dtype_size(d));
    EXPECT_DOUBLE_EQ(family().bytes_moved(p), e * (3 * 37 * 100 + 3 * 100 * 20 + 3 * 37 * 20));
    EXPECT_DOUBLE_EQ(family().flops(p), 2.0 * 3 * 37 * 100 * 20);
  }
}

TEST(SoftmaxMatmul, ConstraintsAgreeWithCanRun) {
  const auto cs = family_constraints();
  const auto d = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem(core::DType::f32, 16, 2048, 1024, 512);
  int allowed = 0, total = 0;
  for (const auto& c : space({4, 8, 16, 32, 48, 64, 128, 256}, {4, 16, 32, 64, 96, 128, 256, 512}, {8, 16, 32, 64},
                             {1, 2, 4, 8, 16})) {
    ++total;
    const auto why = family().can_run(c, p, d);
    const bool constraints_hold = cs.allows(c, p);
    if (!why) {
      ++allowed;
      EXPECT_TRUE(constraints_hold) << c.key() << ": runnable but pruned by " << *cs.violated(c, p);
    } else if (constraints_hold) {
      // Only the device limits are left to can_run.
      EXPECT_TRUE(why->find("shared memory") != std::string::npos || why->find("threads >") != std::string::npos)
          << c.key() << ": " << *why;
    }
  }
  EXPECT_GT(allowed, 40);
  EXPECT_LT(allowed, total / 2);
  // The default space: what the constraints keep can run.
  int runnable = 0;
  for (const auto& c : default_space()) {
    if (!cs.allows(c, p)) continue;
    EXPECT_EQ(family().can_run(c, p, d), std::nullopt) << c.key();
    ++runnable;
  }
  EXPECT_GE(runnable, 12);
}

TEST(SoftmaxMatmul, LaunchCoversTheProblemWithoutIdleBlocks) {
  const auto d = core::DeviceLimits::for_arch("sm_80");
  for (const auto& p : {problem(core::DType::f16, 3, 1, 1, 1), problem(core::DType::f32, 2, 37, 100, 130),
                        problem(core::DType::bf16, 16, 2048, 64, 512)}) {
    int runnable = 0;
    for (const auto& c : course_space()) {
      if (family().can_run(c, p, d)) continue;
      ++runnable;
      const auto s = family().launch_shape(c, p, d);
      const std::string what = p.key() + " " + c.key();
      EXPECT_EQ(s.threads_per_block(), 32 * c.at("num_warps")) << what;
      EXPECT_GE(std::int64_t(s.grid[0]) * c.at("block_n"), p.at("d3")) << what;
      EXPECT_LT(std::int64_t(s.grid[0] - 1) * c.at("block_n"), p.at("d3")) << what;
      EXPECT_GE(std::int64_t(s.grid[1]) * c.at("block_m"), p.at("d1")) << what;
      EXPECT_LT(std::int64_t(s.grid[1] - 1) * c.at("block_m"), p.at("d1")) << what;
      EXPECT_EQ(std::int64_t(s.grid[2]), p.at("batch")) << what;
      EXPECT_LE(std::int64_t(s.dynamic_smem_bytes), d.max_shared_per_block_optin) << what;
      EXPECT_GT(std::int64_t(s.dynamic_smem_bytes), 4 * c.at("block_k") * (c.at("block_m") + c.at("block_n"))) << what;
    }
    EXPECT_GT(runnable, 20) << p.key();
  }
}

TEST(SoftmaxMatmul, ArgumentsMatchTheKernelSignature) {
  const auto p = problem(core::DType::f16, 2, 5, 7, 9);
  const auto c = config(64, 128, 32, 4);
  const auto spec = family().specialize(c, p);
  EXPECT_EQ(spec.name_expression, "softmax_matmul_kernel<ft_half, 64, 128, 32, 4>");
  const auto params = testing::kernel_parameters(testing::read_template(family().template_file()),
                                                 "softmax_matmul_kernel");
  const auto args = family().arguments(c, p);
  const auto buffers = family().buffers(p);
  ASSERT_EQ(params.size(), args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string what = "arg " + std::to_string(i) + ": " + params[i];
    if (const auto* b = std::get_if<BufferArg>(&args[i])) {
      ASSERT_LT(b->index, int(buffers.size()));
      EXPECT_NE(params[i].find('*'), std::string::npos) << what;
      EXPECT_EQ(params[i].find("const") != std::string::npos, buffers[std::size_t(b->index)].role == BufferRole::input)
          << what;
    } else {
      ASSERT_TRUE(std::holds_alternative<std::int32_t>(args[i])) << what;
      EXPECT_NE(params[i].find("int "), std::string::npos) << what;
    }
  }
}

TEST(SoftmaxMatmul, SamePrecisionReferencePassesAndPerturbedOutputFails) {
  for (core::DType d : {core::DType::f32, core::DType::f16, core::DType::bf16})
    for (const auto& p : {problem(d, 1, 1, 1, 1), problem(d, 2, 5, 17, 3), problem(d, 3, 37, 1000, 33)}) {
      std::vector<HostTensor> in, ref64, naive;
      testing::make_tensors(family(), p, 99, in, ref64);
      naive = ref64;
      family().reference(p, in, ref64, RefPrecision::f64);
      family().reference(p, in, naive, RefPrecision::same);
      EXPECT_TRUE(ref64[0].checked.empty()) << p.key() << ": small problems are checked whole";
      const double atol = family().default_atol(p);
      const auto& out = naive[0].values;
      const auto ok = reference::compare(out, ref64[0].values, out, atol);
      EXPECT_TRUE(ok.passed) << p.key();
      for (double x : ref64[0].values) EXPECT_LE(std::fabs(x), 1.0) << p.key() << ": a convex combination of V";
      std::vector<double> bad = out;
      bad[bad.size() / 2] += 3 * ok.tolerance + 1e-3;
      EXPECT_FALSE(reference::compare(bad, ref64[0].values, out, atol).passed) << p.key();
    }
  // d2 = 1: softmax of one logit is 1, so out is V's row.
  const auto p = problem(core::DType::f32, 2, 3, 1, 4);
  std::vector<HostTensor> in, out;
  testing::make_tensors(family(), p, 5, in, out);
  family().reference(p, in, out, RefPrecision::f64);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(out[0].values[std::size_t((b * 3 + i) * 4 + j)], in[1].values[std::size_t(b * 4 + j)]);
}

// Above the reference budget only sampled rows are computed: whole rows, the same in every batch,
// including the first and last four, and equal to the full computation there.
TEST(SoftmaxMatmul, SampledReferenceEqualsTheFullOneOnCheckedRows) {
  const std::int64_t b = 3, d1 = 1500, d2 = 1000, d3 = 100;  // 4.5e8 multiply-adds > the 4e8 budget
  const auto p = problem(core::DType::bf16, b, d1, d2, d3);
  std::vector<HostTensor> in, sampled;
  testing::make_tensors(family(), p, 7, in, sampled);
  for (auto precision : {RefPrecision::f64, RefPrecision::same}) {
    family().reference(p, in, sampled, precision);
    const auto& out = sampled[0];
    ASSERT_EQ(out.checked.size(), out.values.size());
    std::vector<double> full;
    if (precision == RefPrecision::f64)
      reference::softmax_matmul<double>(b, d1, d2, d3, in[0].values, in[1].values, full);
    else
      reference::softmax_matmul<float>(b, d1, d2, d3, in[0].values, in[1].values, full);
    if (precision == RefPrecision::same) reference::round_all(core::DType::bf16, full);
    std::set<std::int64_t> rows;
    std::int64_t unchecked = 0;
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t i = 0; i < d1; ++i) {
        const std::size_t at = std::size_t((bi * d1 + i) * d3);
        const bool c = out.checked[at];
        for (std::int64_t j = 0; j < d3; ++j) ASSERT_EQ(bool(out.checked[at + std::size_t(j)]), c) << "whole rows";
        if (!c) {
          ++unchecked;
          continue;
        }
        if (bi == 0) rows.insert(i);
        else ASSERT_TRUE(rows.count(i)) << "row " << i << " checked in batch " << bi << " but not in batch 0";
        for (std::int64_t j = 0; j < d3; ++j) {
          // The same sums; Eigen may block a smaller product differently (last bits only).
          const double tol = precision == RefPrecision::f64 ? 1e-12 : std::ldexp(1.0, -8);
          ASSERT_NEAR(out.values[at + std::size_t(j)], full[at + std::size_t(j)], tol) << bi << " " << i << " " << j;
        }
      }
    EXPECT_GE(rows.size(), 16u);
    EXPECT_GT(unchecked, 0);
    for (std::int64_t i : {std::int64_t(0), std::int64_t(3), d1 - 4, d1 - 1}) EXPECT_TRUE(rows.count(i)) << i;
  }
}

}  // namespace
}  // namespace flashtune::kernels
