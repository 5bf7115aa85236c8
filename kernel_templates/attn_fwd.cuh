// kernel_templates/attn_fwd.cuh: fused attention forward, FlashAttention-2 style (the attn_fwd family).
//
// fp16 / bf16: attn_fwd_mma_kernel. One block per (block_m query rows, query head, batch); each warp owns
// kMTiles (1 or 2) tiles of 16 query rows. Key/value tiles of block_n rows stream through a cp.async
// pipeline of kStages shared-memory buffers; S = Q K^T and O += P V run on mma.sync.m16n8k16 with fp32
// accumulators, operands fetched with ldmatrix from an XOR-swizzled layout (no bank conflicts). The
// softmax is online in the log2 domain (exp2 with the scale folded into one FMA). Only the key tiles that
// can hold a visible pair are visited (FtAttnTiles) and only boundary tiles pay for the element-wise mask.
// fp32 (exact FFMA, or TF32 tensor cores): attn_fwd_f32.cuh.
#pragma once

#include "attn_common.cuh"

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_80+).
__device__ __forceinline__ unsigned ft_smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
// 16 bytes global -> shared, bypassing L1; src_bytes = 0 fills the destination with zeros.
__device__ __forceinline__ void ft_cp_async16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void ft_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int kPending>
__device__ __forceinline__ void ft_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
}
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
__device__ __forceinline__ float ft_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// D (16x8, fp32) += A (16x16) * B (16x8), A row-major, B column-major, 16-bit inputs.
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
  // Two fp32 values as one register of two 16-bit values, lo in the low half.
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

// ---------------------------------------------------------------------------------------------
// Shared-memory tile of kRows x kHeadDim 16-bit elements, rows of kHeadDim / 8 chunks of 16 bytes. Chunk c
// of row r is stored at chunk c ^ f(r), so that the 8 rows one ldmatrix phase reads (or a cp.async warp
// writes) fall in 8 different 16-byte bank groups for every head dim.
template <int kHeadDim>
struct FtSwizzle {
  enum : int { kChunks = kHeadDim / 8 };
  static __device__ __forceinline__ int chunk(int r, int c) {
    if (kChunks >= 8) return c ^ (r & 7);
    return c ^ ((r / (8 / kChunks)) & (kChunks - 1));
  }
  /// Byte offset of (row r, chunk c) in the tile.
  static __device__ __forceinline__ unsigned offset(int r, int c) {
    return unsigned((r * kChunks + chunk(r, c)) * 16);
  }
};

