// kernel_templates/weighted_row_sum.cuh: y[i] = sum_j x[i, j] * w[j] (GStar stage 2), a memory-bound
// row reduction. x (rows x cols, row stride stride_x elements) and w (cols) in T (float, ft_half,
// ft_bf16); y (rows) and the accumulation in fp32.
//
// Mapping: a block of kBlockThreads threads owns kRowsPerBlock rows at a time; each row gets a group of
// kThreadsPerRow = kBlockThreads / kRowsPerBlock consecutive threads (whole warps, or a power-of-two
// slice of one warp). A group strides over its row in kVec-wide (<= 16-byte) loads, reduces with warp
// shuffles, then across its warps through shared memory. Blocks stride over row groups, so any grid
// size covers any number of rows. Rows whose start or w is not kVec-aligned, and the last cols % kVec
// columns, take a scalar path: any cols and any stride work.
#include "ft/types.cuh"
#include "ft/warp.cuh"

template <typename T, int kBlockThreads, int kRowsPerBlock, int kVec>
__global__ void __launch_bounds__(kBlockThreads)
    weighted_row_sum_kernel(const T* __restrict__ x, const T* __restrict__ w, float* __restrict__ y, long long rows,
                            long long cols, long long stride_x) {
  constexpr int kThreadsPerRow = kBlockThreads / kRowsPerBlock;
  constexpr int kGroupWidth = kThreadsPerRow < 32 ? kThreadsPerRow : 32;  // lanes reduced by shuffles
  constexpr int kWarpsPerRow = kThreadsPerRow / kGroupWidth;
  // Loads in flight per thread; at 1024 threads (64 registers) 4 would spill.
  constexpr int kUnroll = kBlockThreads >= 1024 ? 2 : 4;
  static_assert(kBlockThreads % 32 == 0 && kBlockThreads <= 1024, "whole warps, at most 1024 threads");
  static_assert(kBlockThreads % kRowsPerBlock == 0, "rows split the block evenly");
  static_assert(kThreadsPerRow % 32 == 0 || 32 % kThreadsPerRow == 0,
                "a row owns whole warps or a power-of-two slice of one warp");
  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0 && sizeof(T) * kVec <= 16, "kVec: power of two, <= 16 bytes");

  __shared__ float warp_partials[kRowsPerBlock][kWarpsPerRow];

  const int local_row = threadIdx.x / kThreadsPerRow;
  const int lane_in_row = threadIdx.x % kThreadsPerRow;
  const bool w_aligned = is_aligned_for_vec<kVec>(w);

  for (long long row0 = static_cast<long long>(blockIdx.x) * kRowsPerBlock; row0 < rows;
       row0 += static_cast<long long>(gridDim.x) * kRowsPerBlock) {
    const long long row = row0 + local_row;
    float acc = 0.0f;
    if (row < rows) {
      const T* x_row = x + row * stride_x;
      long long col = 0;
      if (kVec > 1 && w_aligned && is_aligned_for_vec<kVec>(x_row)) {
        const long long vec_cols = cols - cols % kVec;
#pragma unroll kUnroll
        for (long long c = static_cast<long long>(lane_in_row) * kVec; c < vec_cols; c += kThreadsPerRow * kVec) {
          const FtVec<T, kVec> xv = load_vec<T, kVec>(x_row + c);
          const FtVec<T, kVec> wv = load_vec<T, kVec>(w + c);
#pragma unroll
          for (int k = 0; k < kVec; ++k) acc = fmaf(to_float(xv.v[k]), to_float(wv.v[k]), acc);
        }
        col = vec_cols;
      }
      for (long long c = col + lane_in_row; c < cols; c += kThreadsPerRow)
        acc = fmaf(to_float(x_row[c]), to_float(w[c]), acc);
    }

    acc = warp_sum<kGroupWidth>(acc);
    if (kWarpsPerRow == 1) {
      if (lane_in_row == 0 && row < rows) y[row] = acc;
    } else {
      const int warp_in_row = lane_in_row / 32;
      if (lane_in_row % 32 == 0) warp_partials[local_row][warp_in_row] = acc;
      __syncthreads();
      if (lane_in_row == 0 && row < rows) {
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < kWarpsPerRow; ++k) total += warp_partials[local_row][k];
        y[row] = total;
      }
      __syncthreads();  // warp_partials is reused by the next row group
    }
  }
}
