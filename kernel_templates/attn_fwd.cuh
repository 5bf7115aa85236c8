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

#include "attn_params.cuh"
#include "ft/copy.cuh"
#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/softmax.cuh"

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

  // Running state per owned row (two rows per 16-row tile: g and g + 8), O accumulators, Q fragments.
  float acc[kMTiles][kDTiles][4];
  FtOnlineRow rows[kMTiles][2];
  unsigned qf[kMTiles][kKSteps][4];
  const float sink_log2 = kLearnedSinks ? p.sinks[h] * 1.4426950408889634f : kNegInf;
  ft_zero(acc);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) rows[mt][0].init(sink_log2), rows[mt][1].init(sink_log2);
  const int warp_row0 = warp * kMTiles * 16;  // first query row of this warp inside the block

  for (int i = 0; i < n_tiles; ++i) {
    if (i + kStages - 1 < n_tiles) load_kv(i + kStages - 1);
    ft_cp_async_commit();
    ft_cp_async_wait<kStages - 1>();
    __syncthreads();
    if (kQInRegs && i == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) ft_load_a(qf[mt][ks], smem_q, warp_row0 + mt * 16, ks, FtSwizzleOffset<kHeadDim>{});
    }
    const unsigned smem_k = smem_kv + unsigned((i % kStages) * 2 * kTileBytes);
    const unsigned smem_v = smem_k + kTileBytes;
    const int n0 = tiles.tile(i) * kBlockN;

    // S = Q K^T (raw, unscaled); Q from the registers or, when they would spill, from shared memory.
    float s[kMTiles][kNTiles][4];
    ft_zero(s);
    ft_mma_rows_by_rows<T, kHeadDim, kMTiles, kNTiles, kQInRegs>(s, smem_q, warp_row0, smem_k, 0, qf);

    // Mask (boundary tiles only), online softmax, P as the A operand of P V.
    const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);
    unsigned pf[kMTiles][kPSteps][4];
    ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const int row0 = m0 + warp_row0 + mt * 16 + g;
        float alpha[2];
        ft_softmax_tile<false, kMasked>(
            s[mt], rows[mt], p.scale_log2, [&](int r, int key) { return mask.visible(row0 + 8 * r, n0 + key); },
            FtNoRounding{}, alpha);
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int dt = 0; dt < kDTiles; ++dt) acc[mt][dt][2 * r] *= alpha[r], acc[mt][dt][2 * r + 1] *= alpha[r];
      }
      ft_pack_a<T>(pf, s);
    });

    // O += P V.
    ft_mma_regs_by_tile<T, kHeadDim, kMTiles, kPSteps>(acc, pf, smem_v, 0);
    __syncthreads();  // stage i % kStages is refilled by the next iteration's load
  }
  ft_cp_async_wait<0>();

  // Epilogue: O = acc / l, LSE (ft/softmax.cuh: FtOnlineRow::finish; a learned sink joins l there).
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lse;
      const float inv = rows[mt][r].template finish<false, kLearnedSinks>(warp_sum<4>(rows[mt][r].sum), sink_log2, lse);
      const int row = m0 + warp_row0 + mt * 16 + g + 8 * r;
      if (row < p.seq_q) {
        T* o_row = p.o + b * p.o_sb + h * p.o_sh + row * p.o_ss;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          const unsigned packed = FtMma<T>::pack(acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
          *reinterpret_cast<unsigned*>(o_row + dt * 8 + 2 * t4) = packed;
        }
        if (t4 == 0) p.lse[(static_cast<long long>(b) * p.heads_q + h) * p.seq_q + row] = lse;
      }
    }
  }
}


