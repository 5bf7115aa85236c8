// tests/kernels/softmax_matmul_host_test.cpp (cpu): kernel_templates/softmax_matmul.cuh compiled as host
// C++ (tests/kernels/host_cuda_shim.hpp) and run a thread per CUDA thread, on ragged shapes, for configs
// that take every path of its thread mapping (4x4, 8x4 and 8x8 thread tiles; rows split over several
// threads for the statistics, one thread per row, several rows per thread), in fp32 and bf16: the
// kernel's own indexing checked against the reference before any GPU runs it.
#include <gtest/gtest.h>

#include "harness/kernels/family.hpp"
#include "reference/compare.hpp"
#include "tests/kernels/kernel_test_support.hpp"

#define __shared__
#include "tests/kernels/host_cuda_shim.hpp"

// The template's dynamic shared memory (`extern __shared__ float4 smem_raw[]`): one block at a time.
alignas(16) float4 smem_raw[128 * 1024 / sizeof(float4)];

#include "kernel_templates/softmax_matmul.cuh"

namespace flashtune::kernels {
namespace {

template <typename T>
std::vector<T> device_values(core::DType d, const std::vector<double>& v) {
  const auto bytes = reference::pack(d, v);
  std::vector<T> out(v.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <typename T, int kBlockM, int kBlockN, int kBlockK, int kNumWarps>
void check(const core::Problem& p) {
  const KernelFamily& f = *find_family("softmax_matmul");
  const core::Config c{{{"block_m", kBlockM}, {"block_n", kBlockN}, {"block_k", kBlockK}, {"num_warps", kNumWarps}}};
  const std::string what = p.key() + " " + c.key();
  const auto limits = core::DeviceLimits::for_arch("sm_90a");
  ASSERT_EQ(f.can_run(c, p, limits), std::nullopt) << what;
  const auto shape = f.launch_shape(c, p, limits);
  ASSERT_LE(shape.dynamic_smem_bytes, sizeof smem_raw) << what;

  std::vector<HostTensor> in, ref64, naive;
  testing::make_tensors(f, p, 17, in, ref64);
  naive = ref64;
  f.reference(p, in, ref64, RefPrecision::f64);
  f.reference(p, in, naive, RefPrecision::same);

  const auto x = device_values<T>(p.dtype, in[0].values);
  const auto v = device_values<T>(p.dtype, in[1].values);
  std::vector<T> out(ref64[0].values.size());
  const int d1 = int(p.at("d1")), d2 = int(p.at("d2")), d3 = int(p.at("d3"));
  ft_host::launch(dim3{shape.grid[0], shape.grid[1], shape.grid[2]}, unsigned(shape.threads_per_block()), [&] {
    softmax_matmul_kernel<T, kBlockM, kBlockN, kBlockK, kNumWarps>(x.data(), v.data(), out.data(), d1, d2, d3);
  });
  const auto got = reference::unpack(p.dtype, out.data(), out.size());
  const auto r = reference::compare(got, ref64[0].values, naive[0].values, f.default_atol(p));
  EXPECT_TRUE(r.passed) << what << ": max error " << r.max_abs_err << " > " << r.tolerance << ", " << r.nan_count
                        << " NaN";
}

core::Problem problem(core::DType d, std::int64_t b, std::int64_t d1, std::int64_t d2, std::int64_t d3,
                      std::int64_t x_range = 8) {
  return core::Problem{{{"batch", b}, {"d1", d1}, {"d2", d2}, {"d3", d3}, {"x_range", x_range}}, d};
}

template <typename T>
void check_all_mappings(core::DType d) {
  for (const auto& p : {problem(d, 2, 37, 100, 70), problem(d, 1, 5, 1, 3), problem(d, 1, 20, 300, 9, 40)}) {
    check<T, 32, 64, 16, 4>(p);    // 4x4 tiles; 4 threads per row for the statistics
    check<T, 128, 64, 16, 4>(p);   // 8x8 tiles; one thread per row
    check<T, 128, 32, 16, 2>(p);   // 8x8 tiles; two rows per thread
    check<T, 32, 128, 16, 8>(p);   // 4x4 tiles, 32 threads per tile row; 8 threads per row
    check<T, 64, 64, 32, 4>(p);    // 8x4 tiles
    check<T, 16, 256, 64, 2>(p);   // 8x8 tiles, block_n past d3
  }
}

TEST(SoftmaxMatmulOnHost, MatchesTheReferenceOnEveryThreadMappingInFp32) { check_all_mappings<float>(core::DType::f32); }

TEST(SoftmaxMatmulOnHost, MatchesTheReferenceOnEveryThreadMappingInBf16) {
  check_all_mappings<ft_bf16>(core::DType::bf16);
}

// ft/math.cuh's polynomial 2^x (the TMA forward's exponentials on the FMA pipe) against std::exp2 over the range
// the softmax feeds it (differences from a running max, x <= 0): relative error below 6e-5 everywhere, exact at
// integers, about 2^-125 (never 0, never negative) below -125.
TEST(DeviceMath, PolynomialExp2MatchesExp2) {
  double worst = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -125.0f * float(i) / 2000000.0f;
    const double want = std::exp2(double(x));
    const double rel = std::abs(double(ft_exp2_poly(x)) - want) / want;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 6e-5);
  EXPECT_GT(worst, 1e-7);  // it is an approximation: a test of std::exp2 against itself would pass anything
  for (int j = -125; j <= 0; ++j) EXPECT_EQ(ft_exp2_poly(float(j)), std::ldexp(1.0f, j)) << j;
  for (float x : {-126.0f, -200.0f, -1e30f}) {
    EXPECT_GT(ft_exp2_poly(x), 0.0f) << x;
    EXPECT_LE(ft_exp2_poly(x), std::ldexp(1.0f, -124)) << x;
  }
}

}  // namespace
}  // namespace flashtune::kernels
