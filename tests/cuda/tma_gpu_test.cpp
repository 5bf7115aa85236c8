// tests/cuda/tma_gpu_test.cpp (label gpu; skips without an sm_90 GPU): the device library's TMA and mbarrier
// wrappers (kernel_templates/ft/tma.cuh) with a host-encoded tensor map (harness/cuda/tensor_map.hpp): a
// (rows x head_dim) tile of a (batch, heads, seq, head_dim) bf16 tensor lands in shared memory in exactly the
// 128-byte-swizzled slab layout the wgmma kernels read (FtSlabOffset, ft/layout.cuh), rows past seq read as zero;
// and the plain bulk copies: a vector loaded on an mbarrier, fp32 tiles of many blocks reduce-added into one
// global buffer (the backward's dQ accumulation).
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/module.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/cuda/tensor_map.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "tests/kernels/kernel_test_support.hpp"

using namespace flashtune;

namespace {

const char* kTmaKernels = R"(
#include "ft/copy.cuh"
#include "ft/tma.cuh"
#include "ft/types.cuh"
#include "ft/wgmma.cuh"

// One block: the (kRows x kHeadDim) tile of head (b, h) from row s0, one TMA copy per 64-column slab, completing
// on one mbarrier; then every thread reads it back through FtSlabOffset and writes it out densely.
template <int kRows, int kHeadDim>
__global__ void tma_tile_roundtrip(const __grid_constant__ FtTensorMap map, ft_bf16* out, int b, int h, int s0) {
  extern __shared__ unsigned char smem[];
  __shared__ unsigned long long bar_storage;
  const unsigned base = (ft_smem_u32(smem) + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  const unsigned bar = ft_smem_u32(&bar_storage);
  if (threadIdx.x == 0) {
    ft_mbarrier_init(bar, 1);
    ft_fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ft_mbarrier_arrive_expect_tx(bar, kRows * kHeadDim * 2);
    for (int s = 0; s < kHeadDim / 64; ++s) ft_tma_load_4d(base + s * kRows * 128, map, bar, 64 * s, s0, h, b);
  }
  ft_mbarrier_wait(bar, 0);
  const unsigned char* tile = smem + (base - ft_smem_u32(smem));
  for (int i = threadIdx.x; i < kRows * kHeadDim; i += blockDim.x) {
    const int r = i / kHeadDim, c = i % kHeadDim;
    out[i] = *reinterpret_cast<const ft_bf16*>(tile + FtSlabOffset<kRows>{}(r, c / 8) + (c % 8) * 2);
  }
}

// Block b: loads floats [b kFloats, (b + 1) kFloats) of src into shared memory by one bulk copy on an mbarrier,
// scales them by b + 1 into a second buffer, and reduce-adds that into acc[0, kFloats) by one bulk reduce.
template <int kFloats>
__global__ void bulk_load_reduce(const float* src, float* acc) {
  __shared__ __align__(128) float in[kFloats];
  __shared__ __align__(128) float out[kFloats];
  __shared__ unsigned long long bar_storage;
  const unsigned bar = ft_smem_u32(&bar_storage);
  if (threadIdx.x == 0) {
    ft_mbarrier_init(bar, 1);
    ft_fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ft_mbarrier_arrive_expect_tx(bar, kFloats * 4);
    ft_bulk_load(ft_smem_u32(in), src + blockIdx.x * kFloats, kFloats * 4, bar);
  }
  ft_mbarrier_wait(bar, 0);
  for (int i = threadIdx.x; i < kFloats; i += blockDim.x) out[i] = in[i] * float(blockIdx.x + 1);
  ft_fence_proxy_async();  // the generic-proxy writes of out, before the bulk reduce (async proxy) reads them
  __syncthreads();
  if (threadIdx.x == 0) {
    ft_bulk_reduce_add_f32(acc, ft_smem_u32(out), kFloats * 4);
    ft_bulk_commit();
    ft_bulk_wait<0>();
  }
}
)";

TEST(TmaGpu, TileLandsInTheWgmmaSlabLayoutAndRowsPastTheTensorReadZero) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const auto info = cuda::query_device(0);
  if (info.arch != "sm_90a") GTEST_SKIP() << "TMA needs sm_90, this GPU is " << info.arch;
  cuda::Context ctx(0);
  constexpr int kBatch = 2, kHeads = 3, kSeq = 100, kDim = 128, kRows = 64;
  std::vector<std::uint16_t> host(std::size_t(kBatch) * kHeads * kSeq * kDim);
  std::mt19937 rng(1234);
  for (auto& x : host) x = std::uint16_t(rng() & 0x7f7f);  // finite bf16 bit patterns, no zeros in most
  cuda::DeviceBuffer in(host.size() * 2), out(std::size_t(kRows) * kDim * 2);
  in.upload(host.data(), host.size() * 2);

