// kernel_templates/attn_fwd_sm90.cuh: the Hopper (sm_90a) kernel of the attn_fwd family, on warpgroup MMA.
//
// fp16 / bf16: attn_fwd_wgmma_kernel. One block per (64 x kWarpgroups query rows, query head, batch); each
// warpgroup (4 warps) owns 64 query rows. K/V tiles of kBlockN (16, 32, 64 or 128) keys stream through a
// cp.async pipeline of kStages shared-memory buffers, stored in the 128-byte-swizzled layout wgmma reads (per 64 columns a
// [rows][64] slab, 16-byte chunk c of row r at c ^ (r % 8)). S = Q K^T is one wgmma chain with Q and K read
// from shared memory; P stays in registers and is the A operand of O += P V, V read N-major. Masking, tile
// skipping and the online softmax in log2 are those of attn_fwd.cuh (attn_common.cuh). Chosen by the
// tunable mma = 90; mma = 80 is the mma.sync kernel, which runs on every GPU since sm_80.
#pragma once

#include "attn_common.cuh"

// ---------------------------------------------------------------------------------------------
// wgmma wrappers (PTX ISA 8.0+, sm_90a).
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

// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte offsets.
// K-major operands: stride = 1024 (8 rows of 128 bytes), leading unused (1). N-major: leading = bytes
// between 64-column slabs, stride = 1024 (8 rows along K).
__device__ __forceinline__ unsigned long long ft_wgmma_desc(unsigned addr, unsigned leading, unsigned stride) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((leading & 0x3FFFF) >> 4) << 16) |
         ((unsigned long long)((stride & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// D (64 x kN, fp32 accumulators, kN / 2 per thread) (+)= A (64 x 16) * B (16 x kN). ss: A from shared
// memory (K-major); rs: A from registers (the mma.sync m16n8k16 A layout, warp w holding rows 16w..16w+15).
// kTransB = 1: B is N-major in shared memory; ss only, kTransA = 1: A is M-major (16-bit types). accumulate = 0
// overwrites D.
template <typename T, int kN>
struct FtWgmma;
// N = 16 and 32 (S = Q K^T over 16- or 32-key tiles; ss only: P V's N is the head dim).
template <>
struct FtWgmma<ft_half, 16> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %12, %11;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
};

template <>
struct FtWgmma<ft_bf16, 16> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %12, %11;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
};

template <>
struct FtWgmma<ft_half, 32> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %20, %19;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
};

template <>
struct FtWgmma<ft_bf16, 32> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %20, %19;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
};

template <>
struct FtWgmma<ft_half, 64> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %36, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
  }
};

template <>
struct FtWgmma<ft_bf16, 64> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %36, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
  }
};

template <>
struct FtWgmma<ft_half, 128> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %68, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
  }
};

template <>
struct FtWgmma<ft_bf16, 128> {
  template <int kTransB, int kTransA = 0>
  static __device__ __forceinline__ void ss(float* d, unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %68, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB), "n"(kTransA));
  }
  template <int kTransB>
  static __device__ __forceinline__ void rs(float* d, const unsigned (&a)[4], unsigned long long b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
  }
};

// The wgmma kernels' tiles (ft_load_tile_at, attn_fwd.cuh): slab s = columns [64 s, 64 s + 64) at s * kRows * 128
// bytes, 128-byte rows whose 16-byte chunks are XOR-swizzled by the row. kMode: kHoisted for the forward, kLean
// for the wgmma dK / dV loop, kRolled for the fused backward (unrolled, it spills 4-20 bytes at d64).
template <int kRows>
struct FtSlabOffset {
  template <typename I>
  __device__ __forceinline__ unsigned operator()(I r, I c) const {
    return unsigned((c / 8) * kRows * 128 + r * 128 + (((c % 8) ^ (r % 8)) * 16));
  }
};
template <int kRows, int kHeadDim, int kThreads, typename T, FtLoad kMode>
__device__ __forceinline__ void ft_load_tile_sw128(unsigned dst, const T* src, long long row_stride, int valid) {
  ft_load_tile_at<kRows, kHeadDim, kThreads, T, kMode>(dst, src, row_stride, valid, FtSlabOffset<kRows>{});
}

