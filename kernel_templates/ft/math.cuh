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

// 2^x without the special-function unit, on the FMA and integer pipes (FA4's trick: the softmax's exponentials
// are the SFU's bottleneck at head_dim 64, where the GEMMs are short; moving a share of them here balances the two).
// x = j + f with j = round(x) (the 1.5 * 2^23 shifter: j lands in the shifter's low mantissa bits), f in
// [-0.5, 0.5], 2^f by its degree-4 Taylor polynomial (relative error < 6e-5, a tenth of fp16's rounding), j added to
// the exponent field. For x <= 0 (differences from a running max); x below -125 gives about 2^-125, not 0, so
// callers pass no -inf (masked scores): the softmax uses it on interior tiles only.
__device__ __forceinline__ float ft_exp2_poly(float x) {
  x = fmaxf(x, -125.f);
  const float t = x + 12582912.f;
  const float f = x - (t - 12582912.f);
  float p = fmaf(f, 0.0096181291f, 0.0555041087f);  // (ln 2)^k / k!, k = 4, 3
  p = fmaf(p, f, 0.2402265070f);
  p = fmaf(p, f, 0.6931471806f);
  p = fmaf(p, f, 1.f);
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(t) << 23));
}

/// e^x as 2^(x log2 e); callers pass x <= 0 (differences from a running max), so it never overflows.
__device__ __forceinline__ float exp_of(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
  return exp2f(x * kLog2e);
}