// An opaque copy of x: values derived from it are recomputed where they are used instead of being hoisted
// out of the enclosing loop into registers (an empty volatile asm is never moved or merged).
__device__ __forceinline__ unsigned ft_opaque(unsigned x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ long long ft_opaque(long long x) {
  asm volatile("" : "+l"(x));
  return x;
}

// How a tile loader issues its copies. Both run a fixed trip count from 0 with unsigned indices, unrolled
// into straight-line copies (a loop from threadIdx.x compiled to a remainder loop with branches and signed
// divisions per 16-byte copy: 15-37% of the wgmma forward, docs/NOTES.md session 15).
//   kHoisted: the compiler may keep every copy's address in registers across the caller's tile loop (the
//             forwards, which have registers to spare);
//   kLean:    the thread index and the row stride pass through ft_opaque on every call, so each copy's
//             address is recomputed there (a few integer ops) instead of held: the register-tight backward
//             kernels, where the hoisted addresses spilled.
//   kStepped: as kLean, but each thread keeps one row pointer and steps it (no per-copy row / chunk
//             arithmetic, no address select): 7-14% faster dQ on GPT-OSS (H100), but it holds 2-3 more
//             registers across the copies, which spill in kernels near the register cap (FtLoadFor).
// kRolled is the loop from threadIdx.x, kept where even kLean spills (the fused wgmma backward).
enum class FtLoad { kHoisted, kLean, kStepped, kRolled };

// The backward mma.sync kernels' loader: kStepped where the register cap leaves room for it (head dim
// <= 64 and at least 160 registers per thread under __launch_bounds__(threads, min_blocks)), else kLean.
template <int kHeadDim, int kThreads, int kMinBlocks>
struct FtLoadFor {
  static constexpr FtLoad value =
      kHeadDim <= 64 && 65536 / (kThreads * kMinBlocks) >= 160 ? FtLoad::kStepped : FtLoad::kLean;
};

// Issues the cp.async copies of rows [0, kRows) of a tile whose first row is `src`, chunk c (16 bytes) of row r
// landing at dst + offset(r, c); rows at or past `valid` are zero-filled (in kStepped their address, past the
// tile, is never read; elsewhere clamped to `src`). ft_load_tile and the wgmma kernels' ft_load_tile_sw128
// differ only in `offset`: the XOR-swizzled mma.sync layout or the 128-byte-slab wgmma layout.
template <int kRows, int kHeadDim, int kThreads, typename T, FtLoad kMode, typename Offset>
__device__ __forceinline__ void ft_load_tile_at(unsigned dst, const T* src, long long row_stride, int valid,
                                                Offset offset) {
  enum : int { kChunks = kHeadDim / 8, kTotal = kRows * kChunks, kIters = (kTotal + kThreads - 1) / kThreads };
  if constexpr (kMode == FtLoad::kRolled) {
#pragma unroll
    for (int idx = threadIdx.x; idx < kTotal; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks;
      const bool in = r < valid;
      const T* p = in ? src + r * row_stride + c * 8 : src;
      ft_cp_async16(dst + offset(r, c), p, in ? 16 : 0);
    }
    return;
  }
  const unsigned tid = kMode != FtLoad::kHoisted ? ft_opaque(unsigned(threadIdx.x)) : unsigned(threadIdx.x);
  const long long stride = kMode != FtLoad::kHoisted ? ft_opaque(row_stride) : row_stride;
  if constexpr (kMode == FtLoad::kStepped && kThreads % kChunks == 0) {
    // Each thread keeps its chunk c and steps kRowStep rows per copy: no per-copy row / chunk arithmetic and
    // no address select.
    enum : int { kRowStep = kThreads / kChunks };
    const unsigned r0 = tid / kChunks, c = tid % kChunks;
    const T* p0 = src + r0 * stride + c * 8;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const unsigned r = r0 + unsigned(it * kRowStep);
      if (kTotal % kThreads != 0 && r >= unsigned(kRows)) break;
      ft_cp_async16(dst + offset(r, c), p0 + (it * kRowStep) * stride, int(r) < valid ? 16 : 0);
    }
    return;
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const unsigned idx = unsigned(it * kThreads) + tid;
    if (kTotal % kThreads != 0 && idx >= unsigned(kTotal)) break;
    const unsigned r = idx / kChunks, c = idx % kChunks;
    const bool in = int(r) < valid;
    const T* p = in ? src + r * stride + c * 8 : src;
    ft_cp_async16(dst + offset(r, c), p, in ? 16 : 0);
  }
}

// The mma.sync kernels' tiles: rows of kHeadDim / 8 chunks, XOR-swizzled (FtSwizzle).
template <int kHeadDim>
struct FtSwizzleOffset {
  template <typename I>
  __device__ __forceinline__ unsigned operator()(I r, I c) const {
    return FtSwizzle<kHeadDim>::offset(int(r), int(c));
  }
};
template <int kRows, int kHeadDim, int kThreads, typename T, FtLoad kMode>
__device__ __forceinline__ void ft_load_tile(unsigned dst, const T* src, long long row_stride, int valid) {
  ft_load_tile_at<kRows, kHeadDim, kThreads, T, kMode>(dst, src, row_stride, valid, FtSwizzleOffset<kHeadDim>{});
}

// The same for rows gathered one by one: row r of the tile is row_src(r), or zero-filled when that is
// nullptr (rows of a head-packed tile come from different heads). row_src(0) must be a real row.
template <int kRows, int kHeadDim, int kThreads, typename T, typename RowSrc>
__device__ __forceinline__ void ft_load_rows(unsigned dst, RowSrc row_src) {
  enum : int { kChunks = kHeadDim / 8, kTotal = kRows * kChunks };
#pragma unroll
  for (int idx = threadIdx.x; idx < kTotal; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const T* row = row_src(r);
    ft_cp_async16(dst + FtSwizzle<kHeadDim>::offset(r, c), row ? row + c * 8 : row_src(0), row ? 16 : 0);
  }
}