// Like ft_load_tile_sw128, but row r comes from row_src(r), a pointer or nullptr (zero-filled): the
// rows of a head-packed Q tile belong to different heads.
template <int kRows, int kHeadDim, int kThreads, typename T, typename RowSrc>
__device__ __forceinline__ void ft_load_rows_sw128(unsigned dst, RowSrc row_src) {
  enum : int { kChunks = kHeadDim / 8, kTotal = kRows * kChunks, kIters = (kTotal + kThreads - 1) / kThreads };
#pragma unroll
  for (int it = 0; it < kIters; ++it) {  // as ft_load_tile_sw128
    const unsigned idx = unsigned(it * kThreads) + threadIdx.x;
    if (kTotal % kThreads != 0 && idx >= unsigned(kTotal)) break;
    const unsigned r = idx / kChunks, c = idx % kChunks;
    const T* row = row_src(int(r));
    const unsigned off = (c / 8) * kRows * 128 + r * 128 + (((c % 8) ^ (r % 8)) * 16);
    ft_cp_async16(dst + off, row ? row + c * 8 : row_src(0), row ? 16 : 0);
  }
}

// ---------------------------------------------------------------------------------------------
// kMinBlocks: blocks per SM the compiler must fit (__launch_bounds__), which caps its registers.
// kEpilogue: 1 = O written from the accumulators (4-byte stores); 2 = O staged in the Q tile's shared
// memory, then written in 16-byte rows (fewer, fully used store sectors).
// kPackHeads: query heads of one GQA group per block (they share its K/V head). Block row r is query
// m0 + r % kRowsPerHead of head h0 + r / kRowsPerHead, kRowsPerHead = kBlockM / kPackHeads: the K/V tiles a
// block loads serve kPackHeads heads, and a short query span keeps a windowed band narrow (GPT-OSS).
template <typename T, int kHeadDim, int kBlockN, int kWarpgroups, int kStages, int kPipe, int kMinBlocks,
          int kEpilogue, bool kCausal, bool kWindow, bool kLearnedSinks, int kPackHeads = 1>
