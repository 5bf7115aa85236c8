// kernel_templates/ft/attn_bwd.cuh: the steps of one work item of the Hopper dK / dV loop on the transposed
// products (keys as the wgmma M rows: S^T = K Q^T, dP^T = V dO^T), shared by attn_bwd_sm90.cuh (cp.async, mma 90
// and the fused pass) and attn_bwd_sm90_tma.cuh (TMA, warp-specialized, mma 91). A warpgroup owns 64 keys; its
// accumulator element (nt, r, e) of a 64 x kBlockM product sits at key row (warp % 4) * 16 + g + 8 r and query
// column nt * 8 + 2 t4 + e (index nt * 4 + 2 r + e), g = lane / 4, t4 = lane % 4.
#pragma once

#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/softmax.cuh"
#include "ft/wgmma.cuh"

// A tile's row vector in shared memory (LSE or D) as this thread's columns of the accumulator layout: (nt, e) is
// column nt * 8 + 2 t4 + e. kAhead: read into registers at load (ahead of a wgmma wait that would otherwise
// expose the latency; kBlockM / 4 registers), else at each use.
template <int kBlockM, bool kAhead>
struct FtBwdCols {
  float2 v[kAhead ? kBlockM / 8 : 1];
  const float* row;
  int t4;
  __device__ __forceinline__ void load(const float* row_s, int t4_) {
    row = row_s;
    t4 = t4_;
    if constexpr (kAhead) {
#pragma unroll
      for (int nt = 0; nt < kBlockM / 8; ++nt) v[nt] = *reinterpret_cast<const float2*>(row + nt * 8 + 2 * t4);
    }
  }
  // Column nt * 8 + 2 t4 + e.
  __device__ __forceinline__ float operator()(int nt, int e) const {
    if constexpr (kAhead) return e ? v[nt].y : v[nt].x;
    else return row[nt * 8 + 2 * t4 + e];
  }
};

// P^T in place of S^T (kBlockM / 2 floats per thread: this thread's keys key0, key0 + 8 against the tile's
// queries m0 .., of seq_q): exp2(S^T scale log2 e - LSE log2 e), 0 where the mask hides the pair or the query is past
// seq_q (whatever LSE says there). lse: the tile's LSE values (natural log; kLseLog2: already times log2 e) as this
// thread's columns (FtBwdCols).
// Tiles inside the mask skip the checks (ft_if_masked). In a boundary tile each of the thread's two keys sees one
// range of query rows (FtAttnQueryRange of that key alone, below seq_q; none past seq_k): at block_m <= 80 the mask
// is two compares an element against the range, as columns relative to the thread's first column 2 t4, instead of
// mask.visible (session 29: the windowed sweep spent ~17 instructions an element in this loop); 128-row items keep
// mask.visible (the cp.async fused pass at head_dim 64 sits at the 255-register cap: the four range registers made
// ptxas serialize its wgmma, C7511).
template <int kBlockM, int kBlockN, bool kLseLog2 = false, bool kCausal, bool kWindow, class Cols>
__device__ __forceinline__ void ft_bwd_probs_t(float (&s)[kBlockM / 2], const FtAttnMask<kCausal, kWindow>& mask, int seq_q, int m0,
                                               int n0, int key0, const Cols& lse, float scale_log2, int t4) {
  const float kLog2e = 1.4426950408889634f;
  const bool need_mask = m0 + kBlockM > seq_q || ft_attn_tile_needs_mask(mask, m0, m0 + kBlockM, n0, kBlockN);
  ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
    constexpr bool kMasked = decltype(masked)::value;
    constexpr bool kRanges = kBlockM <= 80;
    int lo[2] = {0, 0}, hi[2] = {0, 0};  // key key0 + 8 r sees columns [lo[r], hi[r]) + 2 t4 of the tile
    if constexpr (kMasked && kRanges) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = key0 + 8 * r;
        const FtAttnQueryRange<kCausal, kWindow> rows(mask, key, key + 1);
        lo[r] = rows.lo - m0 - 2 * t4;
        hi[r] = (key < mask.seq_k ? min(rows.hi, seq_q) : rows.lo) - m0 - 2 * t4;
      }
    }