// ---------------------------------------------------------------------------------------------
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kCausal, bool kWindow,
          bool kLearnedSinks>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attn_fwd_mma_kernel(const __grid_constant__ FtAttnFwdParams<T> p) {
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0, "tiles are whole 16 x 16 MMA steps");
  static_assert(kBlockM % (16 * kWarps) == 0 && kBlockM / (16 * kWarps) <= 2, "a warp owns 16 or 32 query rows");
  enum : int {
    kThreads = kWarps * 32,
    kMTiles = kBlockM / (16 * kWarps),  // 16-row MMA tiles per warp
    kNTiles = kBlockN / 8,              // 8-key accumulator tiles of S
    kDTiles = kHeadDim / 8,             // 8-column accumulator tiles of O
    kKSteps = kHeadDim / 16,            // k16 steps of Q K^T
    kPSteps = kBlockN / 16,             // k16 steps of P V
    kQInRegs = kMTiles * kHeadDim <= 128,  // Q fragments stay in registers unless that would spill
    kTileBytes = kBlockN * kHeadDim * 2,
  };
  const float kNegInf = __int_as_float(0xff800000);
  const float kLn2 = 0.6931471805599453f;

  extern __shared__ __align__(128) unsigned char ft_smem[];
  const unsigned smem_q = ft_smem_u32(ft_smem);
  const unsigned smem_kv = smem_q + kBlockM * kHeadDim * 2;  // stage s: K at + 2s * kTileBytes, V after it

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // accumulator row group and column pair of this lane
  // Heaviest query blocks (last rows: most keys under a causal mask) first, for a shorter tail.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM;
  const int m1 = min(m0 + kBlockM, p.seq_q);

  const T* q_blk = p.q + b * p.q_sb + h * p.q_sh + m0 * p.q_ss;
  const T* k_head = p.k + b * p.k_sb + h_kv * p.k_sh;
  const T* v_head = p.v + b * p.v_sb + h_kv * p.v_sh;

  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const FtAttnTiles<kCausal, kWindow> tiles(mask, m0, m1, kBlockN);
  const int n_tiles = tiles.count();

  auto load_kv = [&](int i) {  // tile i of the visiting order into stage i % kStages
    const int n0 = tiles.tile(i) * kBlockN;
    const unsigned dst = smem_kv + unsigned((i % kStages) * 2 * kTileBytes);
    ft_load_tile<kBlockN, kHeadDim, kThreads, T, FtLoad::kHoisted>(dst, k_head + n0 * p.k_ss, p.k_ss, p.seq_k - n0);
    ft_load_tile<kBlockN, kHeadDim, kThreads, T, FtLoad::kHoisted>(dst + kTileBytes, v_head + n0 * p.v_ss, p.v_ss, p.seq_k - n0);
  };

  // Prologue: Q with the first tile, then tiles 1 .. kStages - 2; always one group per slot, so that
  // wait_group<kStages - 1> below means "tile i has landed".
  ft_load_tile<kBlockM, kHeadDim, kThreads, T, FtLoad::kHoisted>(smem_q, q_blk, p.q_ss, m1 - m0);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i);
    ft_cp_async_commit();
  }

  // Running state per owned row (two rows per 16-row tile: g and g + 8). m is in raw Q.K units.
  float acc[kMTiles][kDTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
  unsigned qf[kQInRegs ? kMTiles : 1][kQInRegs ? kKSteps : 1][4];
  const float sink_log2 = kLearnedSinks ? p.sinks[h] * 1.4426950408889634f : kNegInf;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[mt][r] = kLearnedSinks ? sink_log2 / p.scale_log2 : kNegInf;
      row_sum[mt][r] = 0.f;
    }
  }
  const int warp_row0 = warp * kMTiles * 16;  // first query row of this warp inside the block

  // ldmatrix addresses: lane l feeds row (l % 16) of an A tile at chunk (l / 16); for B tiles row
  // (l % 8) + 8 * (l / 16) at chunk (l / 8) % 2 (K), or row (l % 8) + 8 * ((l / 8) % 2) at chunk l / 16 (V).
  auto load_q_frag = [&](unsigned (&f)[4], int mt, int ks) {
    const int r = warp_row0 + mt * 16 + (lane & 15);
    ft_ldmatrix_x4(f, smem_q + FtSwizzle<kHeadDim>::offset(r, ks * 2 + (lane >> 4)));
  };

  for (int i = 0; i < n_tiles; ++i) {
    if (i + kStages - 1 < n_tiles) load_kv(i + kStages - 1);
    ft_cp_async_commit();
    ft_cp_async_wait<kStages - 1>();
    __syncthreads();
    if (kQInRegs && i == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) load_q_frag(qf[kQInRegs ? mt : 0][kQInRegs ? ks : 0], mt, ks);
    }
    const unsigned smem_k = smem_kv + unsigned((i % kStages) * 2 * kTileBytes);
    const unsigned smem_v = smem_k + kTileBytes;
    const int n0 = tiles.tile(i) * kBlockN;

    // S = Q K^T (raw, unscaled).
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      unsigned qreg[kMTiles][4];
      if (!kQInRegs)
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) load_q_frag(qreg[mt], mt, ks);
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        unsigned bk[4];
        const int r = np * 16 + (lane & 7) + ((lane >> 4) << 3);
        ft_ldmatrix_x4(bk, smem_k + FtSwizzle<kHeadDim>::offset(r, ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          const unsigned(&a)[4] = kQInRegs ? qf[kQInRegs ? mt : 0][kQInRegs ? ks : 0] : qreg[mt];
          FtMma<T>::run(s[mt][2 * np], a, bk[0], bk[1]);
          FtMma<T>::run(s[mt][2 * np + 1], a, bk[2], bk[3]);
        }
      }
    }

    // Mask (boundary tiles only), online softmax, P as the A operand of P V.
    const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);
    unsigned pf[kMTiles][kPSteps][4];
    ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = m0 + warp_row0 + mt * 16 + g + 8 * r;
          float mx = kNegInf;
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][2 * r + e];
              if (kMasked && !mask.visible(row, n0 + nt * 8 + 2 * t4 + e)) x = kNegInf;
              mx = fmaxf(mx, x);
            }
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
          const float m_new = fmaxf(row_max[mt][r], mx);
          const float base = m_new == kNegInf ? 0.f : m_new * p.scale_log2;
          const float alpha = ft_exp2(row_max[mt][r] * p.scale_log2 - base);  // 0 while the row was empty
          row_max[mt][r] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][2 * r + e];
              x = ft_exp2(fmaf(x, p.scale_log2, -base));
              sum += x;
            }
          row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
          for (int dt = 0; dt < kDTiles; ++dt) acc[mt][dt][2 * r] *= alpha, acc[mt][dt][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int ps = 0; ps < kPSteps; ++ps) {
          pf[mt][ps][0] = FtMma<T>::pack(s[mt][2 * ps][0], s[mt][2 * ps][1]);
          pf[mt][ps][1] = FtMma<T>::pack(s[mt][2 * ps][2], s[mt][2 * ps][3]);
          pf[mt][ps][2] = FtMma<T>::pack(s[mt][2 * ps + 1][0], s[mt][2 * ps + 1][1]);
          pf[mt][ps][3] = FtMma<T>::pack(s[mt][2 * ps + 1][2], s[mt][2 * ps + 1][3]);
        }
      }
    });

    // O += P V.
