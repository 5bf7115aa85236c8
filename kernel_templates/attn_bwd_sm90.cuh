// kernel_templates/attn_bwd_sm90.cuh: the Hopper (sm_90a) backward kernels on warpgroup MMA (wgmma):
//   attn_bwd_dkdv_wgmma_kernel   the attn_bwd_dkdv family's tunable mma = 90 (mma = 80 is attn_bwd_dkdv_kernel,
//                                mma.sync, every GPU since sm_80). Same work split and semantics as that kernel
//                                (one block per key tile over the query tiles and GQA heads that see it, no
//                                atomics), without the sink-token split (the host requires sink_split = 1).
//   attn_bwd_fused_wgmma_kernel  the attn_bwd_fused family: the same loop also adds dQ's share of every item
//                                (dS K) into an fp32 accumulator with atomics, so dK, dV and dQ take one pass;
//                                a second launch of it (convert = 1) writes dQ = scale * accumulator in T.
// The building blocks (FtWgmma, descriptors, fences, the 128-byte-swizzled tile loader, the mask, P from LSE,
// the per-item steps of ft/attn_bwd.cuh) are the device library's (ft/).
#pragma once

#include "attn_params.cuh"
#include "ft/attn_bwd.cuh"
#include "ft/copy.cuh"
#include "ft/items.cuh"
#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/softmax.cuh"
#include "ft/wgmma.cuh"

