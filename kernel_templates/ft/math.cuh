// kernel_templates/ft/math.cuh: exponentials. The kernels work in the log2 domain: e^x = 2^(x log2 e), with
// the softmax scale and log2 e folded into one FMA per score.
#pragma once

// 2^x on the special-function unit (ex2.approx.ftz: 2 ulp, subnormal results flushed to zero).
__device__ __forceinline__ float ft_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x, approximate (ft_exp2) or as exp2f (the exact fp32 kernels, whose tolerance is the fp32 reference's).
template <bool kExact>
__device__ __forceinline__ float ft_exp2_as(float x) {
  if constexpr (kExact)
    return exp2f(x);
  else
    return ft_exp2(x);
}

/// e^x as 2^(x log2 e); callers pass x <= 0 (differences from a running max), so it never overflows.
__device__ __forceinline__ float exp_of(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
  return exp2f(x * kLog2e);
}
