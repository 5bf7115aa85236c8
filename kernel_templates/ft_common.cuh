// kernel_templates/ft_common.cuh: device helpers shared by flashtune's kernel templates: the element
// types (float, ft_half, ft_bf16) with to_float / from_float, vector loads and stores, warp reductions,
// and the online-softmax (max, sum) merge. Compiled by NVRTC with no system headers: define, don't include.
#pragma once

// 16-bit element types as raw IEEE fp16 / bf16 bits. Host code uploads exactly these bits.
struct ft_half {
  unsigned short bits;
};
struct ft_bf16 {
  unsigned short bits;
};

// ---------------------------------------------------------------------------------------------
// Conversions. Loads widen exactly; stores round to nearest even.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(ft_half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
__device__ __forceinline__ float to_float(ft_bf16 v) { return __uint_as_float(static_cast<unsigned>(v.bits) << 16); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ ft_half from_float<ft_half>(float v) {
  ft_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}
template <>
__device__ __forceinline__ ft_bf16 from_float<ft_bf16>(float v) {
  ft_bf16 b;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(v));
#else
  // Round to nearest even on the upper 16 bits; NaN stays a (quiet) NaN.
  const unsigned u = __float_as_uint(v);
  b.bits = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<unsigned short>((u >> 16) | 0x40u)
                                           : static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  return b;
}

// ---------------------------------------------------------------------------------------------
// kVec elements loaded or stored as one access of kVec * sizeof(T) bytes (16 at most). The pointer
// must be aligned to that size; callers check alignment and fall back to kVec == 1 otherwise.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) FtVec {
  T v[kVec];
};

template <typename T, int kVec>
__device__ __forceinline__ FtVec<T, kVec> load_vec(const T* p) {
  static_assert(sizeof(T) * kVec <= 16, "one access is at most 16 bytes");
  return *reinterpret_cast<const FtVec<T, kVec>*>(p);
}
template <typename T, int kVec>
__device__ __forceinline__ void store_vec(T* p, const FtVec<T, kVec>& v) {
  *reinterpret_cast<FtVec<T, kVec>*>(p) = v;
}

template <int kVec, typename T>
__device__ __forceinline__ bool is_aligned_for_vec(const T* p) {
  return (reinterpret_cast<unsigned long long>(p) % (sizeof(T) * kVec)) == 0;
}

// ---------------------------------------------------------------------------------------------
// Named constants are enumerators or function-local: NVRTC emits namespace-scope constexpr variables
// as device globals.
enum : unsigned { kFullMask = 0xffffffffu };  ///< all 32 lanes of a warp take part

// Reductions over groups of kWidth consecutive lanes of a warp (kWidth a power of two <= 32).

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

// ---------------------------------------------------------------------------------------------
// Online softmax statistics: running max m and running sum s of exp(x - m). Merging two partial
// states rescales each sum to the common max; an empty state is (-inf, 0).
/// e^x as 2^(x log2 e); callers pass x <= 0 (differences from a running max), so it never overflows.
__device__ __forceinline__ float exp_of(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
  return exp2f(x * kLog2e);
}

struct OnlineStats {
  float max;
  float sum;
};
__device__ __forceinline__ OnlineStats online_empty() { return {-__int_as_float(0x7f800000), 0.0f}; }
__device__ __forceinline__ OnlineStats online_merge(OnlineStats a, OnlineStats b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -__int_as_float(0x7f800000)) return a;  // both empty
  return {m, a.sum * exp_of(a.max - m) + b.sum * exp_of(b.max - m)};
}
template <int kWidth = 32>
__device__ __forceinline__ OnlineStats warp_online_merge(OnlineStats s) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    OnlineStats other{__shfl_xor_sync(kFullMask, s.max, offset), __shfl_xor_sync(kFullMask, s.sum, offset)};
    s = online_merge(s, other);
  }
  return s;
}
