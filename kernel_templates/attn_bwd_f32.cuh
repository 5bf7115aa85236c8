// kernel_templates/attn_bwd_f32.cuh: the fp32 kernels of attn_bwd_dkdv and attn_bwd_dq (attn_bwd.cuh has the
// fp16 / bf16 ones; same arguments, grids and semantics). As the fp32 forward: kTf32 = false, exact FFMA from
// shared memory; true, TF32 tensor cores (mma.sync m16n8k8, cvt.rna.tf32 operands, fp32 accumulation). Rows
// padded to head_dim + 4 floats, loaded by cp.async. The PTX wrappers are ft/f32.cuh's, so
// tests/kernels/attn_fwd_f32_emulation.hpp can run these kernels on the CPU.
#pragma once

#include "attn_params.cuh"
#include "ft/f32.cuh"
#include "ft/mask.cuh"
#include "ft/softmax.cuh"

namespace ft_attn_bwd_f32 {

using ft_attn_f32::cp_async_commit;
using ft_attn_f32::cp_async_wait;
using ft_attn_f32::load_rows_async;
using ft_attn_f32::mma_tf32;
using ft_attn_f32::to_tf32;

// ---------------------------------------------------------------------------------------------
// Exact fp32. Lane = 8 lr + lc; of a warp's rows the lane owns r = lr + 4 i (i < kR), of a score tile the
// columns lc + 8 t (t < kC), of a head-dim accumulator the dims lc kVec + 8 kVec u + x. Rows of stride
// kHeadDim + 4 floats start 4 banks apart: the float4 reads below are free of bank conflicts.

// acc[i][t] += A[lr + 4 i] . B[lc + 8 t], the contraction over the head dim (A, B rows in shared memory).
template <int kHeadDim, int kR, int kC>
__device__ __forceinline__ void ffma_dot(float (&acc)[kR][kC], const float* a, const float* b, int lane) {
  enum : int { kS = kHeadDim + 4 };
  const float* a_l = a + (lane / 8) * kS;
  const float* b_l = b + (lane % 8) * kS;
#pragma unroll 2
  for (int d = 0; d < kHeadDim; d += 4) {
    float4 av[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) av[i] = *reinterpret_cast<const float4*>(a_l + 4 * i * kS + d);
#pragma unroll
    for (int t = 0; t < kC; ++t) {
      const float4 bv = *reinterpret_cast<const float4*>(b_l + 8 * t * kS + d);
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        acc[i][t] = fmaf(av[i].x, bv.x, acc[i][t]);
        acc[i][t] = fmaf(av[i].y, bv.y, acc[i][t]);
        acc[i][t] = fmaf(av[i].z, bv.z, acc[i][t]);
        acc[i][t] = fmaf(av[i].w, bv.w, acc[i][t]);
      }
    }
  }
}

// The head-dim accumulator a lane keeps for kR rows.
template <int kHeadDim>
struct FfmaDims {
  enum : int { kVec = kHeadDim >= 32 ? 4 : 2, kGroups = kHeadDim / (8 * kVec), kDims = kGroups * kVec };
};

