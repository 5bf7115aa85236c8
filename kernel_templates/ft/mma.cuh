// kernel_templates/ft/mma.cuh: warp-level tensor-core products (mma.sync m16n8k16, sm_80+) on shared-memory
// tiles in the FtSwizzle layout (ft/layout.cuh), 16-bit operands and fp32 accumulators, and the moves of
// accumulator tiles (zero, round to A fragments, store rows).
//
// Accumulator layout (PTX ISA, mma.m16n8k16): a 16 x 8 tile is float[4] per lane; lane (g = lane / 4,
// t4 = lane % 4) holds rows g (elements 0, 1) and g + 8 (elements 2, 3), columns 2 t4 and 2 t4 + 1. So element
// 2 r + e of tile nt is row g + 8 r, column 8 nt + 2 t4 + e, and the 4 lanes of a quad share a row.
#pragma once

#include "ft/layout.cuh"
#include "ft/types.cuh"

__device__ __forceinline__ void ft_ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ft_ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D (16x8, fp32) += A (16x16) * B (16x8), A row-major, B column-major, 16-bit inputs; pack: two fp32 values
// as one register of two 16-bit values, lo in the low half.
template <typename T>
struct FtMma;
template <>
struct FtMma<ft_half> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
};
template <>
struct FtMma<ft_bf16> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
};

// The A fragment of k16 step ks of the 16-row tile starting at row0 (lane l reads row l % 16, chunk l / 16 of
// the step's two).
template <typename Offset>
__device__ __forceinline__ void ft_load_a(unsigned (&f)[4], unsigned smem_a, int row0, int ks, Offset offset) {
  const int lane = threadIdx.x % 32;
  ft_ldmatrix_x4(f, smem_a + offset(row0 + (lane & 15), ks * 2 + (lane >> 4)));
}

// ---------------------------------------------------------------------------------------------
// Tile products. acc[mt][nt] += A[a_row0 + 16 mt + (0..15), :] . B[b_row0 + 8 nt + (0..7), :], the contraction
// over the head dim: S = Q K^T, dP = dO V^T (and their transposes with the roles of the tiles swapped). A is
// read from shared memory per k16 step, or (kAInRegs) taken from `af`: fragments [mt][ks] read once before.
template <typename T, int kHeadDim, int kMT, int kNT, bool kAInRegs = false>
__device__ __forceinline__ void ft_mma_rows_by_rows(float (&acc)[kMT][kNT][4], unsigned smem_a, int a_row0,
                                                    unsigned smem_b, int b_row0,
                                                    const unsigned (*af)[kHeadDim / 16][4] = nullptr) {
  static_assert(kNT % 2 == 0, "B rows come in pairs of 8-row tiles");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    unsigned a[kMT][4];
    if constexpr (!kAInRegs)
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) ft_load_a(a[mt], smem_a, a_row0 + mt * 16, ks, FtSwizzleOffset<kHeadDim>{});
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      unsigned b[4];
      const int r = b_row0 + np * 16 + (lane & 7) + ((lane >> 4) << 3);
      ft_ldmatrix_x4(b, smem_b + FtSwizzle<kHeadDim>::offset(r, ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        auto mma = [&](const unsigned(&am)[4]) {
          FtMma<T>::run(acc[mt][2 * np], am, b[0], b[1]);
          FtMma<T>::run(acc[mt][2 * np + 1], am, b[2], b[3]);
        };
        if constexpr (kAInRegs)
          mma(af[mt][ks]);
        else
          mma(a[mt]);
      }
    }
  }
}