#pragma unroll
    for (int nt = 0; nt < kBlockM / 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt * 4 + 2 * r + e];
          const float p = ft_prob_from_lse<false>(x, scale_log2, kLseLog2 ? lse(nt, e) : lse(nt, e) * kLog2e);
          const int col = nt * 8 + 2 * t4 + e;
          const bool vis = !kMasked || (kRanges ? nt * 8 + e >= lo[r] && nt * 8 + e < hi[r]
                                                : m0 + col < seq_q && mask.visible(m0 + col, key0 + 8 * r));
          x = vis ? p : 0.f;
        }
  });
}

// dS^T = P^T (dP^T - D) in place of dP^T; d: the tile's D values as this thread's columns (FtBwdCols).
template <int kBlockM, class Cols>
__device__ __forceinline__ void ft_bwd_ds_t(float* dp, const float* p, const Cols& d) {
#pragma unroll
  for (int nt = 0; nt < kBlockM / 8; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) dp[nt * 4 + c] = p[nt * 4 + c] * (dp[nt * 4 + c] - d(nt, c & 1));
}

// This thread's two rows of dS^T (key rows `row` and row + 8 of the block, as the A fragments af hold them, in T)
// into the shared dS^T tile at smem_ds: kBlockN key rows x kBlockM queries in 64-query slabs of kSlabDs bytes,
// 128-byte swizzle (16-byte chunk nt % 8 of a row sits at chunk (nt % 8) ^ (row % 8), row % 8 = g). The tile is
// what dQ = dS K reads M-major (ft_bwd_issue_dq). The base is an opaque copy (ft_opaque_u32), so that the compiler
// keeps no per-chunk addresses live across the item. kChunk0: the fragments' first query column / 8 in the tile (a part of
// the tile's queries: the sweep's 32-query halves).
template <int kBlockM, int kSlabDs, int kChunk0 = 0>
__device__ __forceinline__ void ft_bwd_store_ds_t(unsigned smem_ds, const unsigned (*af)[4], int row, int g, int t4) {
  const unsigned ds_row = ft_opaque_u32(smem_ds + unsigned(row * 128 + 4 * t4));
#pragma unroll
  for (int i = 0; i < kBlockM / 8; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int nt = kChunk0 + i;
      const unsigned at = ds_row + unsigned((nt / 8) * kSlabDs + r * 1024 + (((nt % 8) ^ g) << 4));
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(af[i / 2][(i % 2) * 2 + r]) : "memory");
    }
}

// The same tile by stmatrix.x4 (one instruction per k16 step of the fragments: four 8 x 8 matrices, instead of 8
// st.shared.b32): af[ks][j] is matrix j, rows row_base + 8 (j % 2) .. + 7 of the warp's 16, chunk 2 ks + j / 2;
// lane l gives the address of row l % 8 of matrix l / 8. row_base: the warp's first key row of the block (a
// multiple of 16); lane: the thread's lane.
template <int kBlockM, int kSlabDs, int kChunk0 = 0>
__device__ __forceinline__ void ft_bwd_stsm_ds_t(unsigned smem_ds, const unsigned (*af)[4], int row_base, int lane) {
  const int q = lane % 8, j = lane / 8;
  const unsigned ds_row = ft_opaque_u32(smem_ds + unsigned((row_base + q + 8 * (j % 2)) * 128));  // as ft_bwd_store_ds_t's
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks) {
    const int nt = kChunk0 + 2 * ks + j / 2;
    const unsigned at = ds_row + unsigned((nt / 8) * kSlabDs + (((nt % 8) ^ q) << 4));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(af[ks][0]),
                 "r"(af[ks][1]), "r"(af[ks][2]), "r"(af[ks][3])
                 : "memory");
  }
}