// out[i][.] += sum_j P[lr + 4 i][j] B[j][dims of the lane], j < kCols: P in shared memory (row stride kPS,
// this warp's rows), B rows of stride kHeadDim + 4.
template <int kHeadDim, int kR, int kCols, int kPS>
__device__ __forceinline__ void ffma_acc(float (&out)[kR][FfmaDims<kHeadDim>::kDims], const float* p, const float* b,
                                         int lane) {
  enum : int { kS = kHeadDim + 4, kVec = FfmaDims<kHeadDim>::kVec, kGroups = FfmaDims<kHeadDim>::kGroups };
  const float* pr = p + (lane / 8) * kPS;
  const float* b_l = b + (lane % 8) * kVec;
#pragma unroll 1
  for (int j = 0; j < kCols; j += 4) {
    float4 pv[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) pv[i] = *reinterpret_cast<const float4*>(pr + 4 * i * kPS + j);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float* row = b_l + (j + e) * kS;
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        float bv[kVec];
        if constexpr (kVec == 4) {
          const float4 x = *reinterpret_cast<const float4*>(row + u * 8 * kVec);
          bv[0] = x.x, bv[1] = x.y, bv[2] = x.z, bv[3] = x.w;
        } else {
          const float2 x = *reinterpret_cast<const float2*>(row + u * 8 * kVec);
          bv[0] = x.x, bv[1] = x.y;
        }
#pragma unroll
        for (int i = 0; i < kR; ++i) {
          const float pe = e == 0 ? pv[i].x : e == 1 ? pv[i].y : e == 2 ? pv[i].z : pv[i].w;
#pragma unroll
          for (int x = 0; x < kVec; ++x) out[i][u * kVec + x] = fmaf(pe, bv[x], out[i][u * kVec + x]);
        }
      }
    }
  }
}

// Rows first_row + lr + 4 i below `rows` of the accumulator times `mul`, at base + row * row_stride.
template <int kHeadDim, int kR>
__device__ __forceinline__ void ffma_store(float* base, long long row_stride, int first_row, int rows,
                                           const float (&acc)[kR][FfmaDims<kHeadDim>::kDims], float mul, int lane) {
  enum : int { kVec = FfmaDims<kHeadDim>::kVec, kGroups = FfmaDims<kHeadDim>::kGroups };
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int row = first_row + lane / 8 + 4 * i;
    if (row >= rows) continue;
    float* p = base + row * row_stride + (lane % 8) * kVec;
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      if constexpr (kVec == 4)
        *reinterpret_cast<float4*>(p + u * 8 * kVec) = make_float4(acc[i][4 * u] * mul, acc[i][4 * u + 1] * mul,
                                                                   acc[i][4 * u + 2] * mul, acc[i][4 * u + 3] * mul);
      else
        *reinterpret_cast<float2*>(p + u * 8 * kVec) = make_float2(acc[i][2 * u] * mul, acc[i][2 * u + 1] * mul);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// TF32 tensor cores (mma.m16n8k8; lane g = lane / 4, t = lane % 4 holds rows g and g + 8 of each 16-row
// tile; accumulator c = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]}). Operands are read from the padded
// rows with scalar loads (free of bank conflicts: rows 4 banks apart) and rounded to tf32 as they are read.

// acc[mt][nt] += A[a_row0 + 16 mt + (0..15)] . B[b_row0 + 8 nt + (0..7)], contracted over the head dim.
template <int kHeadDim, int kMT, int kNT>
__device__ __forceinline__ void tf32_rows_by_rows(float (&acc)[kMT][kNT][4], const float* a, int a_row0, const float* b,
                                                  int b_row0, int lane) {
  enum : int { kS = kHeadDim + 4 };
  const int g = lane / 4, t = lane % 4;
  const float* a_l = a + (a_row0 + g) * kS + t;
  const float* b_l = b + (b_row0 + g) * kS + t;
#pragma unroll 2
  for (int k = 0; k < kHeadDim; k += 8) {
    unsigned af[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const float* p = a_l + 16 * mt * kS + k;
      af[mt][0] = to_tf32(p[0]), af[mt][1] = to_tf32(p[8 * kS]);
      af[mt][2] = to_tf32(p[4]), af[mt][3] = to_tf32(p[8 * kS + 4]);
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float* p = b_l + 8 * nt * kS + k;
      const unsigned b0 = to_tf32(p[0]), b1 = to_tf32(p[4]);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma_tf32(acc[mt][nt], af[mt], b0, b1);
    }
  }
}

// acc[mt][dt] += P[mt] . B[0 .. 8 kKT - 1][:]: P in accumulator tiles (16 x 8 each), B rows in shared memory.
// The accumulator of tile kt is the A fragment {c0, c2, c1, c3} of a k-step whose columns t and t + 4
// stand for rows 2t and 2t + 1 of B's 8, so B is read in that order (b0 = B[2t][g], b1 = B[2t+1][g]).
template <int kHeadDim, int kMT, int kKT>
__device__ __forceinline__ void tf32_regs_by_tile(float (&acc)[kMT][kHeadDim / 8][4], const float (&p)[kMT][kKT][4],
                                                  const float* b, int lane) {
  enum : int { kS = kHeadDim + 4 };
  const float* b_l = b + 2 * (lane % 4) * kS + lane / 4;
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt) {
    unsigned af[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      af[mt][0] = to_tf32(p[mt][kt][0]), af[mt][1] = to_tf32(p[mt][kt][2]);
      af[mt][2] = to_tf32(p[mt][kt][1]), af[mt][3] = to_tf32(p[mt][kt][3]);
    }
    const float* bk = b_l + 8 * kt * kS;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
      const unsigned b0 = to_tf32(bk[8 * dt]), b1 = to_tf32(bk[kS + 8 * dt]);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma_tf32(acc[mt][dt], af[mt], b0, b1);
    }
  }
}

