// kernel_templates/attn_fwd_sm90.cuh: the Hopper (sm_90a) kernel of the attn_fwd family, on warpgroup MMA.
//
// fp16 / bf16: attn_fwd_wgmma_kernel. One block per (64 x kWarpgroups query rows, query head, batch); each
// warpgroup (4 warps) owns 64 query rows. K/V tiles of kBlockN (16, 32, 64 or 128) keys stream through a
// cp.async pipeline of kStages shared-memory buffers, stored in the 128-byte-swizzled layout wgmma reads (per 64 columns a
// [rows][64] slab, 16-byte chunk c of row r at c ^ (r % 8)). S = Q K^T is one wgmma chain with Q and K read
// from shared memory; P stays in registers and is the A operand of O += P V, V read N-major. Masking, tile
// skipping and the online softmax are the device library's (ft/mask.cuh, ft/softmax.cuh). Chosen by the
// tunable mma = 90; mma = 80 is the mma.sync kernel, which runs on every GPU since sm_80.
#pragma once

#include "attn_params.cuh"
#include "ft/copy.cuh"
#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/softmax.cuh"
#include "ft/wgmma.cuh"

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
    kTileBytes = kBlockN * kHeadDim * 2,
    kSlabK = kBlockN * 128,             // bytes between 64-column slabs of a K or V tile
  };
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

  extern __shared__ unsigned char ft_smem_sm90[];
  const unsigned smem_q = (ft_smem_u32(ft_smem_sm90) + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  const unsigned smem_kv = smem_q + unsigned(FtAttnSmem::fwd_kv(kHeadDim, kBlockM));  // stage s: K at + 2s * kTileBytes, V after it
  static_assert(FtAttnSmem::fwd_wgmma(kHeadDim, kBlockM, kBlockN, kStages) ==
                    1024 + FtAttnSmem::fwd_kv(kHeadDim, kBlockM) + 2LL * kStages * kTileBytes,
                "the host's shared memory size is this layout's (1 KiB: the alignment of smem_q)");

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  const int g = lane / 4, t4 = lane % 4;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest (causal: last) query blocks first
  const int h0 = blockIdx.y * kPackHeads, b = blockIdx.z;  // first of the block's query heads
  const int h_kv = int(unsigned(h0) / (unsigned(p.heads_q) / unsigned(p.heads_kv)));  // unsigned: a shorter division
  const int m0 = m_block * kRowsPerHead;  // the block's queries [m0, m1), the same for each of its heads
  const int m1 = min(m0 + kRowsPerHead, p.seq_q);
  // Block row lr: query head and query row.
  const FtPackedRows<kRowsPerHead> packed{m0, h0};  // block row -> query, head

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
      const int row = packed.query(r);
      return row < p.seq_q ? q_b + packed.head(r) * p.q_sh + row * p.q_ss : nullptr;
    });
  }
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i);
    ft_cp_async_commit();
  }

  // This thread's rows: block rows lr0 = g and lr0 + 8 of its warp's 16 inside the warpgroup's 64, i.e.
  // queries packed.query(lr0 + 8 r) of heads packed.head(lr0 + 8 r).
  const int lr0 = wg * 64 + (warp % 4) * 16 + g;
  float acc[kHeadDim / 2];
  ft_zero(acc);
  FtOnlineRow rows[2];
  float sink_log2[2];
  ft_online_rows_init<kLearnedSinks>(rows, sink_log2, [&](int r) { return p.sinks[packed.head(lr0 + 8 * r)]; });
  const unsigned q_wg = smem_q + unsigned(wg * 64 * 128);  // this warpgroup's 64 rows in every Q slab

  // S_i = Q K_i^T into s (issued, not waited for).
  auto issue_qk = [&](float* s, unsigned smem_k) { ft_wgmma_rows_by_rows<T, kBlockN, kKSteps>(s, q_wg, kBlockM * 128, smem_k, kSlabK); };
  // O += P V_i (issued, not waited for): V (kBlockN keys x kHeadDim) read N-major.
  auto issue_pv = [&](const unsigned (*pf)[4], unsigned smem_v) { ft_wgmma_regs_by_tile<T, kHeadDim, kPSteps>(acc, pf, smem_v, kSlabK); };
  // Mask (boundary tiles only) and the online softmax of S_i (ft_softmax_tile): s becomes P (unnormalized, in
  // place); alpha[r] is returned for the caller to apply to acc once no P V that reads acc is in flight.
  auto softmax = [&](float* s, int n0, float* alpha) {
    const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);
    ft_softmax_tile_if<false>(need_mask, *reinterpret_cast<float(*)[kNTiles][4]>(s),
                              rows, p.scale_log2, [&](int r, int key) { return mask.visible(packed.query(lr0 + 8 * r), n0 + key); },
                              FtNoRounding{}, *reinterpret_cast<float(*)[2]>(alpha));
  };
  auto rescale = [&](const float* alpha) { ft_rescale_rows<kHeadDim>(acc, *reinterpret_cast<const float(*)[2]>(alpha)); };
  // P as the A operand of P V (the m16n8k16 A fragment layout, which the S accumulators already have).
  auto pack_p = [&](const float* s, unsigned (*pf)[4]) {
    ft_pack_a_tile<T, kNTiles>(*reinterpret_cast<unsigned(*)[kPSteps][4]>(pf), *reinterpret_cast<const float(*)[kNTiles][4]>(s));
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

  // Epilogue: O = acc / l, LSE (ft/softmax.cuh: FtOnlineRow::finish; a learned sink joins l there).
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
    float lse;
    const float inv = rows[r].template finish<false, kLearnedSinks>(warp_sum<4>(rows[r].sum), sink_log2[r], lse);
    const int lr = lr0 + 8 * r;  // row inside the block
    const int row = packed.query(lr), h = packed.head(lr);
    if (kEpilogue == 2) {
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; ++dt) {
        const unsigned packed = FtMma<T>::pack(acc[dt * 4 + 2 * r] * inv, acc[dt * 4 + 2 * r + 1] * inv);
        *reinterpret_cast<unsigned*>(o_stage + lr * kRowBytes + ((dt ^ (lr % 8)) * 16) + t4 * 4) = packed;
      }
    }
    if (row < p.seq_q) {
      T* o_row = p.o + b * p.o_sb + h * p.o_sh + row * p.o_ss;
      if (kEpilogue == 1) ft_store_acc_row<T, kHeadDim>(o_row, acc, r, inv);
      if (t4 == 0)
        p.lse[(static_cast<long long>(b) * p.heads_q + h) * p.seq_q + row] = lse;
    }
  }
  if (kEpilogue == 2) {
    __syncthreads();
#pragma unroll
    for (int idx = threadIdx.x; idx < kBlockM * kChunks; idx += kThreads) {
      const int lr = idx / kChunks, c = idx % kChunks;
      const int row = packed.query(lr);
      if (row < p.seq_q)
        *reinterpret_cast<uint4*>(p.o + b * p.o_sb + packed.head(lr) * p.o_sh + row * p.o_ss + c * 8) =
            *reinterpret_cast<const uint4*>(o_stage + lr * kRowBytes + ((c ^ (lr % 8)) * 16));
    }
  }
#else
  __trap();  // built for a target without wgmma: the host never launches this (can_run requires sm_90a)
#endif
}