#pragma unroll
    for (int ps = 0; ps < kPSteps; ++ps) {
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        unsigned bv[4];
        const int r = ps * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        ft_ldmatrix_x4_trans(bv, smem_v + FtSwizzle<kHeadDim>::offset(r, dp * 2 + (lane >> 4)));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          FtMma<T>::run(acc[mt][2 * dp], pf[mt][ps], bv[0], bv[1]);
          FtMma<T>::run(acc[mt][2 * dp + 1], pf[mt][ps], bv[2], bv[3]);
        }
      }
    }
    __syncthreads();  // stage i % kStages is refilled by the next iteration's load
  }
  ft_cp_async_wait<0>();

  // Epilogue: O = acc / l, LSE = (m * scale_log2 + log2 l) ln 2; a learned sink adds exp2(s_h - m) to l.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[mt][r];
      l += __shfl_xor_sync(kFullMask, l, 1);
      l += __shfl_xor_sync(kFullMask, l, 2);
      const float m = row_max[mt][r];
      const float base = m == kNegInf ? 0.f : m * p.scale_log2;
      if (kLearnedSinks) l += ft_exp2(sink_log2 - base);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = m0 + warp_row0 + mt * 16 + g + 8 * r;
      if (row < p.seq_q) {
        T* o_row = p.o + b * p.o_sb + h * p.o_sh + row * p.o_ss;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          const unsigned packed = FtMma<T>::pack(acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
          *reinterpret_cast<unsigned*>(o_row + dt * 8 + 2 * t4) = packed;
        }
        if (t4 == 0)
          p.lse[(static_cast<long long>(b) * p.heads_q + h) * p.seq_q + row] = l > 0.f ? (base + log2f(l)) * kLn2 : kNegInf;
      }
    }
  }
}

#include "attn_fwd_f32.cuh"   // fp32: exact FFMA and TF32 variants
#include "attn_fwd_sm90.cuh"  // fp16 / bf16 on Hopper warpgroup MMA (mma = 90)
