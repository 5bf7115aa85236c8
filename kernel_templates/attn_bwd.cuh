// kernel_templates/attn_bwd.cuh: attention backward, FlashAttention-2 style, on mma.sync: the kernels of the
// attn_bwd_dkdv (mma = 80), attn_bwd_dq and attn_bwd_dq_delta families, each tuned on its own. The backward's
// stages (the rows kernels are attn_bwd_rows.cuh):
//   preprocess  D_i = rowsum(dO_i * O_i), fp32
//   dkdv        one block per (block_n keys, kv head, batch): loops over every query head of the GQA group
//               and every query tile that can see its keys (no atomics), recomputing P = exp(S - LSE);
//               the key tiles holding sink tokens (seen by every query) are split, see below
//   dq          one block per (block_m queries, query head, batch): loops over the key tiles the rows see
//   dsink       d s_h = -sum_{b, i} exp(s_h - LSE_bhi) D_bhi, one block per head, fixed order (deterministic)
// fp16 / bf16 on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async pipelines of kStages tiles) with fp32
// accumulation; dQ, dK and dV are written in the problem dtype (fp32, exact and TF32: attn_bwd_f32.cuh).
// The building blocks (loaders, tile products, mask and tile-skipping rules, P from LSE) are the device
// library's (ft/). dO shares Q's strides; dK and dV share K's; LSE and D are (batch, heads_q, seq_q) fp32.
#pragma once

#include "attn_params.cuh"
#include "ft/copy.cuh"
#include "ft/items.cuh"
#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/softmax.cuh"

// ---------------------------------------------------------------------------------------------
// dK, dV: one block per (block_n keys, kv head, batch); each warp owns kNTiles (1 or 2) tiles of 16 keys
// and works on S^T = K Q^T (keys as MMA rows), so P^T and dS^T are A operands straight from registers:
//   P^T = exp(S^T scale - LSE), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q.
// Work items (query head of the group, query tile) stream through a cp.async pipeline of kStages stages
// (Q tile, dO tile, LSE, D).
//
// The sink-token hot spot (window only): a key tile holding sink tokens is seen by every query, so its
// block alone would loop over all group x seq_q / block_m items while a band tile sees a few. With
// sink_split S > 1 the grid gets S extra blocks per such tile. The tile's own block takes the query
// tiles up to the end of the band of its non-sink keys, [t_first, t_mid); the extra blocks take the items
// of the query tiles past it, [t_mid, t_end) x the group's heads, in S contiguous chunks. Those queries
// see only the tile's sink keys, so the extra blocks' partial dK, dV are zero on every other key row and
// only the sink rows are kept: each block writes its fp32 partial of the sink rows to its own slot of
// the workspace (slot 0: the tile's own block, 1 + c: chunk c), and a second launch of the same kernel
// (reduce = 1) adds the S + 1 slots in slot order and writes dK, dV of the sink rows. No atomics, no
// counters: the same bits on every run. Workspace: (batch, heads_kv, S + 1, sink rows, head_dim) fp32,
// for dK then for dV; sink rows = min(sink_tokens, seq_k).
//
// The item split (item_split I > 1, any mask; the host refuses it beside an active sink_split): for grids of few
// key tiles x kv heads (MQA: GStar stage 8 has 64), every key tile gets I blocks, block x = tile * I + c, and
// block c takes the c-th of I contiguous chunks of the tile's items (head-major: a chunk is mostly whole heads of
// the group). Each block writes its fp32 partial dK, dV of the whole tile (zeros for an empty chunk) to slot c,
// and the reduce launch adds the I slots in slot order: the same bits on every run. Workspace: (batch,
// heads_kv, I, seq_k, head_dim) fp32, for dK then for dV.
// The split workspace of (batch b, kv head h_kv): `slots` slots of slot_elems floats (sink rows, or with the item
// split every key row, x kHeadDim) for dK from `head`, dV's `dv` floats after them. Built where used, not held
// across the item loop (its registers spill the head_dim 128 kernels).
template <int kHeadDim, bool kWindow>
struct FtDkdvSlots {
  int slots;
  long long slot_elems, dv;
  float* head;
  template <typename T>
  __device__ __forceinline__ FtDkdvSlots(const FtAttnBwdParams<T>& p, int b, int h_kv) {
    const bool items = p.item_split > 1;
    const int split = kWindow ? p.sink_split : 1;
    slots = items ? p.item_split : split + 1;
    slot_elems = static_cast<long long>(items ? p.seq_k : (kWindow && split > 1 ? min(p.sink_tokens, p.seq_k) : 0)) * kHeadDim;
    dv = static_cast<long long>(gridDim.z) * p.heads_kv * slots * slot_elems;
    head = p.ws + (static_cast<long long>(b) * p.heads_kv + h_kv) * slots * slot_elems;
  }
};

