// tests/kernels/templates_compile_test.cpp (cpu, slow): every instantiation of the attn_naive softmax
// kernel (storage type x block_threads x causal x window x learned sinks), of the attn_eager op kernel
// (storage type x block_threads x causal x window) and every config of
// softmax_matmul's default space that can run (x dtype) compile with NVRTC for sm_80 and sm_90a without
// spills. Instantiations are compiled explicitly, a few NVRTC calls in parallel per arch.
#include <gtest/gtest.h>

#include "harness/kernels/family.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace flashtune::kernels {
namespace {

// A baseline's block_threads values, each dtype x value x flag combination of `kernel` (flags: `flag_count`
// bools after the thread count), explicitly instantiated and compiled for both archs without spills.
void expect_every_baseline_instantiation_compiles(const std::string& family, const std::string& kernel,
                                                  int flag_count, const std::string& params, int max_registers) {
  const KernelFamily* f = find_family(family);
  ASSERT_NE(f, nullptr);
  std::vector<std::int64_t> threads;
  for (const auto& t : f->tunables())
    if (t.name == "block_threads") threads = t.values;
  ASSERT_FALSE(threads.empty());
  std::vector<std::string> inst;
  for (const char* t : {"float", "ft_half", "ft_bf16"})
    for (std::int64_t n : threads)
      for (int flags = 0; flags < (1 << flag_count); ++flags) {
        std::string args = std::string(t) + ", " + std::to_string(n);
        for (int bit = 0; bit < flag_count; ++bit) args += (flags >> bit) & 1 ? ", true" : ", false";
        std::string p = params;
        for (std::size_t at; (at = p.find("T*")) != std::string::npos;) p.replace(at, 1, t);
        for (std::size_t at; (at = p.find("<T>")) != std::string::npos;) p.replace(at + 1, 1, t);
        inst.push_back("template __global__ void " + kernel + "<" + args + ">(" + p + ");");
      }
  const std::string source = testing::read_template(f->template_file());
  for (const std::string arch : {"sm_80", "sm_90a"}) {
    const auto r = testing::compile_instantiations_parallel(source, f->template_file(), inst, arch);
    ASSERT_TRUE(r.record.ok) << arch << "\n" << r.record.log;
    EXPECT_EQ(r.entries, int(inst.size())) << arch;
    EXPECT_EQ(r.spilling, 0) << arch << "\n" << r.record.log;
    EXPECT_LE(r.max_registers, max_registers) << arch;
  }
}

TEST(TemplatesCompile, EveryAttnNaiveInstantiationForSm80AndSm90a) {
  // a row-softmax kernel needs few registers
  expect_every_baseline_instantiation_compiles("attn_naive", "attn_naive_softmax_kernel", 3,
                                               "const __grid_constant__ FtAttnNaiveParams<T>", 64);
}

TEST(TemplatesCompile, EveryAttnEagerInstantiationForSm80AndSm90a) {
  expect_every_baseline_instantiation_compiles(
      "attn_eager", "attn_eager_kernel", 2, "const __grid_constant__ FtAttnEagerParams", 255);
}

TEST(TemplatesCompile, EverySoftmaxMatmulDefaultConfigForSm80AndSm90a) {
  const KernelFamily* f = find_family("softmax_matmul");
  ASSERT_NE(f, nullptr);
  const std::vector<core::Config> configs = testing::default_space(*f);
  const std::string source = testing::read_template(f->template_file());
  for (const std::string arch : {"sm_80", "sm_90a"}) {
    const auto limits = core::DeviceLimits::for_arch(arch);
    std::vector<std::string> inst;
    for (core::DType d : f->dtypes()) {
      const core::Problem p{{{"batch", 16}, {"d1", 2048}, {"d2", 8192}, {"d3", 512}, {"x_range", 8}}, d};
      for (const auto& c : configs) {
        if (f->can_run(c, p, limits)) continue;
        const std::string name = f->specialize(c, p).name_expression;  // softmax_matmul_kernel<T, ...>
        const std::string t = name.substr(name.find('<') + 1, name.find(',') - name.find('<') - 1);
        inst.push_back("template __global__ void " + name + "(const " + t + "*, const " + t + "*, " + t +
                       "*, int, int, int);");
      }
    }
    ASSERT_GE(inst.size(), 3u * 16u) << arch;
    const auto r = testing::compile_instantiations_parallel(source, f->template_file(), inst, arch);
    ASSERT_TRUE(r.record.ok) << arch << "\n" << r.record.log;
    EXPECT_EQ(r.entries, int(inst.size())) << arch;
    EXPECT_EQ(r.spilling, 0) << arch << "\n" << r.record.log;
  }
}

}  // namespace
}  // namespace flashtune::kernels