template <int kMT, int kNT>
__device__ __forceinline__ void zero(float (&acc)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
}
template <int kR, int kC>
__device__ __forceinline__ void zero(float (&acc)[kR][kC]) {
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int j = 0; j < kC; ++j) acc[i][j] = 0.f;
}

// Accumulator rows first_row + 16 mt + g (+ 8) below `rows`, times `mul`, at base + row * row_stride.
template <int kMT, int kDT>
__device__ __forceinline__ void tf32_store(float* base, long long row_stride, int first_row, int rows,
                                           const float (&acc)[kMT][kDT][4], float mul, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = first_row + 16 * mt + g + 8 * h;
      if (row >= rows) continue;
      float* p = base + row * row_stride + 2 * t;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<float2*>(p + 8 * dt) = make_float2(acc[mt][dt][2 * h] * mul, acc[mt][dt][2 * h + 1] * mul);
    }
}

}  // namespace ft_attn_bwd_f32

// ---------------------------------------------------------------------------------------------
// dK, dV in fp32: one block per (block_n keys, kv head, batch), over every query head of the GQA group and
// every query tile that sees its keys (no atomics), as attn_bwd_dkdv_kernel; each warp owns block_n /
// num_warps keys (16 or 32). Items (query head, query tile) stream through kStages shared-memory stages
// (Q tile, dO tile, LSE and D of its rows):
//   S^T = K Q^T, P^T = exp(S^T scale - LSE) (0 where not visible), dV += P^T dO,
//   dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q;  dK *= scale at the end.
// FFMA keeps P^T and dS^T of the warp's keys in shared memory for the two products; TF32 in registers.
// The sink-token split of the 16-bit kernel is not implemented: the host admits sink_split 1 only, and
// ws / sink_split / reduce are accepted (same signature) and unused.
// Shared memory (floats, S = head_dim + 4): K, V (block_n x S each); kStages x (Q, dO: block_m x S each;
// LSE, D: block_m each); FFMA: P^T, dS^T (block_n x (block_m + 8) each). attn_bwd_f32.cpp sizes it.
template <int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kTf32, bool kCausal, bool kWindow>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attn_bwd_dkdv_f32_kernel(const __grid_constant__ FtAttnBwdParams<float> p) {
  using namespace ft_attn_bwd_f32;
  static_assert(kHeadDim % 16 == 0 && kBlockM % 16 == 0, "whole 16-row tiles, 16-dim steps");
  static_assert(kBlockN % (16 * kWarps) == 0 && kBlockN / (16 * kWarps) <= 2, "a warp owns 16 or 32 keys");
  static_assert(kStages >= 1, "at least one stage");
  enum : int {
    kThreads = kWarps * 32,
    kS = kHeadDim + 4,
    kRowsW = kBlockN / kWarps,       // keys per warp
    kR = kRowsW / 4,                 // FFMA: key rows per lane
    kC = kBlockM / 8,                // FFMA: query columns per lane; TF32: 8-query accumulator tiles
    kNT = kRowsW / 16,               // TF32: 16-key tiles per warp
    kPS = kBlockM + 8,               // FFMA: row stride of P^T and dS^T
    kTile = kBlockM * kS,            // one Q or dO tile
    kStage = 2 * kTile + 2 * kBlockM,
  };
  (void)p.ws, (void)p.sink_split, (void)p.reduce;
  const float kLog2e = 1.4426950408889634f;
  extern __shared__ float4 ft_attn_f32_smem[];
  float* const s_k = reinterpret_cast<float*>(ft_attn_f32_smem);
  float* const s_v = s_k + kBlockN * kS;
  float* const s_stages = s_v + kBlockN * kS;
  float* const s_p = s_stages + kStages * kStage;  // FFMA: P^T of all keys, then dS^T
  float* const s_ds = s_p + kBlockN * kPS;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h_kv = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv;
  const int n0 = blockIdx.x * kBlockN;
  const int n1 = min(n0 + kBlockN, p.seq_k);
  const int warp_row0 = warp * kRowsW;

  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const FtAttnQueryRange<kCausal, kWindow> rows(mask, n0, n1);
  const int t_first = rows.lo / kBlockM;
  const int t_count = rows.hi > rows.lo ? (rows.hi + kBlockM - 1) / kBlockM - t_first : 0;
  const int n_items = group * t_count;

  // Item i (query head h_kv * group + i / t_count, query tile t_first + i % t_count) into stage i % kStages:
  // Q and dO by cp.async, LSE and D by plain loads (visible after the loop's __syncthreads).
  auto load_item = [&](int i) {
    const int h = h_kv * group + i / t_count;
    const int m0 = (t_first + i % t_count) * kBlockM;
    float* dst = s_stages + (i % kStages) * kStage;
    const long long off = b * p.q_sb + h * p.q_sh;
    load_rows_async<kBlockM, kHeadDim, kThreads>(dst, p.q + off, p.q_ss, m0, p.seq_q);
    load_rows_async<kBlockM, kHeadDim, kThreads>(dst + kTile, p.dout + off, p.q_ss, m0, p.seq_q);
    const long long row0 = (static_cast<long long>(b) * p.heads_q + h) * p.seq_q + m0;
    for (int r = threadIdx.x; r < 2 * kBlockM; r += kThreads) {
      const int rr = r % kBlockM;
      dst[2 * kTile + r] = m0 + rr < p.seq_q ? (r < kBlockM ? p.lse : p.delta)[row0 + rr] : 0.f;
    }
  };

  const long long kv_off = b * p.k_sb + h_kv * p.k_sh;
  load_rows_async<kBlockN, kHeadDim, kThreads>(s_k, p.k + kv_off, p.k_ss, n0, p.seq_k);
  load_rows_async<kBlockN, kHeadDim, kThreads>(s_v, p.v + kv_off, p.k_ss, n0, p.seq_k);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_items) load_item(i);
    cp_async_commit();
  }

  const float scale_log2 = p.scale * kLog2e;
  using Acc = typename FtSelect<kTf32, float[kNT][kHeadDim / 8][4], float[kR][FfmaDims<kHeadDim>::kDims]>::type;
  Acc dk_acc, dv_acc;
  zero(dk_acc);
  zero(dv_acc);

  for (int i = 0; i < n_items; ++i) {
    if (i + kStages - 1 < n_items) load_item(i + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    const int m0 = (t_first + i % t_count) * kBlockM;
    const float* sq = s_stages + (i % kStages) * kStage;
    const float* sdo = sq + kTile;
    const float* lse_s = sq + 2 * kTile;
    const float* d_s = lse_s + kBlockM;
    const bool need_mask = m0 + kBlockM > p.seq_q || ft_attn_tile_needs_mask(mask, m0, m0 + kBlockM, n0, kBlockN);

    if constexpr (kTf32) {
      const int g = lane / 4, t = lane % 4;
      float s[kNT][kC][4], dp[kNT][kC][4];
      zero(s);
      zero(dp);
      tf32_rows_by_rows<kHeadDim, kNT, kC>(s, s_k, warp_row0, sq, 0, lane);
      tf32_rows_by_rows<kHeadDim, kNT, kC>(dp, s_v, warp_row0, sdo, 0, lane);
      ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
        constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int qc = 0; qc < kC; ++qc)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int col = qc * 8 + 2 * t + (c & 1);
              const int key = n0 + warp_row0 + nt * 16 + g + 8 * (c >> 1);
              const bool vis = !kMasked || (m0 + col < p.seq_q && mask.visible(m0 + col, key));
              const float prob = vis ? ft_prob_from_lse<true>(s[nt][qc][c], scale_log2, lse_s[col] * kLog2e) : 0.f;
              s[nt][qc][c] = prob;
              dp[nt][qc][c] = prob * (dp[nt][qc][c] - d_s[col]);
            }
      });
      tf32_regs_by_tile<kHeadDim, kNT, kC>(dv_acc, s, sdo, lane);
      tf32_regs_by_tile<kHeadDim, kNT, kC>(dk_acc, dp, sq, lane);
    } else {
      const int lr = lane / 8, lc = lane % 8;
      float s[kR][kC], dp[kR][kC];
      zero(s);
      zero(dp);
      const float* k_w = s_k + warp_row0 * kS;
      const float* v_w = s_v + warp_row0 * kS;
      ffma_dot<kHeadDim, kR, kC>(s, k_w, sq, lane);
      ffma_dot<kHeadDim, kR, kC>(dp, v_w, sdo, lane);
      float* p_w = s_p + warp_row0 * kPS;
      float* ds_w = s_ds + warp_row0 * kPS;
      ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
        constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
        for (int i2 = 0; i2 < kR; ++i2)
#pragma unroll
          for (int tc = 0; tc < kC; ++tc) {
            const int col = lc + 8 * tc;
            const int key = n0 + warp_row0 + lr + 4 * i2;
            const bool vis = !kMasked || (m0 + col < p.seq_q && mask.visible(m0 + col, key));
            const float prob = vis ? ft_prob_from_lse<true>(s[i2][tc], scale_log2, lse_s[col] * kLog2e) : 0.f;
            p_w[(lr + 4 * i2) * kPS + col] = prob;
            ds_w[(lr + 4 * i2) * kPS + col] = prob * (dp[i2][tc] - d_s[col]);
          }
      });
      __syncwarp();
      ffma_acc<kHeadDim, kR, kBlockM, kPS>(dv_acc, p_w, sdo, lane);
      ffma_acc<kHeadDim, kR, kBlockM, kPS>(dk_acc, ds_w, sq, lane);
    }
    __syncthreads();  // stage i % kStages (and the warp's P^T, dS^T) are rewritten by the next iteration
  }
  cp_async_wait<0>();

  const long long out_off = b * p.k_sb + h_kv * p.k_sh + n0 * p.k_ss;
  if constexpr (kTf32) {
    tf32_store(p.dk + out_off, p.k_ss, warp_row0, n1 - n0, dk_acc, p.scale, lane);
    tf32_store(p.dv + out_off, p.k_ss, warp_row0, n1 - n0, dv_acc, 1.f, lane);
  } else {
    ffma_store<kHeadDim>(p.dk + out_off, p.k_ss, warp_row0, n1 - n0, dk_acc, p.scale, lane);
    ffma_store<kHeadDim>(p.dv + out_off, p.k_ss, warp_row0, n1 - n0, dv_acc, 1.f, lane);
  }
}