// dK, dV: one block per (64 x kWarpgroups keys, kv head, batch); each warpgroup owns 64 key rows and works
// on the transposed products (keys as the wgmma M rows), so P^T and dS^T are A operands from registers:
//   S^T  = K Q^T          ss: A = K (K-major), B = Q tile (K-major), N = kBlockM
//   P^T  = exp2(S^T scale log2 e - LSE log2 e), 0 where not visible
//   dV  += P^T dO         rs: A = P^T fragments, B = dO tile read N-major (the forward's P V)
//   dP^T = V dO^T         ss: A = V, B = dO tile, N = kBlockM
//   dS^T = P^T (dP^T - D)
//   dK  += dS^T Q         rs: A = dS^T fragments, B = Q tile read N-major;  dK *= scale at the end.
// An accumulator element (nt, r, e) of a warpgroup's 64 x N product sits at row (warp % 4) * 16 + g + 8 r
// and column nt * 8 + 2 t4 + e (index nt * 4 + 2 r + e), so the S^T / dP^T columns are query rows of the
// tile: LSE and D of the tile come through shared memory with it. Items (query head, query tile) stream
// through kStages stages of (Q, dO, LSE, D), loaded with cp.async.
//
// Fused dQ (kFusedDq): dQ (kBlockM x kHeadDim) += dS K per item, summed over the key blocks by fp32 atomics
// (red.global.add, two floats at a time) into dq_acc, which the host zeroes before the launch:
//   each warpgroup stores its 64 rows of dS^T (rounded to T, as dK uses them) into a shared tile of
//   kBlockN keys x kBlockM queries (64-query slabs, 128-byte swizzle); after a barrier,
//   dQ piece = dS K    ss: A = that tile read M-major (queries as M), B = the K tile read N-major.
// The dQ tile is cut into kBlockM / 64 row blocks x kDqSplit column chunks of kDqN (64 or 128) columns,
// pieces dealt round-robin to the warpgroups.
//
// Shared memory (from a 1024-byte-aligned base): K tile, V tile (kBlockN x kHeadDim each, 64-column slabs
// of kBlockN rows), [fused: the dS^T tile, kBlockN x kBlockM], then kStages stages of
// [Q tile | dO tile | LSE | D], each rounded up to 1024 bytes.
template <typename T, int kHeadDim, int kBlockM, int kWarpgroups, int kStages, bool kCausal, bool kWindow, bool kFusedDq>
__device__ __forceinline__ void ft_attn_bwd_wgmma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                  const T* __restrict__ dout, const float* __restrict__ lse,
                                                  const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv,
                                                  float* __restrict__ dq_acc, int heads_q, int heads_kv, int seq_q,
                                                  int seq_k, int window, int sink_tokens, float scale, long long q_sb,
                                                  long long q_sh, long long q_ss, long long k_sb, long long k_sh,
                                                  long long k_ss) {
  static_assert(kHeadDim % 64 == 0, "rows of whole 128-byte swizzle slabs");
  static_assert(kBlockM == 64 || kBlockM == 128, "S^T = K Q^T is one m64nNk16 chain, N = 64 or 128");
  static_assert(kStages >= 1 && kStages <= 4, "1..4 stages");
  enum : int {
    kThreads = kWarpgroups * 128,
    kBlockN = 64 * kWarpgroups,
    kPSteps = kBlockM / 16,                  // k16 steps of P^T dO, dS^T Q
    kKvBytes = kBlockN * kHeadDim * 2,
    kTileBytes = kBlockM * kHeadDim * 2,
    kStageBytes = int(FtAttnSmem::bwd_wgmma_stage(kHeadDim, kBlockM)),  // Q, dO, LSE, D, rounded up to 1 KiB
    kSlabKv = kBlockN * 128,                 // bytes between 64-column slabs of a K or V tile
    kSlabQ = kBlockM * 128,                  // ... of a Q or dO tile
    kDsBytes = kFusedDq ? kBlockN * kBlockM * 2 : 0,  // the dS^T tile (fused dQ)
    kSlabDs = kBlockN * 128,                 // bytes between its 64-query slabs
    kDqRowBlocks = kBlockM / 64,
    kDqSplit = kWarpgroups / kDqRowBlocks < 1                  ? 1
               : kWarpgroups / kDqRowBlocks > kHeadDim / 64 ? kHeadDim / 64
                                                              : kWarpgroups / kDqRowBlocks,
    kDqN = kHeadDim / kDqSplit,              // columns of one dQ piece
    kDqPieces = kDqRowBlocks * kDqSplit,
  };
  static_assert(!kFusedDq || kDqN == 64 || kDqN == 128, "a dQ piece is one m64n64 or m64n128 chain");
  static_assert(kStageBytes >= 2 * kTileBytes + 8 * kBlockM &&
                    FtAttnSmem::bwd_wgmma(kHeadDim, kBlockM, kBlockN, kStages, kFusedDq) ==
                        1024 + 2LL * kKvBytes + kDsBytes + 1LL * kStages * kStageBytes,
                "the host's shared memory size is this layout's (1 KiB: the alignment of smem_k)");
  constexpr FtLoad kLoad = kFusedDq ? FtLoad::kRolled : FtLoad::kLean;  // the fused pass spills unrolled
  const float kLog2e = 1.4426950408889634f;
  extern __shared__ unsigned char ft_smem_dkdv90[];
  const unsigned smem_raw = ft_smem_u32(ft_smem_dkdv90);
  const unsigned smem_k = (smem_raw + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  const unsigned smem_v = smem_k + kKvBytes;
  const unsigned smem_ds = smem_v + kKvBytes;
  const unsigned smem_stages = smem_ds + kDsBytes;
  const unsigned char* stage_base = ft_smem_dkdv90 + (smem_stages - smem_raw);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = ft_warp_uniform(warp / 4);
  const int g = lane / 4, t4 = lane % 4;
  const int h_kv = blockIdx.y, b = blockIdx.z;
  const int group = heads_q / heads_kv;
  const int n0 = blockIdx.x * kBlockN;
  const int n1 = min(n0 + kBlockN, seq_k);

  const FtAttnMask<kCausal, kWindow> mask(seq_q, seq_k, window, sink_tokens);
  const FtAttnQueryRange<kCausal, kWindow> rows(mask, n0, n1);
  const int t_first = rows.lo / kBlockM;  // query tiles [t_first, t_first + t_count), for each head of the group
  const int t_count = rows.hi > rows.lo ? (rows.hi + kBlockM - 1) / kBlockM - t_first : 0;
  const int n_items = group * t_count;

  // The next item to load and to compute: stepped without a division per item, except in the fused pass,
  // whose registers are tighter (the cursors' spill there; it divides as before).
  FtItemCursor load_at(0, t_count), compute_at(0, t_count);
  auto load_item = [&](int i) {  // item i (the next in order) into stage i % kStages
    const int h = h_kv * group + (kFusedDq ? i / t_count : load_at.head);
    const int m0 = (t_first + (kFusedDq ? i % t_count : load_at.tile)) * kBlockM;
    if (!kFusedDq) load_at.next();
    const unsigned dst = smem_stages + unsigned((i % kStages) * kStageBytes);
    const long long off = b * q_sb + h * q_sh + m0 * q_ss;
    ft_load_tile_sw128<kBlockM, kHeadDim, kThreads, T, kLoad>(dst, q + off, q_ss, seq_q - m0);
    ft_load_tile_sw128<kBlockM, kHeadDim, kThreads, T, kLoad>(dst + kTileBytes, dout + off, q_ss, seq_q - m0);
    const long long row0 = (static_cast<long long>(b) * heads_q + h) * seq_q + m0;
    ft_load_lse_delta<kBlockM, kThreads>(dst + 2 * kTileBytes, lse + row0, delta + row0, seq_q - m0);
  };

  const long long kv_off = b * k_sb + h_kv * k_sh + n0 * k_ss;
  ft_load_tile_sw128<kBlockN, kHeadDim, kThreads, T, kLoad>(smem_k, k + kv_off, k_ss, seq_k - n0);
  ft_load_tile_sw128<kBlockN, kHeadDim, kThreads, T, kLoad>(smem_v, v + kv_off, k_ss, seq_k - n0);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_items) load_item(i);
    ft_cp_async_commit();
  }

  float dk_acc[kHeadDim / 2], dv_acc[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) dk_acc[i] = dv_acc[i] = 0.f;
  const unsigned k_wg = smem_k + unsigned(wg * 64 * 128);  // this warpgroup's 64 keys in every K / V slab
  const unsigned v_wg = smem_v + unsigned(wg * 64 * 128);
  const int key0 = n0 + wg * 64 + (warp % 4) * 16 + g;  // this thread's keys: key0 and key0 + 8
  const float scale_log2 = scale * kLog2e;

  // acc (64 x kHeadDim) += A fragments (64 x kBlockM) times the tile at smem_b (kBlockM x kHeadDim), N-major.
  auto issue_regs_by_tile = [&](float* acc, const unsigned (*af)[4], unsigned smem_b) {
    ft_wgmma_regs_by_tile<T, kHeadDim, kPSteps>(acc, af, smem_b, kSlabQ);
  };

  for (int i = 0; i < n_items; ++i) {
    if (i + kStages - 1 < n_items) load_item(i + kStages - 1);
    ft_cp_async_commit();
    ft_cp_async_wait<kStages - 1>();
    ft_fence_proxy_async();
    __syncthreads();
    const int m0 = (t_first + (kFusedDq ? i % t_count : compute_at.tile)) * kBlockM;
    if (!kFusedDq) compute_at.next();
    const unsigned smem_q = smem_stages + unsigned((i % kStages) * kStageBytes);
    const unsigned smem_do = smem_q + kTileBytes;
    const float* lse_s = reinterpret_cast<const float*>(stage_base + (i % kStages) * kStageBytes + 2 * kTileBytes);
    const float* d_s = lse_s + kBlockM;

    float s[kBlockM / 2], dp[kBlockM / 2];
    unsigned af[kPSteps][4];
    ft_bwd_item_to_ds<T, kHeadDim, kBlockM, kBlockN>(s, dp, af, af, dv_acc, k_wg, v_wg, kSlabKv, smem_q, smem_do, kSlabQ, mask,
                                                      seq_q, m0, n0, key0, lse_s, d_s, scale_log2, t4);
    // dS^T rows of this warpgroup into the shared tile, as T (the values dK uses)
    if constexpr (kFusedDq) ft_bwd_store_ds_t<kBlockM, kSlabDs>(smem_ds, af, key0 - n0, g, t4);
    issue_regs_by_tile(dk_acc, af, smem_q);  // dK += dS^T Q
    if constexpr (kFusedDq) {
      ft_fence_proxy_async();  // the dS^T stores, read next by wgmma
      __syncthreads();         // every warpgroup's rows are in
      ft_wgmma_wait<0>();      // dK: its A fragments are free before the dQ accumulators take registers
      ft_fence_regs<kHeadDim / 2>(dk_acc);
      const long long q_head = b * q_sb + (h_kv * group + i / t_count) * q_sh;
#pragma unroll
      for (int piece = wg; piece < kDqPieces; piece += kWarpgroups) {
        const int rb = piece / kDqSplit, col0 = (piece % kDqSplit) * kDqN;
        float dq_own[kDqN <= kBlockM ? 1 : kDqN / 2];
        float* dq = kDqN <= kBlockM ? s : dq_own;  // S^T is spent: its registers take the piece when it fits
        ft_bwd_issue_dq<T, kDqN, kBlockN, kSlabDs, kSlabKv>(dq, smem_ds + unsigned(rb * kSlabDs), smem_k + unsigned((col0 / 64) * kSlabKv));
        ft_wgmma_wait<0>();
        ft_fence_regs<kDqN / 2>(dq);
        const int row0 = m0 + rb * 64 + (warp % 4) * 16 + g;
        float* dst0 = dq_acc + q_head + row0 * q_ss + col0 + 2 * t4;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (row0 + 8 * r >= seq_q) continue;
          float* dst = dst0 + 8 * r * kHeadDim;  // Q's rows are contiguous (q_ss = kHeadDim)
#pragma unroll
          for (int nt = 0; nt < kDqN / 8; ++nt)
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst + nt * 8), "f"(dq[nt * 4 + 2 * r]),
                         "f"(dq[nt * 4 + 2 * r + 1])
                         : "memory");
        }
      }
    }
    ft_wgmma_wait<0>();
    ft_fence_regs<kHeadDim / 2>(dk_acc);
    __syncthreads();  // stage i % kStages is refilled by the next iteration's load (fused: and the dS^T tile)
  }
  ft_cp_async_commit();
  ft_cp_async_wait<0>();

  ft_bwd_store_dkdv<T, kHeadDim>(dk, dv, dk_acc, dv_acc, b * k_sb + h_kv * k_sh, k_ss, key0, n1, scale, t4);
}