__global__ void __launch_bounds__(kWarpgroups * 128, kMinBlocks)
    attn_fwd_wgmma_kernel(const __grid_constant__ FtAttnFwdParams<T> p) {
  static_assert(kHeadDim % 64 == 0, "rows of whole 128-byte swizzle slabs");
  static_assert(kBlockN == 16 || kBlockN == 32 || kBlockN == 64 || kBlockN == 128,
                "S = Q K^T is one m64nNk16 chain, N = 16, 32, 64 or 128");
  static_assert(kPipe == 1 || (kPipe == 2 && kStages >= 2), "kPipe 2 keeps two K/V tiles resident");
  static_assert(kEpilogue == 1 || kEpilogue == 2, "epilogue 1 (direct) or 2 (staged in shared memory)");
  static_assert(kPackHeads >= 1 && (64 * kWarpgroups) % kPackHeads == 0, "block rows split evenly over the heads");
  enum : int {
    kThreads = kWarpgroups * 128,
    kBlockM = 64 * kWarpgroups,
    kRowsPerHead = kBlockM / kPackHeads,  // queries per head in the block
    kNTiles = kBlockN / 8,              // 8-key accumulator tiles of S
    kKSteps = kHeadDim / 16,            // k16 steps of Q K^T
    kPSteps = kBlockN / 16,             // k16 steps of P V
    kPvN = kHeadDim < 128 ? kHeadDim : 128,  // N of one P V instruction; kHeadDim / kPvN of them per step
    kTileBytes = kBlockN * kHeadDim * 2,
    kSlabK = kBlockN * 128,             // bytes between 64-column slabs of a K or V tile
  };
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const float kNegInf = __int_as_float(0xff800000);
  const float kLn2 = 0.6931471805599453f;

  extern __shared__ unsigned char ft_smem_sm90[];
  const unsigned smem_q = (ft_smem_u32(ft_smem_sm90) + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  const unsigned smem_kv = smem_q + kBlockM * kHeadDim * 2;  // stage s: K at + 2s * kTileBytes, V after it

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  const int g = lane / 4, t4 = lane % 4;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest (causal: last) query blocks first
  const int h0 = blockIdx.y * kPackHeads, b = blockIdx.z;  // first of the block's query heads
  const int h_kv = int(unsigned(h0) / (unsigned(p.heads_q) / unsigned(p.heads_kv)));  // unsigned: a shorter division
  const int m0 = m_block * kRowsPerHead;  // the block's queries [m0, m1), the same for each of its heads
  const int m1 = min(m0 + kRowsPerHead, p.seq_q);
  // Block row lr: query head and query row.
  auto head_of = [](int lr) { return int(unsigned(lr) / kRowsPerHead); };  // lr >= 0: unsigned shifts and masks
  auto query_of = [&](int lr) { return m0 + int(unsigned(lr) % kRowsPerHead); };

  const T* k_head = p.k + b * p.k_sb + h_kv * p.k_sh;
  const T* v_head = p.v + b * p.v_sb + h_kv * p.v_sh;

  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const FtAttnTiles<kCausal, kWindow> tiles(mask, m0, m1, kBlockN);
  const int n_tiles = tiles.count();

  auto load_kv = [&](int i) {
    const int n0 = tiles.tile(i) * kBlockN;
    const unsigned dst = smem_kv + unsigned((i % kStages) * 2 * kTileBytes);
    ft_load_tile_sw128<kBlockN, kHeadDim, kThreads, T, FtLoad::kHoisted>(dst, k_head + n0 * p.k_ss, p.k_ss, p.seq_k - n0);
    ft_load_tile_sw128<kBlockN, kHeadDim, kThreads, T, FtLoad::kHoisted>(dst + kTileBytes, v_head + n0 * p.v_ss, p.v_ss, p.seq_k - n0);
  };
  if constexpr (kPackHeads == 1) {
    ft_load_tile_sw128<kBlockM, kHeadDim, kThreads, T, FtLoad::kHoisted>(smem_q, p.q + b * p.q_sb + h0 * p.q_sh + m0 * p.q_ss, p.q_ss, m1 - m0);
  } else {
    const T* q_b = p.q + b * p.q_sb;
    ft_load_rows_sw128<kBlockM, kHeadDim, kThreads, T>(smem_q, [&](int r) -> const T* {
      const int row = query_of(r);
      return row < p.seq_q ? q_b + (h0 + head_of(r)) * p.q_sh + row * p.q_ss : nullptr;
    });
  }
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i);
    ft_cp_async_commit();
  }

  // This thread's rows: block rows lr0 = g and lr0 + 8 of its warp's 16 inside the warpgroup's 64, i.e.
  // queries query_of(lr0 + 8 r) of heads h0 + head_of(lr0 + 8 r).
  const int lr0 = wg * 64 + (warp % 4) * 16 + g;
  float acc[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc[i] = 0.f;
  float row_max[2], row_sum[2], sink_log2[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sink_log2[r] = kLearnedSinks ? p.sinks[h0 + head_of(lr0 + 8 * r)] * 1.4426950408889634f : kNegInf;
    row_max[r] = kLearnedSinks ? sink_log2[r] / p.scale_log2 : kNegInf;
    row_sum[r] = 0.f;
  }
  const unsigned q_wg = smem_q + unsigned(wg * 64 * 128);  // this warpgroup's 64 rows in every Q slab

  // S_i = Q K_i^T into s (issued, not waited for).
  auto issue_qk = [&](float* s, unsigned smem_k) {
    ft_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const unsigned kofs = unsigned((ks % 4) * 32);  // k16 step inside a 128-byte slab row
      const unsigned long long da = ft_wgmma_desc(q_wg + unsigned((ks / 4) * kBlockM * 128) + kofs, 16, 1024);
      const unsigned long long db = ft_wgmma_desc(smem_k + unsigned((ks / 4) * kSlabK) + kofs, 16, 1024);
      FtWgmma<T, kBlockN>::template ss<0>(s, da, db, ks > 0);
    }
    ft_wgmma_commit();
  };
  // O += P V_i (issued, not waited for): V (kBlockN keys x kHeadDim) is N-major; 16 keys = two 8-row
  // groups = 2048 bytes.
  auto issue_pv = [&](const unsigned (*pf)[4], unsigned smem_v) {
    ft_fence_regs<kHeadDim / 2>(acc);
    ft_wgmma_fence();
#pragma unroll
    for (int ps = 0; ps < kPSteps; ++ps)
#pragma unroll
      for (int nc = 0; nc < kHeadDim / kPvN; ++nc) {
        const unsigned long long db =
            ft_wgmma_desc(smem_v + unsigned(ps * 2048 + nc * (kPvN / 64) * kSlabK), kSlabK, 1024);
        FtWgmma<T, kPvN>::template rs<1>(acc + nc * (kPvN / 2), pf[ps], db, 1);
      }
    ft_wgmma_commit();
  };
  // Mask (boundary tiles only) and the online softmax of S_i: s becomes P (unnormalized, in place); the
  // row max and sum advance; alpha[r] = exp2(scale (m_old - m_new)) is returned for the caller to apply to
  // acc once no P V that reads acc is in flight.
  auto softmax = [&](float* s, int n0, float* alpha) {
    const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);
    ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = query_of(lr0 + 8 * r);
        float mx = kNegInf;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[nt * 4 + 2 * r + e];
            if (kMasked && !mask.visible(row, n0 + nt * 8 + 2 * t4 + e)) x = kNegInf;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        const float m_new = fmaxf(row_max[r], mx);
        const float base = m_new == kNegInf ? 0.f : m_new * p.scale_log2;
        alpha[r] = ft_exp2(row_max[r] * p.scale_log2 - base);  // 0 while the row was empty
        row_max[r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[nt * 4 + 2 * r + e];
            x = ft_exp2(fmaf(x, p.scale_log2, -base));
            sum += x;
          }
        row_sum[r] = row_sum[r] * alpha[r] + sum;
      }
    });
  };
  auto rescale = [&](const float* alpha) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; ++dt) acc[dt * 4 + 2 * r] *= alpha[r], acc[dt * 4 + 2 * r + 1] *= alpha[r];
  };
  // P as the A operand of P V (the m16n8k16 A fragment layout, which the S accumulators already have).
  auto pack_p = [&](const float* s, unsigned (*pf)[4]) {
#pragma unroll
    for (int ps = 0; ps < kPSteps; ++ps) {
      pf[ps][0] = FtMma<T>::pack(s[(2 * ps) * 4 + 0], s[(2 * ps) * 4 + 1]);
      pf[ps][1] = FtMma<T>::pack(s[(2 * ps) * 4 + 2], s[(2 * ps) * 4 + 3]);
      pf[ps][2] = FtMma<T>::pack(s[(2 * ps + 1) * 4 + 0], s[(2 * ps + 1) * 4 + 1]);
      pf[ps][3] = FtMma<T>::pack(s[(2 * ps + 1) * 4 + 2], s[(2 * ps + 1) * 4 + 3]);
    }
  };
  auto stage_k = [&](int i) { return smem_kv + unsigned((i % kStages) * 2 * kTileBytes); };

  if constexpr (kPipe == 1) {
    // One tile at a time: S_i, softmax, P_i V_i, each waited for.
    for (int i = 0; i < n_tiles; ++i) {
      if (i + kStages - 1 < n_tiles) load_kv(i + kStages - 1);
      ft_cp_async_commit();
      ft_cp_async_wait<kStages - 1>();
      ft_fence_proxy_async();
      __syncthreads();
      float s[kBlockN / 2];
      issue_qk(s, stage_k(i));
      ft_wgmma_wait<0>();
      ft_fence_regs<kBlockN / 2>(s);
      float alpha[2];
      softmax(s, tiles.tile(i) * kBlockN, alpha);
      rescale(alpha);
      unsigned pf[kPSteps][4];
      pack_p(s, pf);
      issue_pv(pf, stage_k(i) + kTileBytes);
      ft_wgmma_wait<0>();
      ft_fence_regs<kHeadDim / 2>(acc);
      __syncthreads();  // stage i % kStages is refilled by the next iteration's load
    }
  } else {
    // Two tiles in flight (FA3's intra-warpgroup overlap): P_{i-1} V_{i-1} runs on the tensor cores while
    // the softmax of S_i runs on the FMA / SFU units. Tile i + kStages - 1 is loaded at the end of
    // iteration i, into the stage of tile i - 1, whose P V has then completed.
    unsigned pf[kPSteps][4];
    for (int i = 0; i < n_tiles; ++i) {
      ft_cp_async_wait<kStages - 2>();
      ft_fence_proxy_async();
      __syncthreads();
      float s[kBlockN / 2];
      issue_qk(s, stage_k(i));
      if (i > 0) issue_pv(pf, stage_k(i - 1) + kTileBytes);
      if (i > 0) ft_wgmma_wait<1>(); else ft_wgmma_wait<0>();  // S_i is done; P_{i-1} V_{i-1} may run on
      ft_fence_regs<kBlockN / 2>(s);
      float alpha[2];
      softmax(s, tiles.tile(i) * kBlockN, alpha);
      ft_wgmma_wait<0>();
      ft_fence_regs<kHeadDim / 2>(acc);
      rescale(alpha);
      pack_p(s, pf);
      __syncthreads();  // every warpgroup is past P_{i-1} V_{i-1}: stage (i - 1) % kStages is free
      if (i + kStages - 1 < n_tiles) load_kv(i + kStages - 1);
      ft_cp_async_commit();
    }
    if (n_tiles > 0) {
      issue_pv(pf, stage_k(n_tiles - 1) + kTileBytes);
      ft_wgmma_wait<0>();
      ft_fence_regs<kHeadDim / 2>(acc);
    }
  }
  ft_cp_async_wait<0>();

  // Epilogue: O = acc / l, LSE = (m * scale_log2 + log2 l) ln 2; a learned sink adds exp2(s_h - m) to l.
  // Staged (kEpilogue 2): the Q tile's shared memory, free once every Q K^T has completed, holds O row-major
  // with 16-byte chunk c of row r at c ^ (r % 8) (conflict-free both ways), then rows go out in 16 bytes.
  enum : int { kChunks = kHeadDim / 8, kRowBytes = kHeadDim * 2 };
  unsigned char* o_stage = ft_smem_sm90 + (smem_q - ft_smem_u32(ft_smem_sm90));
  if (kEpilogue == 2) {
    // The Q copy is committed with the first K/V tile: a block with no tile to visit (rows that see no
    // key) never committed it, and it could land on the staged O. Commit and drain every copy first.
    ft_cp_async_commit();
    ft_cp_async_wait<0>();
    __syncthreads();  // no warp still reads Q
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    const float m = row_max[r];
    const float base = m == kNegInf ? 0.f : m * p.scale_log2;
    if (kLearnedSinks) l += ft_exp2(sink_log2[r] - base);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int lr = lr0 + 8 * r;  // row inside the block
    const int row = query_of(lr), h = h0 + head_of(lr);
    if (kEpilogue == 2) {
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; ++dt) {
        const unsigned packed = FtMma<T>::pack(acc[dt * 4 + 2 * r] * inv, acc[dt * 4 + 2 * r + 1] * inv);
        *reinterpret_cast<unsigned*>(o_stage + lr * kRowBytes + ((dt ^ (lr % 8)) * 16) + t4 * 4) = packed;
      }
    }
    if (row < p.seq_q) {
      T* o_row = p.o + b * p.o_sb + h * p.o_sh + row * p.o_ss;
      if (kEpilogue == 1) {
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; ++dt) {
          const unsigned packed = FtMma<T>::pack(acc[dt * 4 + 2 * r] * inv, acc[dt * 4 + 2 * r + 1] * inv);
          *reinterpret_cast<unsigned*>(o_row + dt * 8 + 2 * t4) = packed;
        }
      }
      if (t4 == 0)
        p.lse[(static_cast<long long>(b) * p.heads_q + h) * p.seq_q + row] = l > 0.f ? (base + log2f(l)) * kLn2 : kNegInf;
    }
  }
  if (kEpilogue == 2) {
    __syncthreads();
#pragma unroll
    for (int idx = threadIdx.x; idx < kBlockM * kChunks; idx += kThreads) {
      const int lr = idx / kChunks, c = idx % kChunks;
      const int row = query_of(lr);
      if (row < p.seq_q)
        *reinterpret_cast<uint4*>(p.o + b * p.o_sb + (h0 + head_of(lr)) * p.o_sh + row * p.o_ss + c * 8) =
            *reinterpret_cast<const uint4*>(o_stage + lr * kRowBytes + ((c ^ (lr % 8)) * 16));
    }
  }
#else
  __trap();  // built for a target without wgmma: the host never launches this (can_run requires sm_90a)
#endif
}