// ---------------------------------------------------------------------------------------------
// dQ in fp32: one block per (block_m queries, query head, batch), as attn_bwd_dq_kernel; each warp owns
// block_m / num_warps query rows (16 or 32); the key tiles the rows see stream through kStages (K, V)
// buffers: P = exp(S scale - LSE), dP = dO V^T, dS = P (dP - D), dQ += dS K;  dQ *= scale at the end.
// A warp skips a key tile none of its rows sees. FFMA keeps dS in shared memory for dS K; TF32 in registers.
// Shared memory (floats, S = head_dim + 4): Q, dO (block_m x S each); kStages x (K, V: block_n x S each);
// FFMA: dS (block_m x (block_n + 8)).
template <int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kTf32, bool kCausal, bool kWindow>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attn_bwd_dq_f32_kernel(const __grid_constant__ FtAttnBwdParams<float> p) {
  using namespace ft_attn_bwd_f32;
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0, "whole 16-key steps, 16-dim steps");
  static_assert(kBlockM % (16 * kWarps) == 0 && kBlockM / (16 * kWarps) <= 2, "a warp owns 16 or 32 query rows");
  static_assert(kStages >= 1, "at least one stage");
  enum : int {
    kThreads = kWarps * 32,
    kS = kHeadDim + 4,
    kRowsW = kBlockM / kWarps,
    kR = kRowsW / 4,     // FFMA: query rows per lane
    kC = kBlockN / 8,    // FFMA: key columns per lane; TF32: 8-key accumulator tiles
    kMT = kRowsW / 16,   // TF32: 16-row tiles per warp
    kPS = kBlockN + 8,   // FFMA: row stride of dS
    kTile = kBlockN * kS,
  };
  const float kLog2e = 1.4426950408889634f;
  extern __shared__ float4 ft_attn_f32_smem[];
  float* const s_q = reinterpret_cast<float*>(ft_attn_f32_smem);
  float* const s_do = s_q + kBlockM * kS;
  float* const s_kv = s_do + kBlockM * kS;        // stage s: K at 2 s kTile, V after it
  float* const s_ds = s_kv + 2 * kStages * kTile;  // FFMA only

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // heaviest (causal: last) query blocks first
  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM;
  const int m1 = min(m0 + kBlockM, p.seq_q);
  const int warp_row0 = warp * kRowsW;
  const int w0 = m0 + warp_row0, w1 = min(w0 + kRowsW, p.seq_q);

  const long long q_off = b * p.q_sb + h * p.q_sh;
  const float* k_head = p.k + b * p.k_sb + h_kv * p.k_sh;
  const float* v_head = p.v + b * p.k_sb + h_kv * p.k_sh;
  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const FtAttnTiles<kCausal, kWindow> tiles(mask, m0, m1, kBlockN);
  const int n_tiles = tiles.count();

  auto load_kv = [&](int i) {
    const int n0 = tiles.tile(i) * kBlockN;
    float* dst = s_kv + (i % kStages) * 2 * kTile;
    load_rows_async<kBlockN, kHeadDim, kThreads>(dst, k_head, p.k_ss, n0, p.seq_k);
    load_rows_async<kBlockN, kHeadDim, kThreads>(dst + kTile, v_head, p.k_ss, n0, p.seq_k);
  };
  load_rows_async<kBlockM, kHeadDim, kThreads>(s_q, p.q + q_off, p.q_ss, m0, p.seq_q);
  load_rows_async<kBlockM, kHeadDim, kThreads>(s_do, p.dout + q_off, p.q_ss, m0, p.seq_q);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i);
    cp_async_commit();
  }

  // LSE (log2 units) and D of the rows the lane owns.
  enum : int { kLaneRows = kTf32 ? 2 * kMT : kR };
  float lse2[kLaneRows], d_row[kLaneRows];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r) {
    const int row = w0 + (kTf32 ? 16 * (r / 2) + lane / 4 + 8 * (r % 2) : lane / 8 + 4 * r);
    const long long at = (static_cast<long long>(b) * p.heads_q + h) * p.seq_q + min(row, p.seq_q - 1);
    lse2[r] = p.lse[at] * kLog2e;
    d_row[r] = p.delta[at];
  }
  const float scale_log2 = p.scale * kLog2e;
  using Acc = typename FtSelect<kTf32, float[kMT][kHeadDim / 8][4], float[kR][FfmaDims<kHeadDim>::kDims]>::type;
  Acc dq_acc;
  zero(dq_acc);

  for (int i = 0; i < n_tiles; ++i) {
    if (i + kStages - 1 < n_tiles) load_kv(i + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    const float* sk = s_kv + (i % kStages) * 2 * kTile;
    const float* sv = sk + kTile;
    const int n0 = tiles.tile(i) * kBlockN;
    if (ft_attn_tile_has_work(mask, w0, w1, n0, kBlockN)) {
      const bool need_mask = ft_attn_tile_needs_mask(mask, w0, w1, n0, kBlockN);
      if constexpr (kTf32) {
        const int g = lane / 4, t = lane % 4;
        float s[kMT][kC][4], dp[kMT][kC][4];
        zero(s);
        zero(dp);
        tf32_rows_by_rows<kHeadDim, kMT, kC>(s, s_q, warp_row0, sk, 0, lane);
        tf32_rows_by_rows<kHeadDim, kMT, kC>(dp, s_do, warp_row0, sv, 0, lane);
        ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
          constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kC; ++nt)
#pragma unroll
              for (int c = 0; c < 4; ++c) {
                const int r = 2 * mt + (c >> 1);
                const int row = w0 + 16 * mt + g + 8 * (c >> 1);
                const int key = n0 + nt * 8 + 2 * t + (c & 1);
                const bool vis = !kMasked || mask.visible(row, key);
                dp[mt][nt][c] = vis ? ft_prob_from_lse<true>(s[mt][nt][c], scale_log2, lse2[r]) * (dp[mt][nt][c] - d_row[r]) : 0.f;
              }
        });
        tf32_regs_by_tile<kHeadDim, kMT, kC>(dq_acc, dp, sk, lane);
      } else {
        const int lr = lane / 8, lc = lane % 8;
        float s[kR][kC], dp[kR][kC];
        zero(s);
        zero(dp);
        ffma_dot<kHeadDim, kR, kC>(s, s_q + warp_row0 * kS, sk, lane);
        ffma_dot<kHeadDim, kR, kC>(dp, s_do + warp_row0 * kS, sv, lane);
        float* ds_w = s_ds + warp_row0 * kPS;
        ft_if_masked(need_mask, [&](auto masked) {  // two copies: interior tiles skip the mask
          constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
          for (int r = 0; r < kR; ++r)
#pragma unroll
            for (int tc = 0; tc < kC; ++tc) {
              const int row = w0 + lr + 4 * r;
              const int key = n0 + lc + 8 * tc;
              const bool vis = !kMasked || mask.visible(row, key);
              ds_w[(lr + 4 * r) * kPS + lc + 8 * tc] =
                  vis ? ft_prob_from_lse<true>(s[r][tc], scale_log2, lse2[r]) * (dp[r][tc] - d_row[r]) : 0.f;
            }
        });
        __syncwarp();
        ffma_acc<kHeadDim, kR, kBlockN, kPS>(dq_acc, ds_w, sk, lane);
        __syncwarp();  // dS of this tile is read by every lane before the next tile overwrites it
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();
  if constexpr (kTf32)
    tf32_store(p.dq + q_off + m0 * p.q_ss, p.q_ss, warp_row0, m1 - m0, dq_acc, p.scale, lane);
  else
    ffma_store<kHeadDim>(p.dq + q_off + m0 * p.q_ss, p.q_ss, warp_row0, m1 - m0, dq_acc, p.scale, lane);
}