// The loop above on the members of a kernel's FtAttnBwdParams (fused: dQ accumulated into p.ws). It takes
// them unpacked: with the struct itself (by value or by reference) ptxas allocates differently near its
// 255-register limit, and attn_bwd_fused at head_dim 64, 128-key blocks, 2 stages spilled 24 bytes (nvcc
// 13.0, sm_90a) where this form and the positional kernels of fdfe6c7 spill none.
template <typename T, int kHeadDim, int kBlockM, int kWarpgroups, int kStages, bool kCausal, bool kWindow, bool kFusedDq>
__device__ __forceinline__ void ft_attn_bwd_wgmma_of(const FtAttnBwdParams<T>& p) {
  ft_attn_bwd_wgmma<T, kHeadDim, kBlockM, kWarpgroups, kStages, kCausal, kWindow, kFusedDq>(
      p.q, p.k, p.v, p.dout, p.lse, p.delta, p.dk, p.dv, kFusedDq ? p.ws : nullptr, p.heads_q, p.heads_kv, p.seq_q,
      p.seq_k, p.window, p.sink_tokens, p.scale, p.q_sb, p.q_sh, p.q_ss, p.k_sb, p.k_sh, p.k_ss);
}

template <typename T, int kHeadDim, int kBlockM, int kWarpgroups, int kStages, bool kCausal, bool kWindow>
__global__ void __launch_bounds__(kWarpgroups * 128, 1)
    attn_bwd_dkdv_wgmma_kernel(const __grid_constant__ FtAttnBwdParams<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // p.ws, p.sink_split, p.reduce: the sink-token split is the mma 80 kernel's (host: sink_split = 1)
  ft_attn_bwd_wgmma_of<T, kHeadDim, kBlockM, kWarpgroups, kStages, kCausal, kWindow, false>(p);
#else
  __trap();  // built for a target without wgmma: the host never launches this (can_run requires sm_90a)
#endif
}