// kMinBlocks: blocks per SM the compiler must fit (__launch_bounds__), which caps its registers.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kCausal, bool kWindow,
          int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    attn_bwd_dkdv_kernel(const __grid_constant__ FtAttnBwdParams<T> p) {
  static_assert(kHeadDim % 16 == 0 && kBlockM % 16 == 0, "tiles are whole 16 x 16 MMA steps");
  static_assert(kBlockN % (16 * kWarps) == 0 && kBlockN / (16 * kWarps) <= 2, "a warp owns 16 or 32 keys");
  enum : int {
    kThreads = kWarps * 32,
    kNTiles = kBlockN / (16 * kWarps),  // 16-key MMA tiles per warp
    kQCols = kBlockM / 8,               // 8-query accumulator tiles of S^T
    kDTiles = kHeadDim / 8,
    kTileBytes = kBlockM * kHeadDim * 2,
    kStageBytes = 2 * kTileBytes + 2 * kBlockM * 4,  // Q, dO, LSE, D
  };
  static_assert(kStageBytes == FtAttnSmem::dkdv_stage(kHeadDim, kBlockM) &&
                    FtAttnSmem::dkdv_mma(kHeadDim, kBlockM, kBlockN, kStages) == 4LL * kBlockN * kHeadDim + 1LL * kStages * kStageBytes,
                "the host's shared memory size is this layout's");
  const float kLog2e = 1.4426950408889634f;
  constexpr FtLoad kLoad = FtLoadFor<kHeadDim, kThreads, kMinBlocks>::value;
  const int split = kWindow ? p.sink_split : 1;
  const int item_split = p.item_split;
  const bool items = item_split > 1;
  const int sink_rows = kWindow && split > 1 && !items ? min(p.sink_tokens, p.seq_k) : 0;
  const int h_kv = blockIdx.y, b = blockIdx.z;

  if (p.reduce) {  // dK, dV of the split rows: the partial slots added in slot order
    const FtDkdvSlots<kHeadDim, kWindow> ws(p, b, h_kv);
    for (long long e = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x; e < ws.slot_elems;
         e += static_cast<long long>(gridDim.x) * kThreads) {
      float sk = 0.f, sv = 0.f;
      for (int s = 0; s < ws.slots; ++s) {
        sk += ws.head[s * ws.slot_elems + e];
        sv += ws.head[ws.dv + s * ws.slot_elems + e];
      }
      const long long at = b * p.k_sb + h_kv * p.k_sh + (e / kHeadDim) * p.k_ss + e % kHeadDim;
      p.dk[at] = from_float<T>(sk * p.scale);
      p.dv[at] = from_float<T>(sv);
    }
    return;
  }

  extern __shared__ __align__(128) unsigned char ft_smem[];
  const unsigned smem_k = ft_smem_u32(ft_smem);
  const unsigned smem_v = smem_k + kBlockN * kHeadDim * 2;
  const unsigned smem_stages = smem_v + kBlockN * kHeadDim * 2;
  const float* stage_f = reinterpret_cast<const float*>(ft_smem + 2 * kBlockN * kHeadDim * 2);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int key_tiles = (p.seq_k + kBlockN - 1) / kBlockN;
  int n_block = blockIdx.x, chunk = -1;  // chunk >= 0: an extra block of a split sink tile, or the item split's chunk
  if (items) {
    n_block = blockIdx.x / item_split;
    chunk = blockIdx.x % item_split;
  } else if (n_block >= key_tiles) {
    n_block = (blockIdx.x - key_tiles) / split;
    chunk = (blockIdx.x - key_tiles) % split;
  }
  const int group = p.heads_q / p.heads_kv;
  const int n0 = n_block * kBlockN;
  const int n1 = min(n0 + kBlockN, p.seq_k);
  const int warp_row0 = warp * kNTiles * 16;
  const bool split_tile = n0 < sink_rows;

  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const FtAttnQueryRange<kCausal, kWindow> rows(mask, n0, n1);
  int t_first = rows.lo / kBlockM;  // this block's query tiles [t_first, t_first + t_count) ...
  int t_count = rows.hi > rows.lo ? (rows.hi + kBlockM - 1) / kBlockM - t_first : 0;
  int item0 = 0, n_items = group * t_count;  // ... and its items [item0, item0 + n_items) of them
  if (split_tile) {
    // t_mid: the end of the band of the tile's non-sink keys (none when all its keys are sinks).
    const int band_hi = n1 <= p.sink_tokens ? 0 : min(p.seq_q, max(0, n1 - 1 - mask.offset + p.window));
    const int t_end = t_first + t_count;
    const int t_mid = min(t_end, max(t_first, (band_hi + kBlockM - 1) / kBlockM));
    if (chunk < 0) {
      t_count = t_mid - t_first;
      n_items = group * t_count;
    } else {
      t_first = t_mid, t_count = t_end - t_mid;
      const int total = group * t_count;
      item0 = static_cast<int>(static_cast<long long>(total) * chunk / split);
      n_items = static_cast<int>(static_cast<long long>(total) * (chunk + 1) / split) - item0;
    }
  } else if (items) {
    item0 = static_cast<int>(static_cast<long long>(n_items) * chunk / item_split);
    n_items = static_cast<int>(static_cast<long long>(n_items) * (chunk + 1) / item_split) - item0;
  }

  FtItemCursor load_at(item0, t_count), compute_at(item0, t_count);  // the next item to load, to compute
  auto load_item = [&](int i) {  // item i of this block (the next in order) into stage i % kStages
    const int h = h_kv * group + load_at.head;
    const int m0 = (t_first + load_at.tile) * kBlockM;
    load_at.next();
    const unsigned dst = smem_stages + unsigned((i % kStages) * kStageBytes);
    const long long off = b * p.q_sb + h * p.q_sh + m0 * p.q_ss;
    ft_load_tile<kBlockM, kHeadDim, kThreads, T, kLoad>(dst, p.q + off, p.q_ss, p.seq_q - m0);
    ft_load_tile<kBlockM, kHeadDim, kThreads, T, kLoad>(dst + kTileBytes, p.dout + off, p.q_ss, p.seq_q - m0);
    const long long row0 = (static_cast<long long>(b) * p.heads_q + h) * p.seq_q + m0;
    ft_load_lse_delta<kBlockM, kThreads>(dst + 2 * kTileBytes, p.lse + row0, p.delta + row0, p.seq_q - m0);
  };

  const long long kv_off = b * p.k_sb + h_kv * p.k_sh + n0 * p.k_ss;
  ft_load_tile<kBlockN, kHeadDim, kThreads, T, kLoad>(smem_k, p.k + kv_off, p.k_ss, p.seq_k - n0);
  ft_load_tile<kBlockN, kHeadDim, kThreads, T, kLoad>(smem_v, p.v + kv_off, p.k_ss, p.seq_k - n0);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_items) load_item(i);
    ft_cp_async_commit();
  }

  float dk_acc[kNTiles][kDTiles][4], dv_acc[kNTiles][kDTiles][4];
  ft_zero(dk_acc);
  ft_zero(dv_acc);

  for (int i = 0; i < n_items; ++i) {
    if (i + kStages - 1 < n_items) load_item(i + kStages - 1);
    ft_cp_async_commit();
    ft_cp_async_wait<kStages - 1>();
    __syncthreads();
    const int m0 = (t_first + compute_at.tile) * kBlockM;
    compute_at.next();
    const unsigned smem_q = smem_stages + unsigned((i % kStages) * kStageBytes);
    const unsigned smem_do = smem_q + kTileBytes;
    const float* lse_s = stage_f + (i % kStages) * (kStageBytes / 4) + 2 * kTileBytes / 4;
    const float* d_s = lse_s + kBlockM;

    // S^T = K Q^T (raw), then P^T = exp2(S^T scale log2 e - LSE log2 e), 0 where not visible.
    float s[kNTiles][kQCols][4];
    ft_zero(s);
    ft_mma_rows_by_rows<T, kHeadDim, kNTiles, kQCols>(s, smem_k, warp_row0, smem_q, 0);
    const bool need_mask = m0 + kBlockM > p.seq_q || ft_attn_tile_needs_mask(mask, m0, m0 + kBlockM, n0, kBlockN);
    const float scale_log2 = p.scale * kLog2e;
    ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int qc = 0; qc < kQCols; ++qc)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int col = qc * 8 + 2 * t4 + (c & 1);
            const int key = n0 + warp_row0 + nt * 16 + g + 8 * (c >> 1);
            const float prob = ft_prob_from_lse<false>(s[nt][qc][c], scale_log2, lse_s[col] * kLog2e);
            const bool vis = !kMasked || (m0 + col < p.seq_q && mask.visible(m0 + col, key));
            s[nt][qc][c] = vis ? prob : 0.f;
          }
    });
    unsigned pf[kNTiles][kQCols / 2][4];
    ft_pack_a<T>(pf, s);
    ft_mma_regs_by_tile<T, kHeadDim, kNTiles, kQCols / 2>(dv_acc, pf, smem_do, 0);

    // dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q.
    float dp[kNTiles][kQCols][4];
    ft_zero(dp);
    ft_mma_rows_by_rows<T, kHeadDim, kNTiles, kQCols>(dp, smem_v, warp_row0, smem_do, 0);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int qc = 0; qc < kQCols; ++qc)
