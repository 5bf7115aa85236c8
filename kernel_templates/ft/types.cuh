// kernel_templates/ft/types.cuh: the device library's element types and vector accesses: float, ft_half and
// ft_bf16 with to_float / from_float, FtVec loads and stores, and compile-time helpers (FtBool, FtSelect).
// Compiled by NVRTC with no system headers (define, don't include); also compiled as host C++ by the CPU
// emulation of the fp32 kernels (tests/kernels/attn_fwd_f32_emulation.hpp), which supplies the CUDA names.
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

// A compile-time bool passed as a value, so that one generic lambda is instantiated for both.
template <bool kValue>
struct FtBool {
  static constexpr bool value = kValue;
};

// std::conditional (NVRTC sees no system headers).
template <bool kFirst, class A, class B>
struct FtSelect {
  using type = A;
};
template <class A, class B>
struct FtSelect<false, A, B> {
  using type = B;
};
