// kernel_templates/ft/wgmma.cuh: Hopper warpgroup MMA (wgmma, PTX ISA 8.0+, sm_90a): fences, shared-memory
// matrix descriptors, and FtWgmma<T, N>, one template for every m64nNk16 shape with fp32 accumulators.
#pragma once

#include "ft/types.cuh"

__device__ __forceinline__ void ft_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void ft_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void ft_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Shared memory written by ordinary stores (cp.async included) and read next by wgmma (the async proxy).
__device__ __forceinline__ void ft_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Keeps the compiler from moving reads or writes of wgmma accumulators across the fence / wait.
template <int kN>
__device__ __forceinline__ void ft_fence_regs(float* r) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// x, which must be equal on every lane of the warp (a warp or warpgroup index), as lane 0's: the compiler then
// knows it is warp-uniform and keeps what is derived from it (shared-memory addresses, wgmma descriptors) in uniform
// registers, instead of per-thread registers moved over by R2UR before each wgmma (CUTLASS's
// canonical_warp_group_idx does the same).
__device__ __forceinline__ int ft_warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// x through an opaque move: a chain's base address taken so is computed where the chain is issued, every item,
// instead of being hoisted out of the item loop per step into registers that stay live across it (session 35: the
// S^T / dP^T chains' 16 hoisted K / V descriptors of the TMA backward sat in per-thread registers).
__device__ __forceinline__ unsigned ft_opaque_u32(unsigned x) {
  unsigned y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte offsets.
// K-major operands: stride = 1024 (8 rows of 128 bytes), leading unused (1). N-major: leading = bytes
// between 64-column slabs, stride = 1024 (8 rows along K).
__device__ __forceinline__ unsigned long long ft_wgmma_desc(unsigned addr, unsigned leading, unsigned stride) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((leading & 0x3FFFF) >> 4) << 16) |
         ((unsigned long long)((stride & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
// The descriptor of the address `bytes` (a multiple of 16) past desc's: the start address field (bits 0-13, address /
// 16) plus bytes / 16, with no carry out of the field while both addresses lie in shared memory (below 256 KiB).
// A 32-bit add on the low word (the high word, stride and swizzle, is shared): a product's chain builds its base
// descriptors once and steps them by constants, one uniform add per wgmma, instead of masking and shifting every
// step's address (session 35: ~5-9 instructions a wgmma, some through R2UR from per-thread registers).
__device__ __forceinline__ unsigned long long ft_wgmma_desc_step(unsigned long long desc, int bytes) {
  const unsigned lo = unsigned(desc) + unsigned(bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// ---------------------------------------------------------------------------------------------
// D (64 x kN, fp32 accumulators, kN / 2 per thread) (+)= A (64 x 16) * B (16 x kN), kN in {16, 32, 64, 80,
// 128, 176, 192}. ss: A from shared memory (K-major; kTransA = 1: M-major); rs: A from registers (the mma.sync m16n8k16 A
// layout, warp w of the warpgroup holding rows 16w..16w+15). kTransB = 1: B is N-major in shared memory.
// accumulate = 0 overwrites D. The accumulator element (nt, r, e) sits at row (warp % 4) * 16 + g + 8 r,
// column 8 nt + 2 t4 + e, index 4 nt + 2 r + e: the mma.sync accumulator layout (ft/mma.cuh) per 8 columns.
//
// The asm operands: the kN / 2 accumulators are %0 .. %(kN/2 - 1) (FT_WGMMA_Dn lists them, FT_WGMMA_Rn names
// them in the instruction), then the inputs. A shape is one line of FtWgmma below.
#define FT_WGMMA_D4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FT_WGMMA_D8(d, i) FT_WGMMA_D4(d, i), FT_WGMMA_D4(d, i + 4)
#define FT_WGMMA_D16(d, i) FT_WGMMA_D8(d, i), FT_WGMMA_D8(d, i + 8)
#define FT_WGMMA_D32(d, i) FT_WGMMA_D16(d, i), FT_WGMMA_D16(d, i + 16)
#define FT_WGMMA_D40(d, i) FT_WGMMA_D32(d, i), FT_WGMMA_D8(d, i + 32)
#define FT_WGMMA_D64(d, i) FT_WGMMA_D32(d, i), FT_WGMMA_D32(d, i + 32)
#define FT_WGMMA_D88(d, i) FT_WGMMA_D64(d, i), FT_WGMMA_D16(d, i + 64), FT_WGMMA_D8(d, i + 80)
#define FT_WGMMA_D96(d, i) FT_WGMMA_D64(d, i), FT_WGMMA_D32(d, i + 64)
#define FT_WGMMA_R8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FT_WGMMA_R16 FT_WGMMA_R8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define FT_WGMMA_R32 FT_WGMMA_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FT_WGMMA_R40 FT_WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FT_WGMMA_R64 FT_WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FT_WGMMA_R88 FT_WGMMA_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define FT_WGMMA_R96 FT_WGMMA_R88 ", %88, %89, %90, %91, %92, %93, %94, %95"

// One instruction. ss: inputs a_desc, b_desc, accumulate, kTransB, kTransA at %n .. %(n+4) (n = kN / 2
// accumulators); rs: a[0..3], b_desc, accumulate, kTransB at %n .. %(n+6). TYPE: "f16" or "bf16".
#define FT_WGMMA_SS(N, TYPE, n, a, b, p, tb, ta)                                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #p ", 0;\n"                                                \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" FT_WGMMA_R##n "}, %" #a     \
               ", %" #b ", p, 1, 1, %" #ta ", %" #tb ";\n}\n"                                                  \
               : FT_WGMMA_D##n(d, 0)                                                                           \
               : "l"(a_desc), "l"(b_desc), "r"(accumulate), "n"(kTransB), "n"(kTransA))
#define FT_WGMMA_RS(N, TYPE, n, a0, a1, a2, a3, b, p, tb)                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #p ", 0;\n"                                                \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" FT_WGMMA_R##n "}, {%" #a0  \
               ", %" #a1 ", %" #a2 ", %" #a3 "}, %" #b ", p, 1, 1, %" #tb ";\n}\n"                             \
               : FT_WGMMA_D##n(d, 0)                                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate), "n"(kTransB))
// Both element types of one shape (T is ft_half or ft_bf16).
#define FT_WGMMA_SS_OF(N, n, a, b, p, tb, ta) \
  if constexpr (FtIsHalf<T>::value)           \
    FT_WGMMA_SS(N, "f16", n, a, b, p, tb, ta); \
  else                                        \
    FT_WGMMA_SS(N, "bf16", n, a, b, p, tb, ta)
#define FT_WGMMA_RS_OF(N, n, a0, a1, a2, a3, b, p, tb) \
  if constexpr (FtIsHalf<T>::value)                    \
    FT_WGMMA_RS(N, "f16", n, a0, a1, a2, a3, b, p, tb); \
  else                                                 \
    FT_WGMMA_RS(N, "bf16", n, a0, a1, a2, a3, b, p, tb)

template <typename T>
struct FtIsHalf {
  static constexpr bool value = false;
};
template <>
struct FtIsHalf<ft_half> {
  static constexpr bool value = true;
};

template <typename T, int kN>
struct FtWgmma {
  static_assert(kN == 16 || kN == 32 || kN == 64 || kN == 80 || kN == 128 || kN == 176 || kN == 192,
                "m64nNk16 with N = 16, 32, 64, 80, 128, 176 or 192");
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a_desc, unsigned long long b_desc,
                                            int accumulate) {
    if constexpr (kN == 16) { FT_WGMMA_SS_OF(16, 8, 8, 9, 10, 11, 12); }
    else if constexpr (kN == 32) { FT_WGMMA_SS_OF(32, 16, 16, 17, 18, 19, 20); }
    else if constexpr (kN == 64) { FT_WGMMA_SS_OF(64, 32, 32, 33, 34, 35, 36); }
    else if constexpr (kN == 80) { FT_WGMMA_SS_OF(80, 40, 40, 41, 42, 43, 44); }
    else if constexpr (kN == 128) { FT_WGMMA_SS_OF(128, 64, 64, 65, 66, 67, 68); }
    else if constexpr (kN == 176) { FT_WGMMA_SS_OF(176, 88, 88, 89, 90, 91, 92); }
    else if constexpr (kN == 192) { FT_WGMMA_SS_OF(192, 96, 96, 97, 98, 99, 100); }
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const unsigned (&a)[4], unsigned long long b_desc, int accumulate) {
    if constexpr (kN == 16) { FT_WGMMA_RS_OF(16, 8, 8, 9, 10, 11, 12, 13, 14); }
    else if constexpr (kN == 32) { FT_WGMMA_RS_OF(32, 16, 16, 17, 18, 19, 20, 21, 22); }
    else if constexpr (kN == 64) { FT_WGMMA_RS_OF(64, 32, 32, 33, 34, 35, 36, 37, 38); }
    else if constexpr (kN == 80) { FT_WGMMA_RS_OF(80, 40, 40, 41, 42, 43, 44, 45, 46); }
    else if constexpr (kN == 128) { FT_WGMMA_RS_OF(128, 64, 64, 65, 66, 67, 68, 69, 70); }
    else if constexpr (kN == 176) { FT_WGMMA_RS_OF(176, 88, 88, 89, 90, 91, 92, 93, 94); }
    else if constexpr (kN == 192) { FT_WGMMA_RS_OF(192, 96, 96, 97, 98, 99, 100, 101, 102); }
  }
};

// acc (64 x kHeadDim per warpgroup, fp32) += A (64 x 16 kKSteps: k16 fragments in the rs layout, as ft_pack_a_tile
// makes them) times B (16 kKSteps rows x kHeadDim), read N-major from a 128-byte-swizzled tile whose 64-column
// slabs lie slab_bytes apart (16 rows = two 8-row groups = 2048 bytes): O += P V, dV += P^T dO, dK += dS^T Q. One
// instruction per 128 columns (kHeadDim 64: one of 64). Issued (fences, the chain, commit), not waited for.
template <typename T, int kHeadDim, int kKSteps>
__device__ __forceinline__ void ft_wgmma_regs_by_tile(float* acc, const unsigned (*af)[4], unsigned smem_b,
                                                      unsigned slab_bytes) {
  enum : int { kN = kHeadDim < 128 ? kHeadDim : 128 };
  ft_fence_regs<kHeadDim / 2>(acc);
  const unsigned long long db0 = ft_wgmma_desc(ft_opaque_u32(smem_b), slab_bytes, 1024);
  ft_wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
    for (int nc = 0; nc < kHeadDim / kN; ++nc)
      FtWgmma<T, kN>::template rs<1>(acc + nc * (kN / 2), af[ks],
                                     ft_wgmma_desc_step(db0, int(ks * 2048 + nc * (kN / 64) * slab_bytes)), 1);
  ft_wgmma_commit();
}

// D (64 x kN, fp32) = A (64 rows x 16 kKSteps) times B^T (B: kN rows x 16 kKSteps), A and B both K-major in
// 128-byte-swizzled tiles (ft/layout.cuh FtSlabOffset) whose 64-column slabs lie a_slab_bytes / b_slab_bytes
// apart (rows x 128): S = Q K^T, one m64nNk16 chain. Issued (fence, chain, commit), not waited for.
template <typename T, int kN, int kKSteps>
__device__ __forceinline__ void ft_wgmma_rows_by_rows(float* d, unsigned smem_a, unsigned a_slab_bytes, unsigned smem_b,
                                                      unsigned b_slab_bytes) {
  const unsigned long long da0 = ft_wgmma_desc(ft_opaque_u32(smem_a), 16, 1024);
  const unsigned long long db0 = ft_wgmma_desc(ft_opaque_u32(smem_b), 16, 1024);
  ft_wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    const int kofs = (ks % 4) * 32;  // k16 step inside a 128-byte slab row
    FtWgmma<T, kN>::template ss<0>(d, ft_wgmma_desc_step(da0, int((ks / 4) * a_slab_bytes) + kofs),
                                   ft_wgmma_desc_step(db0, int((ks / 4) * b_slab_bytes) + kofs), ks > 0);
  }
  ft_wgmma_commit();
}
