// kernel_templates/softmax.cuh: row-wise softmax y = exp(x - max) / sum exp(x - max) by the online
// algorithm: ONE pass over x keeps a running max m and running sum s (per kVec-wide tile:
// m_new = max(m, max(tile)), s = s * e^(m - m_new) + sum e^(x - m_new)); partial (m, s) states of the
// threads of a row are merged the same way; a second pass writes y = e^(x - m) / s. x and y (rows x
// cols, row stride `stride` elements, must not overlap) in T (float, ft_half, ft_bf16); math in fp32.
//
// Mapping as in weighted_row_sum.cuh: kRowsPerBlock rows per block, kBlockThreads / kRowsPerBlock
// threads per row, kVec-wide loads, blocks stride over row groups. Unaligned rows and the last
// cols % kVec columns take a scalar path: any cols and any stride work. Large logits cannot overflow:
// every exponent is <= 0.
#include "ft/softmax.cuh"
#include "ft/types.cuh"
#include "ft/warp.cuh"

template <typename T, int kBlockThreads, int kRowsPerBlock, int kVec>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_kernel(const T* __restrict__ x, T* __restrict__ y, long long rows, long long cols, long long stride) {
  constexpr int kThreadsPerRow = kBlockThreads / kRowsPerBlock;
  constexpr int kGroupWidth = kThreadsPerRow < 32 ? kThreadsPerRow : 32;
  constexpr int kWarpsPerRow = kThreadsPerRow / kGroupWidth;
  static_assert(kBlockThreads % 32 == 0 && kBlockThreads <= 1024, "whole warps, at most 1024 threads");
  static_assert(kBlockThreads % kRowsPerBlock == 0, "rows split the block evenly");
  static_assert(kThreadsPerRow % 32 == 0 || 32 % kThreadsPerRow == 0,
                "a row owns whole warps or a power-of-two slice of one warp");
  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0 && sizeof(T) * kVec <= 16, "kVec: power of two, <= 16 bytes");

  __shared__ OnlineStats warp_stats[kRowsPerBlock][kWarpsPerRow];

  const int local_row = threadIdx.x / kThreadsPerRow;
  const int lane_in_row = threadIdx.x % kThreadsPerRow;

  for (long long row0 = static_cast<long long>(blockIdx.x) * kRowsPerBlock; row0 < rows;
       row0 += static_cast<long long>(gridDim.x) * kRowsPerBlock) {
    const long long row = row0 + local_row;
    const T* x_row = x + (row < rows ? row : 0) * stride;
    T* y_row = y + (row < rows ? row : 0) * stride;
    const bool vectorized = kVec > 1 && is_aligned_for_vec<kVec>(x_row) && is_aligned_for_vec<kVec>(y_row);
    const long long vec_cols = vectorized ? cols - cols % kVec : 0;

    // Pass 1: this thread's online statistics over its tiles of the row.
    OnlineStats stats = online_empty();
    if (row < rows) {
#pragma unroll 2
      for (long long c = static_cast<long long>(lane_in_row) * kVec; c < vec_cols; c += kThreadsPerRow * kVec) {
        const FtVec<T, kVec> xv = load_vec<T, kVec>(x_row + c);
        float tile_max = to_float(xv.v[0]);
#pragma unroll
        for (int k = 1; k < kVec; ++k) tile_max = fmaxf(tile_max, to_float(xv.v[k]));
        const float new_max = fmaxf(stats.max, tile_max);
        float tile_sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kVec; ++k) tile_sum += exp_of(to_float(xv.v[k]) - new_max);
        stats.sum = stats.sum * exp_of(stats.max - new_max) + tile_sum;
        stats.max = new_max;
      }
      for (long long c = vec_cols + lane_in_row; c < cols; c += kThreadsPerRow)
        stats = online_merge(stats, OnlineStats{to_float(x_row[c]), 1.0f});
    }

    // Merge the row's threads: shuffles within a warp, shared memory across warps.
    stats = warp_online_merge<kGroupWidth>(stats);
    if (kWarpsPerRow > 1) {
      const int warp_in_row = lane_in_row / 32;
      if (lane_in_row % 32 == 0) warp_stats[local_row][warp_in_row] = stats;
      __syncthreads();
      stats = warp_stats[local_row][0];
#pragma unroll
      for (int k = 1; k < kWarpsPerRow; ++k) stats = online_merge(stats, warp_stats[local_row][k]);
      __syncthreads();  // warp_stats is reused by the next row group
    }

    // Pass 2: normalize.
    if (row < rows) {
      const float row_max = stats.max;
      const float inv_sum = 1.0f / stats.sum;
#pragma unroll 2
      for (long long c = static_cast<long long>(lane_in_row) * kVec; c < vec_cols; c += kThreadsPerRow * kVec) {
        const FtVec<T, kVec> xv = load_vec<T, kVec>(x_row + c);
        FtVec<T, kVec> yv;
#pragma unroll
        for (int k = 0; k < kVec; ++k) yv.v[k] = from_float<T>(exp_of(to_float(xv.v[k]) - row_max) * inv_sum);
        store_vec<T, kVec>(y_row + c, yv);
      }
      for (long long c = vec_cols + lane_in_row; c < cols; c += kThreadsPerRow)
        y_row[c] = from_float<T>(exp_of(to_float(x_row[c]) - row_max) * inv_sum);
    }
  }
}
