// kernel_templates/ft/copy.cuh: global -> shared copies (cp.async, sm_80+) and the tile loaders built on them:
// a tile of rows with a row stride (ft_load_tile_at), rows gathered one by one (ft_load_rows_at), the LSE / D
// rows of the backward (ft_load_lse_delta), each into either layout of ft/layout.cuh.
#pragma once

#include "ft/layout.cuh"

__device__ __forceinline__ unsigned ft_smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
// 16 bytes global -> shared, bypassing L1; src_bytes = 0 fills the destination with zeros.
__device__ __forceinline__ void ft_cp_async16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// 4 bytes global -> shared; src_bytes = 0 fills the destination with zeros.
__device__ __forceinline__ void ft_cp_async4(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void ft_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
/// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void ft_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
}

// An opaque copy of x: values derived from it are recomputed where they are used instead of being hoisted
// out of the enclosing loop into registers (an empty volatile asm is never moved or merged).
__device__ __forceinline__ unsigned ft_opaque(unsigned x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ long long ft_opaque(long long x) {
  asm volatile("" : "+l"(x));
  return x;
}

// How a tile loader issues its copies. Both run a fixed trip count from 0 with unsigned indices, unrolled
// into straight-line copies (a loop from threadIdx.x compiled to a remainder loop with branches and signed
// divisions per 16-byte copy: 15-37% of the wgmma forward, docs/NOTES.md session 15).
//   kHoisted: the compiler may keep every copy's address in registers across the caller's tile loop (the
//             forwards, which have registers to spare);
//   kLean:    the thread index and the row stride pass through ft_opaque on every call, so each copy's
//             address is recomputed there (a few integer ops) instead of held: the register-tight backward
//             kernels, where the hoisted addresses spilled.
//   kStepped: as kLean, but each thread keeps one row pointer and steps it (no per-copy row / chunk
//             arithmetic, no address select): 7-14% faster dQ on GPT-OSS (H100), but it holds 2-3 more
//             registers across the copies, which spill in kernels near the register cap (FtLoadFor).
// kRolled is the loop from threadIdx.x, kept where even kLean spills (the fused wgmma backward).
enum class FtLoad { kHoisted, kLean, kStepped, kRolled };

// The backward mma.sync kernels' loader: kStepped where the register cap leaves room for it (head dim
// <= 64 and at least 160 registers per thread under __launch_bounds__(threads, min_blocks)), else kLean.
template <int kHeadDim, int kThreads, int kMinBlocks>
struct FtLoadFor {
  static constexpr FtLoad value =
      kHeadDim <= 64 && 65536 / (kThreads * kMinBlocks) >= 160 ? FtLoad::kStepped : FtLoad::kLean;
};

// Issues the cp.async copies of rows [0, kRows) of a tile whose first row is `src`, chunk c (16 bytes) of row r
// landing at dst + offset(r, c) (a layout of ft/layout.cuh); rows at or past `valid` are zero-filled (in
// kStepped their address, past the tile, is never read; elsewhere clamped to `src`).
template <int kRows, int kHeadDim, int kThreads, typename T, FtLoad kMode, typename Offset>
__device__ __forceinline__ void ft_load_tile_at(unsigned dst, const T* src, long long row_stride, int valid,
                                                Offset offset) {
  enum : int { kChunks = kHeadDim / 8, kTotal = kRows * kChunks, kIters = (kTotal + kThreads - 1) / kThreads };
  if constexpr (kMode == FtLoad::kRolled) {
#pragma unroll
    for (int idx = threadIdx.x; idx < kTotal; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks;
      const bool in = r < valid;
      const T* p = in ? src + r * row_stride + c * 8 : src;
      ft_cp_async16(dst + offset(r, c), p, in ? 16 : 0);
    }
    return;
  }
  const unsigned tid = kMode != FtLoad::kHoisted ? ft_opaque(unsigned(threadIdx.x)) : unsigned(threadIdx.x);
  const long long stride = kMode != FtLoad::kHoisted ? ft_opaque(row_stride) : row_stride;
  if constexpr (kMode == FtLoad::kStepped && kThreads % kChunks == 0) {
    // Each thread keeps its chunk c and steps kRowStep rows per copy: no per-copy row / chunk arithmetic and
    // no address select.
    enum : int { kRowStep = kThreads / kChunks };
    const unsigned r0 = tid / kChunks, c = tid % kChunks;
    const T* p0 = src + r0 * stride + c * 8;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const unsigned r = r0 + unsigned(it * kRowStep);
      if (kTotal % kThreads != 0 && r >= unsigned(kRows)) break;
      ft_cp_async16(dst + offset(r, c), p0 + (it * kRowStep) * stride, int(r) < valid ? 16 : 0);
    }
    return;
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const unsigned idx = unsigned(it * kThreads) + tid;
    if (kTotal % kThreads != 0 && idx >= unsigned(kTotal)) break;
    const unsigned r = idx / kChunks, c = idx % kChunks;
    const bool in = int(r) < valid;
    const T* p = in ? src + r * stride + c * 8 : src;
    ft_cp_async16(dst + offset(r, c), p, in ? 16 : 0);
  }
}
// The mma.sync layout (FtSwizzle) and the wgmma layout (128-byte slabs).
template <int kRows, int kHeadDim, int kThreads, typename T, FtLoad kMode>
__device__ __forceinline__ void ft_load_tile(unsigned dst, const T* src, long long row_stride, int valid) {
  ft_load_tile_at<kRows, kHeadDim, kThreads, T, kMode>(dst, src, row_stride, valid, FtSwizzleOffset<kHeadDim>{});
}
template <int kRows, int kHeadDim, int kThreads, typename T, FtLoad kMode>
__device__ __forceinline__ void ft_load_tile_sw128(unsigned dst, const T* src, long long row_stride, int valid) {
  ft_load_tile_at<kRows, kHeadDim, kThreads, T, kMode>(dst, src, row_stride, valid, FtSlabOffset<kRows>{});
}