#pragma unroll
        for (int c = 0; c < 4; ++c) dp[nt][qc][c] = s[nt][qc][c] * (dp[nt][qc][c] - d_s[qc * 8 + 2 * t4 + (c & 1)]);
    ft_pack_a<T>(pf, dp);
    ft_mma_regs_by_tile<T, kHeadDim, kNTiles, kQCols / 2>(dk_acc, pf, smem_q, 0);
    __syncthreads();  // stage i % kStages is refilled by the next iteration's load
  }
  ft_cp_async_commit();
  ft_cp_async_wait<0>();

  if (p.item_split > 1) {  // the whole tile's fp32 partial into this chunk's slot; the reduce launch writes dK, dV
    const FtDkdvSlots<kHeadDim, kWindow> ws(p, b, h_kv);
    float* slot = ws.head + chunk * ws.slot_elems + static_cast<long long>(n0) * kHeadDim;
    ft_store_rows_f32(slot, warp_row0, n1 - n0, dk_acc);
    ft_store_rows_f32(slot + ws.dv, warp_row0, n1 - n0, dv_acc);
    return;
  }
  const long long out_off = b * p.k_sb + h_kv * p.k_sh + n0 * p.k_ss;
  if (split_tile) {  // sink rows: the fp32 partial into this block's slot; the tile's own block writes the rest
    const FtDkdvSlots<kHeadDim, kWindow> ws(p, b, h_kv);
    float* slot = ws.head + (chunk + 1) * ws.slot_elems + static_cast<long long>(n0) * kHeadDim;
    ft_store_rows_f32(slot, warp_row0, sink_rows - n0, dk_acc);
    ft_store_rows_f32(slot + ws.dv, warp_row0, sink_rows - n0, dv_acc);
    if (chunk >= 0) return;
  }
  const int row_begin = max(0, sink_rows - n0);
  ft_store_rows<T>(p.dk + out_off, p.k_ss, warp_row0, n1 - n0, dk_acc, p.scale, row_begin);
  ft_store_rows<T>(p.dv + out_off, p.k_ss, warp_row0, n1 - n0, dv_acc, 1.f, row_begin);
}