// dS (not transposed: kBlockM query rows x the block's keys, the B operand of dQ^T = K^T dS^T read K-major) from the
// dS^T fragments by stmatrix.x4.trans, one per k16 step: the tile is 64-key slabs of kSlabDs = kBlockM x 128 bytes
// (128-byte swizzle: key chunk c of row r at chunk c ^ (r % 8)). Matrix j of step ks (af[ks][j]) holds keys
// key_base + 8 (j % 2) + 0..7 (key_base: the warp's first key of the block, a multiple of 16) against queries
// 16 ks + 8 (j / 2) + 0..7; transposed, lane l gives the address of query row 16 ks + 8 (j / 2) + l % 8 of matrix
// j = l / 8, whose 16 bytes are those eight keys.
template <int kBlockM, int kSlabDs>
__device__ __forceinline__ void ft_bwd_stsm_ds(unsigned smem_ds, const unsigned (*af)[4], int key_base, int lane) {
  const int q = lane % 8, j = lane / 8;
  const int chunk = (key_base % 64) / 8 + j % 2;
  const unsigned at0 = ft_opaque_u32(smem_ds + unsigned((key_base / 64) * kSlabDs + (8 * (j / 2) + q) * 128 + ((chunk ^ q) << 4)));
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(at0 + unsigned(ks * 2048)),
                 "r"(af[ks][0]), "r"(af[ks][1]), "r"(af[ks][2]), "r"(af[ks][3])
                 : "memory");
}

// dQ^T piece (64 head-dim columns from k_col, a 64-column slab of the K tile, x kBlockM query rows; fp32, kBlockM / 2
// per thread) = K^T dS^T over the block's kBlockN keys (the swapped dQ of 80-row items: M = 64 head-dim columns,
// N = the item's rows): A = K's slab read M-major, B = the dS tile (ft_bwd_stsm_ds) read K-major, its 64-key slabs
// kSlabDs apart. Issued and committed, not waited for. Element (nt, r, e) is head-dim column 16 (warp % 4) + g + 8 r
// of the slab, query row 8 nt + 2 t4 + e.
template <typename T, int kBlockM, int kBlockN, int kSlabDs, int kSlabKv>
__device__ __forceinline__ void ft_bwd_issue_dq_t(float* dq_t, unsigned smem_ds, unsigned k_col) {
  const unsigned long long da0 = ft_wgmma_desc(k_col, kSlabKv, 1024), db0 = ft_wgmma_desc(smem_ds, 16, 1024);
  ft_wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kBlockN / 16; ++ks)
    FtWgmma<T, kBlockM>::template ss<0, 1>(dq_t, ft_wgmma_desc_step(da0, ks * 2048),
                                           ft_wgmma_desc_step(db0, (ks / 4) * kSlabDs + (ks % 4) * 32), ks > 0);
  ft_wgmma_commit();
}

// dQ piece (64 query rows x kDqN columns, fp32, kDqN / 2 per thread) = dS K over the block's kBlockN keys:
// A = the dS^T tile's 64-query slab at ds_slab read M-major, B = the K tile's columns from k_col (a 64-column slab
// start) read N-major; K's slabs lie kSlabKv apart. Issued and committed, not waited for.
// The two base descriptors are stepped by ft_wgmma_desc_step (one add each): built per step, the compiler hoisted
// the 8 of K's out of the item loop, and the TMA kernel at head_dim 128 spilled them and reloaded them right after
// the dS^T barrier.
template <typename T, int kDqN, int kBlockN, int kSlabDs, int kSlabKv>
__device__ __forceinline__ void ft_bwd_issue_dq(float* dq, unsigned ds_slab, unsigned k_col) {
  const unsigned long long da0 = ft_wgmma_desc(ds_slab, kSlabDs, 1024), db0 = ft_wgmma_desc(k_col, kSlabKv, 1024);
  ft_wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kBlockN / 16; ++ks)
    FtWgmma<T, kDqN>::template ss<1, 1>(dq, ft_wgmma_desc_step(da0, ks * 2048), ft_wgmma_desc_step(db0, ks * 2048),
                                        ks > 0);
  ft_wgmma_commit();
}

// dK (times scale) and dV of this thread's two keys key0, key0 + 8 (those below n1), in T, at row offset
// `head` + key * k_ss of dK and dV (elements).
template <typename T, int kHeadDim>
__device__ __forceinline__ void ft_bwd_store_dkdv(T* dk, T* dv, const float* dk_acc, const float* dv_acc, long long head,
                                                  long long k_ss, int key0, int n1, float scale, int t4) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= n1) continue;
    const long long at = head + key * k_ss;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
      *reinterpret_cast<unsigned*>(dk + at + dt * 8 + 2 * t4) =
          FtMma<T>::pack(dk_acc[dt * 4 + 2 * r] * scale, dk_acc[dt * 4 + 2 * r + 1] * scale);
      *reinterpret_cast<unsigned*>(dv + at + dt * 8 + 2 * t4) = FtMma<T>::pack(dv_acc[dt * 4 + 2 * r], dv_acc[dt * 4 + 2 * r + 1]);
    }
  }
}

