// kernel_templates/ft/warp.cuh: reductions over groups of kWidth consecutive lanes of a warp (kWidth a power
// of two <= 32; every lane of the warp takes part).
#pragma once

#include "ft/types.cuh"

template <int kWidth = 32>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
template <int kWidth = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}