  cuda::TensorMapSpec spec;
  spec.base = in.ptr();
  spec.dims = {kDim, kSeq, kHeads, kBatch};
  spec.strides = {std::uint64_t(kDim) * 2, std::uint64_t(kSeq) * kDim * 2, std::uint64_t(kHeads) * kSeq * kDim * 2};
  spec.box = {64, kRows, 1, 1};
  const CUtensorMap map = cuda::encode_tensor_map(spec);

  const auto compiled =
      flashtune::testing::compile_kernel(kTmaKernels, "tma_gpu_test_kernels.cu", "tma_tile_roundtrip<64, 128>", info.arch);
  ASSERT_TRUE(compiled.record.ok) << compiled.record.log;
  cuda::Module module(compiled.cubin);
  const CUfunction f = module.function(compiled.record.lowered_name);
  cuda::Stream stream;
  for (const int s0 : {0, 64}) {  // a whole tile; then rows 64..127 of which 36 exist
    const int b = 1, h = 2;
    out.fill_u32(0x7fc07fc0u, stream.get());  // bf16 NaN poison
    CUdeviceptr po = out.ptr();
    int bb = b, hh = h, ss = s0;
    void* args[] = {const_cast<CUtensorMap*>(&map), &po, &bb, &hh, &ss};
    cuda::launch(f, {1, 1, 1}, {128, 1, 1}, kRows * kDim * 2 + 1024, stream.get(), args);
    std::vector<std::uint16_t> got(std::size_t(kRows) * kDim);
    out.download(got.data(), got.size() * 2, stream.get());
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kDim; ++c) {
        const int row = s0 + r;
        const std::uint16_t want =
            row < kSeq ? host[((std::size_t(b) * kHeads + h) * kSeq + row) * kDim + c] : std::uint16_t(0);
        ASSERT_EQ(got[std::size_t(r) * kDim + c], want) << "s0 " << s0 << " row " << r << " col " << c;
      }
  }
}

// 96 blocks each bulk-load 1024 floats and reduce-add them, scaled by their block number + 1, into one fp32
// buffer. Small integers make every sum exact in fp32 whatever order the adds land in, so the check is equality.
TEST(TmaGpu, BulkLoadsAndReduceAddsOfManyBlocksSumExactly) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const auto info = cuda::query_device(0);
  if (info.arch != "sm_90a") GTEST_SKIP() << "bulk copies need sm_90, this GPU is " << info.arch;
  cuda::Context ctx(0);
  constexpr int kBlocks = 96, kFloats = 1024;
  std::vector<float> src(std::size_t(kBlocks) * kFloats), acc0(kFloats);
  std::mt19937 rng(77);
  for (auto& x : src) x = float(int(rng() % 17) - 8);
  for (auto& x : acc0) x = float(int(rng() % 5)) + 0.5f;
  std::vector<float> want(acc0);
  for (int b = 0; b < kBlocks; ++b)
    for (int i = 0; i < kFloats; ++i) want[std::size_t(i)] += src[std::size_t(b) * kFloats + i] * float(b + 1);
  cuda::DeviceBuffer d_src(src.size() * 4), d_acc(acc0.size() * 4);
  d_src.upload(src.data(), src.size() * 4);
  d_acc.upload(acc0.data(), acc0.size() * 4);
  const auto compiled =
      flashtune::testing::compile_kernel(kTmaKernels, "tma_gpu_test_kernels.cu", "bulk_load_reduce<1024>", info.arch);
  ASSERT_TRUE(compiled.record.ok) << compiled.record.log;
  cuda::Module module(compiled.cubin);
  const CUfunction f = module.function(compiled.record.lowered_name);
  cuda::Stream stream;
  CUdeviceptr ps = d_src.ptr(), pa = d_acc.ptr();
  void* args[] = {&ps, &pa};
  cuda::launch(f, {kBlocks, 1, 1}, {256, 1, 1}, 0, stream.get(), args);
  std::vector<float> got(kFloats);
  d_acc.download(got.data(), got.size() * 4, stream.get());
  for (int i = 0; i < kFloats; ++i) ASSERT_EQ(got[std::size_t(i)], want[std::size_t(i)]) << "element " << i;
}

TEST(TmaGpu, AMalformedTensorMapIsAnErrorNamingItsShape) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  cuda::Context ctx(0);
  cuda::DeviceBuffer in(1 << 16);
  cuda::TensorMapSpec spec;
  spec.base = in.ptr();
  spec.dims = {128, 100};
  spec.strides = {100};  // not a multiple of 16 bytes
  spec.box = {64, 64};
  try {
    cuda::encode_tensor_map(spec);
    ADD_FAILURE() << "an unaligned stride was accepted";
  } catch (const cuda::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("dims 128 x 100"), std::string::npos) << e.what();
  }
  spec.strides = {};
  EXPECT_THROW(cuda::encode_tensor_map(spec), core::Error);  // rank 2 with no stride
}

}  // namespace