// One item's products up to dS^T, for a warpgroup's 64 keys against the kBlockM queries of the stage:
// S^T = K Q^T and dP^T = V dO^T issued together (ss; K and V rows from k_wg / v_wg, slabs kv_slab apart; the Q and
// dO tiles' slabs q_slab apart), P^T from LSE (ft_bwd_probs_t), dV += P^T dO (rs), dS^T = P^T (dP^T - D). LSE and
// D come from lse_s / d_s (FtBwdCols; with kColsAhead read ahead of the waits on S^T and dP^T at block_m 64).
// kSeparateDs off: dV completes, and af then holds dS^T as the T A fragments of dK += dS^T Q (af_ds unused).
// kSeparateDs on: af_ds takes dS^T and af keeps P^T, so dV is left running (its wgmma group is the caller's to
// wait for, with dv_acc fenced after it); kBlockM / 4 more registers.
// On return s holds P^T and dp dS^T (fp32). kSeparateDs at block_m 80 and 128: dS^T is computed from the fp32 P^T before
// either is packed and dV is issued after both (with dV issued first, its fragments, the fp32 P^T and dP^T did not fit
// the registers beside dK and dV: ptxas serialized every wgmma, C7512). Session 44 also took dS^T from P^T's packed
// fragments, dV issued first: ~5 % more instructions (the unpacking), and this order ran at 0.994 of it (one H200,
// three rounds: at par), with dS^T's arithmetic as at 64 rows. At 128 rows (head_dim 64, session 49) the 64-row
// order (P^T packed and dV issued before dS^T) did not fit either (C7511).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, bool kSeparateDs = false, bool kColsAhead = false,
          bool kLseLog2 = false, bool kCausal, bool kWindow>
__device__ __forceinline__ void ft_bwd_item_to_ds(float (&s)[kBlockM / 2], float (&dp)[kBlockM / 2],
                                                  unsigned (&af)[kBlockM / 16][4], unsigned (&af_ds)[kBlockM / 16][4], float* dv_acc, unsigned k_wg,
                                                  unsigned v_wg, unsigned kv_slab, unsigned smem_q, unsigned smem_do,
                                                  unsigned q_slab, const FtAttnMask<kCausal, kWindow>& mask, int seq_q,
                                                  int m0, int n0, int key0, const float* lse_s, const float* d_s,
                                                  float scale_log2, int t4) {
  auto pack_a = [&](const float* x) {
    ft_pack_a_tile<T, kBlockM / 8>(af, *reinterpret_cast<const float(*)[kBlockM / 8][4]>(x));
  };
  // kColsAhead: LSE and D ahead of the waits at block_m 64 (16 registers each); at 128 (32 each) the registers are
  // not there (the cp.async fused pass at head_dim 64 spilled 124 bytes with them, and the cp.async dK / dV kernel
  // at head_dim 128, 255 registers without setmaxnreg, 8 bytes with them at block_m 64). LSE is read before the
  // products are issued: read after them, its shared loads queued behind the wgmma and the first exp2 waited on them
  // (ncu of mma 91 at causal d128, docs/NOTES.md session 40: 5.0 % of the warp samples, short scoreboard; 1.5 % now;
  // -0.7 to -2.5 % on the dense shapes). D stays after P^T's packing: read before the exp2s, it delayed them (+2-3 %).
  FtBwdCols<kBlockM, kColsAhead && kBlockM <= 64> cols;
  cols.load(lse_s, t4);
  ft_wgmma_rows_by_rows<T, kBlockM, kHeadDim / 16>(s, k_wg, kv_slab, smem_q, q_slab);    // S^T
  ft_wgmma_rows_by_rows<T, kBlockM, kHeadDim / 16>(dp, v_wg, kv_slab, smem_do, q_slab);  // dP^T, under P^T
  ft_wgmma_wait<1>();
  ft_fence_regs<kBlockM / 2>(s);
  ft_bwd_probs_t<kBlockM, kBlockN, kLseLog2>(s, mask, seq_q, m0, n0, key0, cols, scale_log2, t4);
  if constexpr ((kBlockM == 80 || kBlockM == 128) && kSeparateDs) {
    cols.load(d_s, t4);
    ft_wgmma_wait<0>();  // dP^T
    ft_fence_regs<kBlockM / 2>(dp);
    ft_bwd_ds_t<kBlockM>(dp, s, cols);
    pack_a(s);
    ft_pack_a_tile<T, kBlockM / 8>(af_ds, *reinterpret_cast<const float(*)[kBlockM / 8][4]>(dp));
    ft_wgmma_regs_by_tile<T, kHeadDim, kBlockM / 16>(dv_acc, af, smem_do, q_slab);  // dV += P^T dO
    return;
  }
  pack_a(s);
  cols.load(d_s, t4);
  ft_wgmma_wait<0>();  // dP^T
  ft_fence_regs<kBlockM / 2>(dp);
  ft_wgmma_regs_by_tile<T, kHeadDim, kBlockM / 16>(dv_acc, af, smem_do, q_slab);  // dV += P^T dO
  ft_bwd_ds_t<kBlockM>(dp, s, cols);
  if constexpr (kSeparateDs) {
    ft_pack_a_tile<T, kBlockM / 8>(af_ds, *reinterpret_cast<const float(*)[kBlockM / 8][4]>(dp));  // dV still running
  } else {
    ft_wgmma_wait<0>();  // dV: the P^T fragments may be overwritten
    ft_fence_regs<kHeadDim / 2>(dv_acc);
    pack_a(dp);
  }
}