// acc[mt][dt] += A[mt] . B[b_row0 + (0 .. 16 kKS - 1), :]: A in registers (kKS k16 fragments per 16-row
// tile, from ft_pack_a), the contraction over B's rows, B read transposed: O += P V, dV += P^T dO,
// dK += dS^T Q, dQ += dS K.
template <typename T, int kHeadDim, int kMT, int kKS>
__device__ __forceinline__ void ft_mma_regs_by_tile(float (&acc)[kMT][kHeadDim / 8][4], const unsigned (&a)[kMT][kKS][4],
                                                    unsigned smem_b, int b_row0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
    for (int dp = 0; dp < kHeadDim / 16; ++dp) {
      unsigned b[4];
      const int r = b_row0 + ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
      ft_ldmatrix_x4_trans(b, smem_b + FtSwizzle<kHeadDim>::offset(r, dp * 2 + (lane >> 4)));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        FtMma<T>::run(acc[mt][2 * dp], a[mt][ks], b[0], b[1]);
        FtMma<T>::run(acc[mt][2 * dp + 1], a[mt][ks], b[2], b[3]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Accumulator moves.

// A 16-row accumulator tile (kNT 8-column tiles) rounded to T as the A fragments of the next product: an
// accumulator pair of 8-column tiles is one k16 A fragment (P -> P V, dS -> dS K; wgmma's rs operand too).
template <typename T, int kNT>
__device__ __forceinline__ void ft_pack_a_tile(unsigned (&f)[kNT / 2][4], const float (&s)[kNT][4]) {
#pragma unroll
  for (int ks = 0; ks < kNT / 2; ++ks) {
    f[ks][0] = FtMma<T>::pack(s[2 * ks][0], s[2 * ks][1]);
    f[ks][1] = FtMma<T>::pack(s[2 * ks][2], s[2 * ks][3]);
    f[ks][2] = FtMma<T>::pack(s[2 * ks + 1][0], s[2 * ks + 1][1]);
    f[ks][3] = FtMma<T>::pack(s[2 * ks + 1][2], s[2 * ks + 1][3]);
  }
}
template <typename T, int kMT, int kNT>
__device__ __forceinline__ void ft_pack_a(unsigned (&f)[kMT][kNT / 2][4], const float (&s)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) ft_pack_a_tile<T>(f[mt], s[mt]);
}

template <int kN>
__device__ __forceinline__ void ft_zero(float (&acc)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] = 0.f;
}
template <int kMT, int kDT>
__device__ __forceinline__ void ft_zero(float (&acc)[kMT][kDT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;
}

// Accumulator rows (rows g and g + 8 of each 16-row tile) times `mul`, rounded to T, stored at row_dst(row),
// the row's first element, or skipped where that is nullptr; first_row is the warp's first row of the block.
template <typename T, int kMT, int kDT, typename RowDst>
__device__ __forceinline__ void ft_store_rows_at(RowDst row_dst, int first_row, const float (&acc)[kMT][kDT][4],
                                                 float mul) {
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      T* p = row_dst(first_row + mt * 16 + g + 8 * r);
      if (!p) continue;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<unsigned*>(p + dt * 8 + 2 * t4) =
            FtMma<T>::pack(acc[mt][dt][2 * r] * mul, acc[mt][dt][2 * r + 1] * mul);
    }
}
// The same at base + row * row_stride for rows in [row_begin, rows).
template <typename T, int kMT, int kDT>
__device__ __forceinline__ void ft_store_rows(T* base, long long row_stride, int first_row, int rows,
                                              const float (&acc)[kMT][kDT][4], float mul, int row_begin = 0) {
  ft_store_rows_at<T>([&](int row) -> T* { return row >= rows || row < row_begin ? nullptr : base + row * row_stride; },
                      first_row, acc, mul);
}

// One row of a thread's accumulator tile (flat: element 4 dt + 2 r + e holds column 8 dt + 2 t4 + e of row g + 8 r;
// r = 0 or 1) times `mul`, rounded to T, stored at dst (the row's first element): kCols columns in 4-byte stores.
template <typename T, int kCols>
__device__ __forceinline__ void ft_store_acc_row(T* dst, const float* acc, int r, float mul) {
  const int t4 = threadIdx.x % 4;
#pragma unroll
  for (int dt = 0; dt < kCols / 8; ++dt)
    *reinterpret_cast<unsigned*>(dst + dt * 8 + 2 * t4) = FtMma<T>::pack(acc[dt * 4 + 2 * r] * mul, acc[dt * 4 + 2 * r + 1] * mul);
}

// The same row into a shared-memory tile of kRows rows in the wgmma / TMA slab layout (FtSlabOffset: 64-column
// slabs of 128-byte rows, 16-byte chunks swizzled by the row) at tile row lr; `tile` is the tile's shared-window
// address (ft_smem_u32; its slabs 1024-aligned): what a TMA store of the tile's 64-column boxes reads (the forward's
// O, the backward's dK, dV).
template <typename T, int kCols, int kRows>
__device__ __forceinline__ void ft_stage_acc_row(unsigned tile, const float* acc, int lr, int r, float mul) {
  const int t4 = threadIdx.x % 4;
#pragma unroll
  for (int dt = 0; dt < kCols / 8; ++dt)
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(tile + FtSlabOffset<kRows>()(lr, dt) + unsigned(t4 * 4)),
                 "r"(FtMma<T>::pack(acc[dt * 4 + 2 * r] * mul, acc[dt * 4 + 2 * r + 1] * mul))
                 : "memory");
}

// Accumulator rows below `rows` as fp32, unscaled, at base + row * kDT * 8 (a dense workspace).
template <int kMT, int kDT>
__device__ __forceinline__ void ft_store_rows_f32(float* base, int first_row, int rows, const float (&acc)[kMT][kDT][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = first_row + mt * 16 + g + 8 * r;
      if (row >= rows) continue;
      float* p = base + static_cast<long long>(row) * (kDT * 8);
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<float2*>(p + dt * 8 + 2 * t4) = make_float2(acc[mt][dt][2 * r], acc[mt][dt][2 * r + 1]);
    }
}