// ---------------------------------------------------------------------------------------------
// dQ: one block per (block_m queries, query head, batch), as the forward: each warp owns kMTiles (1 or 2)
// tiles of 16 query rows; the key tiles the rows can see stream through kStages (K, V) buffers:
//   P = exp(S scale - LSE), dP = dO V^T, dS = P (dP - D), dQ += dS K;  dQ *= scale at the end.
// kMinBlocks: blocks per SM the compiler must fit (__launch_bounds__), which caps its registers.
// kPackHeads: query heads of one GQA group per block, as in the forward's wgmma kernel: block row r is query
// m0 + r % kRowsPerHead of head h0 + r / kRowsPerHead (kRowsPerHead = kBlockM / kPackHeads), so each K/V
// tile loaded serves kPackHeads heads and a windowed band stays narrow.
// kInlineDelta (attn_bwd_dq_delta_kernel): the preprocess fused in. The kernel computes D = rowsum(dO * O) of
// its rows itself (from `o`, which shares Q's strides) and writes it to `delta` for the stages after it
// (attn_bwd_dkdv, attn_bwd_dsink); otherwise (attn_bwd_dq_kernel) it reads `delta` and `o` is null.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kCausal, bool kWindow,
          int kMinBlocks, int kPackHeads, bool kInlineDelta>
