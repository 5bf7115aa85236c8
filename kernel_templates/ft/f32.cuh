// kernel_templates/ft/f32.cuh: what the fp32 attention kernels (attn_fwd_f32.cuh, attn_bwd_f32.cuh) share: PTX
// wrappers on generic float pointers and the loader of padded rows (stride head_dim + 4 floats), in namespace
// ft_attn_f32. A host emulation of the kernels (tests/kernels/attn_fwd_f32_emulation.hpp) defines
// FT_ATTN_F32_HOST_PTX and brings its own versions of the five wrappers, so the rest is the code the GPU runs.
#pragma once

namespace ft_attn_f32 {

// PTX wrappers (the emulation's are in tests/kernels/attn_fwd_f32_emulation.hpp).
#ifndef FT_ATTN_F32_HOST_PTX
/// Copies 16 bytes global -> shared without holding registers; valid = false writes 16 zero bytes
/// (src-size 0: nothing is read). Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
/// fp32 -> tf32 (round to nearest, ties away from zero), as the 32-bit pattern mma reads.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
/// d += A (16 x 8, row) * B (8 x 8, col), tf32 inputs, fp32 accumulators. Lane (g = lane / 4, t = lane % 4)
/// holds a = {A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]}, b = {B[t][g], B[t+4][g]},
/// d = {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]} (PTX ISA, mma.m16n8k8 fragment layouts).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/// Four 8 x 4 fp32 matrices from shared memory: lane l passes the address of row l % 8 of matrix l / 8
/// (16 contiguous bytes); lane (g, t) receives element [g][t] of matrix i in r[i] (ldmatrix .b16 moves
/// 32-bit words unchanged).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const float* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
#endif

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

/// cp.async of rows [row0, row0 + kRows) of a matrix with kHeadDim columns and row stride ld into shared
/// memory (row stride kHeadDim + 4); rows >= n_rows are zero-filled.
/// Each thread keeps one column (or a few) and steps down the rows by pointer increments: per-pass
/// addresses (row * ld) would be hoisted out of the tile loop and hold two registers each.
template <int kRows, int kHeadDim, int kThreads>
__device__ __forceinline__ void load_rows_async(float* smem, const float* g, long long ld, int row0, int n_rows) {
  constexpr int kChunksPerRow = kHeadDim / 4;  // 16-byte chunks
  constexpr int kThreadsPerRow = kThreads < kChunksPerRow ? kThreads : kChunksPerRow;
  constexpr int kChunksPerThread = kChunksPerRow / kThreadsPerRow;  // per row
  constexpr int kRowsPerPass = kThreads / kThreadsPerRow;
  constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  const int tr = static_cast<int>(threadIdx.x) / kThreadsPerRow, tc = static_cast<int>(threadIdx.x) % kThreadsPerRow;
  int row = row0 + tr;
  const float* src = g + row * ld + 4 * tc;
  float* dst = smem + tr * (kHeadDim + 4) + 4 * tc;
#pragma unroll 4
  for (int pass = 0; pass < kPasses; ++pass) {
    if (kRows % kRowsPerPass == 0 || tr + pass * kRowsPerPass < kRows) {
      const bool valid = row < n_rows;
#pragma unroll
      for (int j = 0; j < kChunksPerThread; ++j)
        cp_async_16(dst + 4 * j * kThreadsPerRow, valid ? src + 4 * j * kThreadsPerRow : g, valid);
    }
    row += kRowsPerPass;
    src += kRowsPerPass * ld;
    dst += kRowsPerPass * (kHeadDim + 4);
  }
}

}  // namespace ft_attn_f32