// dK, dV and (through dq_acc, zeroed by the host before the launch) dQ in one pass. convert = 1: the
// second launch, grid (seq_q * kHeadDim / (4 * threads FtBwdConvert::quads()) rounded up, heads_q, batch):
// dq = T(scale * dq_acc), FtBwdConvert::quads() runs of four elements per thread (ft_bwd_convert_quads; Q's
// strides are contiguous: q_ss = kHeadDim, q_sh = seq_q * kHeadDim).
template <typename T, int kHeadDim, int kBlockM, int kWarpgroups, int kStages, bool kCausal, bool kWindow>
__global__ void __launch_bounds__(kWarpgroups * 128, 1)
    attn_bwd_fused_wgmma_kernel(const __grid_constant__ FtAttnBwdParams<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (p.convert) {
    const long long at = blockIdx.z * p.q_sb + blockIdx.y * p.q_sh;
    ft_bwd_convert_quads<FtBwdConvert::quads()>(
        static_cast<long long>(p.seq_q) * kHeadDim / 4,
        [&](long long q) { return *reinterpret_cast<const float4*>(p.ws + at + 4 * q); },
        [&](long long q, const float4& x) {
          uint2 out;
          out.x = FtMma<T>::pack(x.x * p.scale, x.y * p.scale);
          out.y = FtMma<T>::pack(x.z * p.scale, x.w * p.scale);
          *reinterpret_cast<uint2*>(p.dq + at + 4 * q) = out;
        });
    return;
  }
  ft_attn_bwd_wgmma_of<T, kHeadDim, kBlockM, kWarpgroups, kStages, kCausal, kWindow, true>(p);
#else
  __trap();  // built for a target without wgmma: the host never launches this (can_run requires sm_90a)
#endif
}