// The same for rows gathered one by one: row r of the tile is row_src(r), or zero-filled when that is nullptr
// (the rows of a head-packed tile come from different heads). row_src(0) must be a real row. A fixed trip
// count from 0 with unsigned indices, as ft_load_tile_at's kHoisted.
template <int kRows, int kHeadDim, int kThreads, typename T, typename RowSrc, typename Offset>
__device__ __forceinline__ void ft_load_rows_at(unsigned dst, RowSrc row_src, Offset offset) {
  enum : int { kChunks = kHeadDim / 8, kTotal = kRows * kChunks, kIters = (kTotal + kThreads - 1) / kThreads };
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const unsigned idx = unsigned(it * kThreads) + threadIdx.x;
    if (kTotal % kThreads != 0 && idx >= unsigned(kTotal)) break;
    const unsigned r = idx / kChunks, c = idx % kChunks;
    const T* row = row_src(int(r));
    ft_cp_async16(dst + offset(r, c), row ? row + c * 8 : row_src(0), row ? 16 : 0);
  }
}
template <int kRows, int kHeadDim, int kThreads, typename T, typename RowSrc>
__device__ __forceinline__ void ft_load_rows(unsigned dst, RowSrc row_src) {
  ft_load_rows_at<kRows, kHeadDim, kThreads, T>(dst, row_src, FtSwizzleOffset<kHeadDim>{});
}
template <int kRows, int kHeadDim, int kThreads, typename T, typename RowSrc>
__device__ __forceinline__ void ft_load_rows_sw128(unsigned dst, RowSrc row_src) {
  ft_load_rows_at<kRows, kHeadDim, kThreads, T>(dst, row_src, FtSlabOffset<kRows>{});
}

// LSE, then D, of a tile's kBlockM query rows (from `lse`, `delta`) as 2 kBlockM floats at dst; rows at or
// past `valid` are zero-filled. A fixed trip count from 0 with unsigned indices, as ft_load_tile's kLean.
template <int kBlockM, int kThreads>
__device__ __forceinline__ void ft_load_lse_delta(unsigned dst, const float* lse, const float* delta, int valid) {
  const unsigned tid = ft_opaque(unsigned(threadIdx.x));
#pragma unroll
  for (int it = 0; it < (2 * kBlockM + kThreads - 1) / kThreads; ++it) {
    const unsigned r = unsigned(it * kThreads) + tid;
    if ((2 * kBlockM) % kThreads != 0 && r >= unsigned(2 * kBlockM)) break;
    const unsigned rr = r % kBlockM;
    const bool in = int(rr) < valid;
    ft_cp_async4(dst + r * 4, (r < kBlockM ? lse : delta) + (in ? rr : 0), in ? 4 : 0);
  }
}