// Deterministic dQ: how many key blocks of kBlockN keys before block n_block (of seq_k keys) visit query tile t
// (kBlockM rows): the blocks whose adds into tile t's rows come before this block's. A block visits the tiles that
// cover its FtAttnQueryRange, as the dK / dV loops walk them. Without a window every earlier block does (no mask, or
// causal: an earlier block's first visible query is no later, and every block sees up to the last query): n_block.
// With one, every lane of the warp takes part (one block per lane per round, counted by ballot).
template <int kBlockM, int kBlockN, bool kCausal, bool kWindow>
__device__ __forceinline__ int ft_bwd_blocks_before(const FtAttnMask<kCausal, kWindow>& mask, int seq_k, int n_block, int t) {
  if constexpr (!kWindow) return n_block;
  const int lane = threadIdx.x % 32;
  int count = 0;
  for (int base = 0; base < n_block; base += 32) {
    const int nb = base + lane;
    bool visits = false;
    if (nb < n_block) {
      const FtAttnQueryRange<kCausal, kWindow> r(mask, nb * kBlockN, min(nb * kBlockN + kBlockN, seq_k));
      visits = r.hi > r.lo && r.lo / kBlockM <= t && t * kBlockM < r.hi;
    }
    count += __popc(__ballot_sync(0xffffffffu, visits));
  }
  return count;
}

// The fused backward's convert launch over n_quads quads (four fp32 accumulator floats) of one (head, batch) slice:
// the block's threads take kQuads consecutive runs of blockDim.x quads (quad q = (blockIdx.x kQuads + j) blockDim.x
// + threadIdx.x, coalesced per j), load all of a thread's quads (load(q) -> float4), then store them (store(q, x)),
// so that kQuads loads a thread are in flight at once.
// A value of load may be any copyable type (a float4, or FtFloat8: two quads).
struct FtFloat8 {
  float4 a, b;
};
template <int kQuads, class Load, class Store>
__device__ __forceinline__ void ft_bwd_convert_quads(long long n_quads, Load&& load, Store&& store) {
  const long long q0 = static_cast<long long>(blockIdx.x) * kQuads * blockDim.x + threadIdx.x;
  decltype(load(0LL)) x[kQuads];
#pragma unroll
  for (int j = 0; j < kQuads; ++j) {
    const long long q = q0 + static_cast<long long>(j) * blockDim.x;
    if (q < n_quads) x[j] = load(q);
  }
#pragma unroll
  for (int j = 0; j < kQuads; ++j) {
    const long long q = q0 + static_cast<long long>(j) * blockDim.x;
    if (q < n_quads) store(q, x[j]);
  }
}