__device__ __forceinline__ void attn_bwd_dq_body(const FtAttnBwdParams<T> p) {
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0, "tiles are whole 16 x 16 MMA steps");
  static_assert(kBlockM % (16 * kWarps) == 0 && kBlockM / (16 * kWarps) <= 2, "a warp owns 16 or 32 query rows");
  static_assert(kPackHeads >= 1 && kBlockM % kPackHeads == 0, "block rows split evenly over the heads");
  enum : int {
    kThreads = kWarps * 32,
    kMTiles = kBlockM / (16 * kWarps),
    kNTiles = kBlockN / 8,
    kDTiles = kHeadDim / 8,
    kTileBytes = kBlockN * kHeadDim * 2,
    kRowsPerHead = kBlockM / kPackHeads,
  };
  const float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) unsigned char ft_smem[];
  enum : int { kRowBytes = kBlockM * kHeadDim * 2 };  // one Q, dO or O tile
  constexpr FtLoad kLoad = FtLoadFor<kHeadDim, kThreads, kMinBlocks>::value;
  const unsigned smem_q = ft_smem_u32(ft_smem);
  const unsigned smem_do = smem_q + kRowBytes;
  const unsigned smem_o = smem_do + kRowBytes;  // inline D only
  const unsigned smem_kv = smem_q + unsigned(FtAttnSmem::dq_kv(kHeadDim, kBlockM, kInlineDelta));  // stage s: K at + 2s * kTileBytes, V after it
  static_assert(FtAttnSmem::dq_kv(kHeadDim, kBlockM, kInlineDelta) == (kInlineDelta ? 3 : 2) * kRowBytes &&
                    FtAttnSmem::dq_mma(kHeadDim, kBlockM, kBlockN, kStages, kInlineDelta) ==
                        FtAttnSmem::dq_kv(kHeadDim, kBlockM, kInlineDelta) + 2LL * kStages * kTileBytes,
                "the host's shared memory size is this layout's");

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest (causal: last) query blocks first
  const int h0 = blockIdx.y * kPackHeads, b = blockIdx.z;  // the block's first query head
  const int h_kv = h0 / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kRowsPerHead;  // the block's queries [m0, m1), the same for each of its heads
  const int m1 = min(m0 + kRowsPerHead, p.seq_q);
  const int warp_row0 = warp * kMTiles * 16;
  // Block row lr: query row and query head.
  auto query_of = [&](int lr) { return m0 + lr % kRowsPerHead; };
  auto head_of = [&](int lr) { return h0 + lr / kRowsPerHead; };
  auto row_off = [&](int lr) { return b * p.q_sb + head_of(lr) * p.q_sh + query_of(lr) * p.q_ss; };

  const long long q_off = b * p.q_sb + h0 * p.q_sh + m0 * p.q_ss;
  const T* k_head = p.k + b * p.k_sb + h_kv * p.k_sh;
  const T* v_head = p.v + b * p.k_sb + h_kv * p.k_sh;
  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const FtAttnTiles<kCausal, kWindow> tiles(mask, m0, m1, kBlockN);
  const int n_tiles = tiles.count();

  auto load_kv = [&](int i) {
    const int n0 = tiles.tile(i) * kBlockN;
    const unsigned dst = smem_kv + unsigned((i % kStages) * 2 * kTileBytes);
    ft_load_tile<kBlockN, kHeadDim, kThreads, T, kLoad>(dst, k_head + n0 * p.k_ss, p.k_ss, p.seq_k - n0);
    ft_load_tile<kBlockN, kHeadDim, kThreads, T, kLoad>(dst + kTileBytes, v_head + n0 * p.k_ss, p.k_ss, p.seq_k - n0);
  };
  // Block row lr's place in LSE and D (rows past seq_q clamped to the last row: read, never written).
  auto stat_at = [&](int lr) {
    return (static_cast<long long>(b) * p.heads_q + head_of(lr)) * p.seq_q + min(query_of(lr), p.seq_q - 1);
  };
  if constexpr (kPackHeads == 1) {
    ft_load_tile<kBlockM, kHeadDim, kThreads, T, kLoad>(smem_q, p.q + q_off, p.q_ss, m1 - m0);
    ft_load_tile<kBlockM, kHeadDim, kThreads, T, kLoad>(smem_do, p.dout + q_off, p.q_ss, m1 - m0);
    if constexpr (kInlineDelta) ft_load_tile<kBlockM, kHeadDim, kThreads, T, kLoad>(smem_o, p.o + q_off, p.q_ss, m1 - m0);
  } else {
    ft_load_rows<kBlockM, kHeadDim, kThreads, T>(
        smem_q, [&](int r) -> const T* { return query_of(r) < p.seq_q ? p.q + row_off(r) : nullptr; });
    ft_load_rows<kBlockM, kHeadDim, kThreads, T>(
        smem_do, [&](int r) -> const T* { return query_of(r) < p.seq_q ? p.dout + row_off(r) : nullptr; });
    if constexpr (kInlineDelta)
      ft_load_rows<kBlockM, kHeadDim, kThreads, T>(
          smem_o, [&](int r) -> const T* { return query_of(r) < p.seq_q ? p.o + row_off(r) : nullptr; });
  }
  // Inline D: the O tile lands with Q and dO in a group of its own (the oldest, so the first tile's wait
  // covers it); D is summed from shared memory there, where the block waits anyway.
  if constexpr (kInlineDelta) ft_cp_async_commit();
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i);
    ft_cp_async_commit();
  }

  // LSE (log2 units) and D of the two rows a lane owns per 16-row tile.
  float lse2[kMTiles][2], d_row[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const long long at = stat_at(warp_row0 + mt * 16 + g + 8 * r);
      lse2[mt][r] = p.lse[at] * kLog2e;
      if constexpr (!kInlineDelta) d_row[mt][r] = p.delta[at];
    }
  // Inline D from the O and dO tiles once they have landed: the row's four lanes (t4 = 0..3) each add
  // dO * O over their quarter of the head dim (16 or 8 bytes at a time), then combine their sums; the
  // lane t4 = 0 writes D of its rows below seq_q. (Read from global memory before the loop instead, the
  // reads' latency stood in every block's way: 13% of the stall samples.)
  auto inline_delta = [&] {
    enum : int { kQuarter = kHeadDim / 4, kVec = kQuarter < 8 ? kQuarter : 8 };
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int lr = warp_row0 + mt * 16 + g + 8 * r;
        float sum = 0.f;
#pragma unroll
        for (int e0 = 0; e0 < kQuarter; e0 += kVec) {
          const int col = t4 * kQuarter + e0;
          const unsigned off = FtSwizzle<kHeadDim>::offset(lr, col / 8) + (col % 8) * 2;
          const FtVec<T, kVec> x = load_vec<T, kVec>(reinterpret_cast<const T*>(ft_smem + 2 * kRowBytes + off));
          const FtVec<T, kVec> y = load_vec<T, kVec>(reinterpret_cast<const T*>(ft_smem + kRowBytes + off));
#pragma unroll
          for (int e = 0; e < kVec; ++e) sum = fmaf(to_float(x.v[e]), to_float(y.v[e]), sum);
        }
        d_row[mt][r] = warp_sum<4>(sum);
        if (t4 == 0 && query_of(lr) < p.seq_q) p.delta[stat_at(lr)] = d_row[mt][r];
      }
  };
  const float scale_log2 = p.scale * kLog2e;
  float dq_acc[kMTiles][kDTiles][4];
  ft_zero(dq_acc);

  for (int i = 0; i < n_tiles; ++i) {
    if (i + kStages - 1 < n_tiles) load_kv(i + kStages - 1);
    ft_cp_async_commit();
    ft_cp_async_wait<kStages - 1>();
    __syncthreads();
    if constexpr (kInlineDelta)
      if (i == 0) inline_delta();
    const unsigned smem_k = smem_kv + unsigned((i % kStages) * 2 * kTileBytes);
    const unsigned smem_v = smem_k + kTileBytes;
    const int n0 = tiles.tile(i) * kBlockN;

    float s[kMTiles][kNTiles][4], dp[kMTiles][kNTiles][4];
    ft_zero(s);
    ft_zero(dp);
    ft_mma_rows_by_rows<T, kHeadDim, kMTiles, kNTiles>(s, smem_q, warp_row0, smem_k, 0);
    ft_mma_rows_by_rows<T, kHeadDim, kMTiles, kNTiles>(dp, smem_do, warp_row0, smem_v, 0);
    const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);
    ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int r = c >> 1;
            const int row = query_of(warp_row0 + mt * 16 + g + 8 * r);
            const int key = n0 + nt * 8 + 2 * t4 + (c & 1);
            const float prob = ft_prob_from_lse<false>(s[mt][nt][c], scale_log2, lse2[mt][r]);
            const bool vis = !kMasked || mask.visible(row, key);
            dp[mt][nt][c] = vis ? prob * (dp[mt][nt][c] - d_row[mt][r]) : 0.f;
          }
    });
    unsigned dsf[kMTiles][kNTiles / 2][4];
    ft_pack_a<T>(dsf, dp);
    ft_mma_regs_by_tile<T, kHeadDim, kMTiles, kNTiles / 2>(dq_acc, dsf, smem_k, 0);
    __syncthreads();
  }
  ft_cp_async_commit();
  ft_cp_async_wait<0>();
  if constexpr (kInlineDelta) {
    if (n_tiles == 0) {  // rows that see no key: D is still theirs to write
      __syncthreads();
      inline_delta();
    }
  }
  if constexpr (kPackHeads == 1)
    ft_store_rows<T>(p.dq + q_off, p.q_ss, warp_row0, m1 - m0, dq_acc, p.scale);
  else
    ft_store_rows_at<T>([&](int lr) -> T* { return query_of(lr) < p.seq_q ? p.dq + row_off(lr) : nullptr; }, warp_row0,
                        dq_acc, p.scale);
}

// The attn_bwd_dq family's kernel: D read from `delta` (attn_bwd_preprocess's).
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kCausal, bool kWindow,
          int kMinBlocks, int kPackHeads = 1>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    attn_bwd_dq_kernel(const __grid_constant__ FtAttnBwdParams<T> p) {
  attn_bwd_dq_body<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kCausal, kWindow, kMinBlocks, kPackHeads, false>(p);
}

// The attn_bwd_dq_delta family's kernel: D = rowsum(dO * O) computed from `o` (Q's strides) and written to
// `delta` for the stages after it.
template <typename T, int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kCausal, bool kWindow,
          int kMinBlocks, int kPackHeads = 1>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    attn_bwd_dq_delta_kernel(const __grid_constant__ FtAttnBwdParams<T> p) {
  attn_bwd_dq_body<T, kHeadDim, kBlockM, kBlockN, kWarps, kStages, kCausal, kWindow, kMinBlocks, kPackHeads, true>(p);
}


