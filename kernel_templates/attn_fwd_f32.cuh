// kernel_templates/attn_fwd_f32.cuh: the fp32 half of the attn_fwd family (FlashAttention-2 forward, one
// block per (query tile, head, batch)). Two variants share the K/V pipeline, the masks and the online
// softmax: kTf32 = false computes Q K^T and P V with exact fp32 FFMA from shared memory; kTf32 = true on
// TF32 tensor cores (mma.sync m16n8k8, inputs rounded with cvt.rna.tf32.f32, fp32 accumulation).
// Host side: harness/kernels/attn_fwd_f32.cpp (shared memory size, register estimate, name expression).
#pragma once

#include "attn_params.cuh"
#include "ft/f32.cuh"
#include "ft/mask.cuh"
#include "ft/softmax.cuh"

// Everything but the kernel lives in this namespace (with ft/f32.cuh's PTX wrappers, the host emulation's hooks).
namespace ft_attn_f32 {

// ---------------------------------------------------------------------------------------------
// The tile geometry both variants share. Q, K and V rows sit in shared memory padded to kHeadDim + 4
// floats: consecutive rows then start 4 banks apart, so the access patterns below (8 rows x 16 bytes,
// 8 rows x 4 words, 4 rows x 8 words) are free of bank conflicts.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_>
struct Traits {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_, kThreads = 32 * kWarps_, kStages = kStages_;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;  // 16 or 32
  static constexpr int kStride = kHeadDim + 4;           // [floats] one Q / K / V row in shared memory
  static constexpr int kTileFloats = kBlockN * kStride;  // one K or V tile
  static constexpr int kPStride = kBlockN + 8;           // [floats] one row of P (FFMA variant)
  static_assert(kBlockM % (16 * kWarps) == 0 && kRowsPerWarp <= 32, "each warp owns 16 or 32 query rows");
  static_assert(kBlockN % 16 == 0, "key tiles are whole 16-key steps");
  static_assert(kHeadDim % 16 == 0, "head_dim is a multiple of 16");
  static_assert(kStages >= 1, "at least one K/V buffer");
};

// One (batch, query head): its rows of Q, K, V, O and LSE, and the softmax constants.
struct Slice {
  const float* q;
  const float* k;
  const float* v;
  float* o;
  float* lse;
  long long q_ss, k_ss, v_ss, o_ss;  // [elements] row strides
  int seq_q;
  float scale_log2;  // softmax scale * log2(e): scores in the log2 domain
  float sink_log2;   // learned sink logit * log2(e) (learned sinks only; else -inf)
};

// ---------------------------------------------------------------------------------------------
// Exact fp32 (FFMA). Lane = 8 * lr + lc. The warp's rows r = lr + 4 i (i < kRowsPerLane) belong to the
// 8 lanes of group lr; of the S tile a lane holds keys lc + 8 t, of O the head dims lc * kVec + 8 kVec u + e.
// So the 8 lanes of a group share rows: their running max and sum combine with 3 shuffles. P goes
// through shared memory (each lane needs the whole row for P V) and is read back 4 keys at a time.
template <class T, bool kCausal, bool kWindow, bool kLearnedSinks>
struct FfmaWarp {
  static constexpr int kRowsPerLane = T::kRowsPerWarp / 4;
  static constexpr int kKeysPerLane = T::kBlockN / 8;
  static constexpr int kVec = T::kHeadDim >= 32 ? 4 : 2;  // O dims per vector access
  static constexpr int kDimGroups = T::kHeadDim / (8 * kVec);
  static constexpr int kDimsPerLane = kDimGroups * kVec;

  float o[kRowsPerLane][kDimsPerLane];
  // p = 2^(s scale log2(e) - m), one FMA a score. 2^((s scale - m') log2(e)) with m' in natural units was
  // tried for the large-logit shape (..._qk30): its errors were the same to three digits on the emulator;
  // what moved them was the order of Q K^T's sum (tile() below).
  FtOnlineRow rows[kRowsPerLane];  // the 8 lanes of a row agree on its max; each holds a share of its sum

  __device__ __forceinline__ void init(const Slice& s, int) {
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      rows[i].init(s.sink_log2);
#pragma unroll
      for (int d = 0; d < kDimsPerLane; ++d) o[i][d] = 0.0f;
    }
  }

  __device__ __forceinline__ void prepare_q(const float*, int) {}

  // One K/V tile: S = Q K^T (raw scores), mask, online softmax, O += P V.
  __device__ __forceinline__ void tile(const Slice& s, const FtAttnMask<kCausal, kWindow>& mask, const float* q_w,
                                       const float* k_t, const float* v_t, float* p_w, int w0, int w1, int n0,
                                       int lane) {
    const int lr = lane / 8, lc = lane % 8;
    float sc[kRowsPerLane][kKeysPerLane];
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i)
#pragma unroll
      for (int t = 0; t < kKeysPerLane; ++t) sc[i][t] = 0.0f;

    const float* q_l = q_w + lr * T::kStride;
    const float* k_l = k_t + lc * T::kStride;
    // Each score sums 8 products in a chain of its own and adds that to the total: a single chain of
    // head_dim FMAs rounds at the total's magnitude head_dim times, which at large logits (qk_range 30, d64)
    // gave LSE errors 2.7x the same-precision reference's (tests: ..._qk30).
#pragma unroll 1
    for (int d = 0; d < T::kHeadDim; d += 8) {
      float4 qa[kRowsPerLane], qb[kRowsPerLane];
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) {
        qa[i] = *reinterpret_cast<const float4*>(q_l + 4 * i * T::kStride + d);
        qb[i] = *reinterpret_cast<const float4*>(q_l + 4 * i * T::kStride + d + 4);
      }
#pragma unroll
      for (int t = 0; t < kKeysPerLane; ++t) {
        const float4 ka = *reinterpret_cast<const float4*>(k_l + 8 * t * T::kStride + d);
        const float4 kb = *reinterpret_cast<const float4*>(k_l + 8 * t * T::kStride + d + 4);
#pragma unroll
        for (int i = 0; i < kRowsPerLane; ++i) {
          float part = qa[i].x * ka.x;
          part = fmaf(qa[i].y, ka.y, part);
          part = fmaf(qa[i].z, ka.z, part);
          part = fmaf(qa[i].w, ka.w, part);
          part = fmaf(qb[i].x, kb.x, part);
          part = fmaf(qb[i].y, kb.y, part);
          part = fmaf(qb[i].z, kb.z, part);
          part = fmaf(qb[i].w, kb.w, part);
          sc[i][t] += part;
        }
      }
    }

    if (ft_attn_tile_needs_mask(mask, w0, w1, n0, T::kBlockN)) {
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i)
#pragma unroll
        for (int t = 0; t < kKeysPerLane; ++t)
          if (!mask.visible(w0 + lr + 4 * i, n0 + lc + 8 * t)) sc[i][t] = neg_inf();
    }

#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      float mx = sc[i][0];
#pragma unroll
      for (int t = 1; t < kKeysPerLane; ++t) mx = fmaxf(mx, sc[i][t]);
      float alpha;
      const float base = rows[i].template advance<true>(warp_max<8>(mx) * s.scale_log2, alpha);
      float sum = 0.0f;
#pragma unroll
      for (int t = 0; t < kKeysPerLane; ++t) {
        const float p = exp2f(fmaf(sc[i][t], s.scale_log2, -base));
        sc[i][t] = p;
        sum += p;
      }
      rows[i].sum = rows[i].sum * alpha + sum;
#pragma unroll
      for (int d = 0; d < kDimsPerLane; ++d) o[i][d] *= alpha;
    }

    float* p_l = p_w + lr * T::kPStride + lc;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i)
#pragma unroll
      for (int t = 0; t < kKeysPerLane; ++t) p_l[4 * i * T::kPStride + 8 * t] = sc[i][t];
    __syncwarp();

    const float* pr = p_w + lr * T::kPStride;
#pragma unroll 1
    for (int j = 0; j < T::kBlockN; j += 4) {
      float4 pv[kRowsPerLane];
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) pv[i] = *reinterpret_cast<const float4*>(pr + 4 * i * T::kPStride + j);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float* v_row = v_t + (j + e) * T::kStride + lc * kVec;
#pragma unroll
        for (int u = 0; u < kDimGroups; ++u) {
          float vv[kVec];
          if constexpr (kVec == 4) {
            const float4 x = *reinterpret_cast<const float4*>(v_row + u * 8 * kVec);
            vv[0] = x.x, vv[1] = x.y, vv[2] = x.z, vv[3] = x.w;
          } else {
            const float2 x = *reinterpret_cast<const float2*>(v_row + u * 8 * kVec);
            vv[0] = x.x, vv[1] = x.y;
          }
#pragma unroll
          for (int i = 0; i < kRowsPerLane; ++i) {
            const float p = e == 0 ? pv[i].x : e == 1 ? pv[i].y : e == 2 ? pv[i].z : pv[i].w;
#pragma unroll
            for (int x = 0; x < kVec; ++x) o[i][u * kVec + x] = fmaf(p, vv[x], o[i][u * kVec + x]);
          }
        }
      }
    }
  }

  // O = acc / l and LSE = m ln 2 + ln l (natural log) for the warp's rows below seq_q; a row that saw nothing
  // (l = 0) gets O = 0 and LSE = -inf.
  __device__ __forceinline__ void store(const Slice& s, int w0, int lane) {
    const int lr = lane / 8, lc = lane % 8;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      float lse;
      const float inv = rows[i].template finish<true, kLearnedSinks>(warp_sum<8>(rows[i].sum), s.sink_log2, lse);
      const int row = w0 + lr + 4 * i;
      if (row >= s.seq_q) continue;
      float* o_row = s.o + row * s.o_ss + lc * kVec;
#pragma unroll
      for (int u = 0; u < kDimGroups; ++u) {
        if constexpr (kVec == 4) {
          *reinterpret_cast<float4*>(o_row + u * 8 * kVec) =
              make_float4(o[i][4 * u] * inv, o[i][4 * u + 1] * inv, o[i][4 * u + 2] * inv, o[i][4 * u + 3] * inv);
        } else {
          *reinterpret_cast<float2*>(o_row + u * 8 * kVec) = make_float2(o[i][2 * u] * inv, o[i][2 * u + 1] * inv);
        }
      }
      if (lc == 0) s.lse[row] = lse;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// TF32 tensor cores. The warp's rows are kMTiles 16-row MMA tiles; lane (g = lane / 4, t = lane % 4)
// holds rows g and g + 8 of each. S tile: kBlockN / 8 accumulator tiles; O: kHeadDim / 8.
// P feeds P V with no data movement: the S accumulators of key tile n hold P[g][2t], P[g][2t+1],
// P[g+8][2t], P[g+8][2t+1], which are the A fragment {a0, a2, a1, a3} of a k-step whose columns t, t+4
// stand for keys 2t, 2t+1 of the tile; the B fragment reads V rows in the same order (V[2t], V[2t+1]).
// The sum over keys does not care about their order, so no shuffle is needed.
template <class T, bool kCausal, bool kWindow, bool kLearnedSinks>
struct Tf32Warp {
  static constexpr int kMTiles = T::kRowsPerWarp / 16;
  static constexpr int kKeyTiles = T::kBlockN / 8;
  static constexpr int kDimTiles = T::kHeadDim / 8;  // O accumulator tiles and Q K^T k-steps
  // Q fragments stay in registers when they are few; else they are read from shared memory per tile.
  static constexpr bool kQInRegs = T::kRowsPerWarp * T::kHeadDim <= 2048;
  static constexpr int kQFrags = kQInRegs ? kMTiles * kDimTiles : 1;

  float o[kMTiles][kDimTiles][4];
  FtOnlineRow rows[kMTiles][2];  // rows g, g + 8 (the 4 lanes of a quad agree on the max, each holds a share of the sum)
  unsigned qf[kQFrags][4];

  __device__ __forceinline__ void init(const Slice& s, int) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      rows[mt][0].init(s.sink_log2), rows[mt][1].init(s.sink_log2);
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt)
#pragma unroll
        for (int c = 0; c < 4; ++c) o[mt][dt][c] = 0.0f;
    }
  }

  // A fragments of Q for m-tile mt, k-steps kd and kd + 1 (dims 8 kd .. 8 kd + 15), as tf32.
  __device__ __forceinline__ static void load_q_pair(unsigned (&a)[4], unsigned (&b)[4], const float* q_w, int mt,
                                                     int kd, int lane) {
    // Matrix i of an ldmatrix: rows 8 (i & 1) .. + 7, dims 4 (i >> 1) .. + 3 of the k-step.
    const int i = lane / 8;
    const float* row = q_w + (16 * mt + 8 * (i & 1) + lane % 8) * T::kStride + 8 * kd + 4 * (i >> 1);
    ldmatrix_x4(a, row);
    ldmatrix_x4(b, row + 8);
#pragma unroll
    for (int c = 0; c < 4; ++c) a[c] = to_tf32(__uint_as_float(a[c])), b[c] = to_tf32(__uint_as_float(b[c]));
  }

  __device__ __forceinline__ void prepare_q(const float* q_w, int lane) {
    if constexpr (kQInRegs) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int kd = 0; kd < kDimTiles; kd += 2)
          load_q_pair(qf[mt * kDimTiles + kd], qf[mt * kDimTiles + kd + 1], q_w, mt, kd, lane);
    }
  }

  __device__ __forceinline__ void tile(const Slice& s, const FtAttnMask<kCausal, kWindow>& mask, const float* q_w,
                                       const float* k_t, const float* v_t, float*, int w0, int w1, int n0,
                                       int lane) {
    const int g = lane / 4, tq = lane % 4;
    float sc[kMTiles][kKeyTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) sc[mt][nt][c] = 0.0f;

    // S = Q K^T. K[key][dim] row-major is B (dim x key) column-major: one ldmatrix.x4 gives b0, b1 of
    // two k-steps for 8 keys (matrix i: dims 4 i .. 4 i + 3 of the pair).
    const float* k_l = k_t + (lane % 8) * T::kStride + 4 * (lane / 8);
#pragma unroll
    for (int kd = 0; kd < kDimTiles; kd += 2) {
      unsigned qa[kMTiles][2][4];
      if constexpr (!kQInRegs) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) load_q_pair(qa[mt][0], qa[mt][1], q_w, mt, kd, lane);
      }
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        unsigned kb[4];
        ldmatrix_x4(kb, k_l + 8 * nt * T::kStride + 8 * kd);
#pragma unroll
        for (int c = 0; c < 4; ++c) kb[c] = to_tf32(__uint_as_float(kb[c]));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          if constexpr (kQInRegs) {
            mma_tf32(sc[mt][nt], qf[mt * kDimTiles + kd], kb[0], kb[1]);
            mma_tf32(sc[mt][nt], qf[mt * kDimTiles + kd + 1], kb[2], kb[3]);
          } else {
            mma_tf32(sc[mt][nt], qa[mt][0], kb[0], kb[1]);
            mma_tf32(sc[mt][nt], qa[mt][1], kb[2], kb[3]);
          }
        }
      }
    }

    // The mask in place (one copy of the softmax: two, as ft_if_masked makes, spill the heaviest configs), then
    // the online softmax per row (ft_softmax_tile); P is rounded to tf32 there, and the row sum adds the rounded
    // values, so O is exactly the weighted mean the tensor cores form.
    if (ft_attn_tile_needs_mask(mask, w0, w1, n0, T::kBlockN)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (!mask.visible(w0 + 16 * mt + g + 8 * (c / 2), n0 + 8 * nt + 2 * tq + c % 2)) sc[mt][nt][c] = neg_inf();
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      float alpha[2];
      ft_softmax_tile<true, false>(sc[mt], rows[mt], s.scale_log2, [](int, int) { return true; },
                                   [](float p) { return __uint_as_float(to_tf32(p)); }, alpha);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int dt = 0; dt < kDimTiles; ++dt) o[mt][dt][2 * h] *= alpha[h], o[mt][dt][2 * h + 1] *= alpha[h];
    }

    // O += P V, one k-step per key tile nt. V[key][dim] is read as B (key x dim) with scalar loads:
    // b0 = V[8 nt + 2 tq][8 dt + g], b1 = the next key row.
    const float* v_l = v_t + 2 * tq * T::kStride + g;
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
      unsigned pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = __float_as_uint(sc[mt][nt][0]);
        pa[mt][1] = __float_as_uint(sc[mt][nt][2]);
        pa[mt][2] = __float_as_uint(sc[mt][nt][1]);
        pa[mt][3] = __float_as_uint(sc[mt][nt][3]);
      }
      const float* v_n = v_l + 8 * nt * T::kStride;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt) {
        const unsigned b0 = to_tf32(v_n[8 * dt]), b1 = to_tf32(v_n[T::kStride + 8 * dt]);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) mma_tf32(o[mt][dt], pa[mt], b0, b1);
      }
    }
  }

  __device__ __forceinline__ void store(const Slice& s, int w0, int lane) {
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float lse;
        const float inv = rows[mt][h].template finish<true, kLearnedSinks>(warp_sum<4>(rows[mt][h].sum), s.sink_log2, lse);
        const int row = w0 + 16 * mt + g + 8 * h;
        if (row >= s.seq_q) continue;
        float* o_row = s.o + row * s.o_ss + 2 * tq;
#pragma unroll
        for (int dt = 0; dt < kDimTiles; ++dt)
          *reinterpret_cast<float2*>(o_row + 8 * dt) = make_float2(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
        if (tq == 0) s.lse[row] = lse;
      }
  }
};

}  // namespace ft_attn_f32

// ---------------------------------------------------------------------------------------------
// The kernel. Grid (ceil(seq_q / kBlockM), heads_q, batch), 32 * kWarps threads, dynamic shared memory
// Q tile + kStages (K, V) tiles (+ P for FFMA), all rows padded to kHeadDim + 4 floats (the host's
// attn_f32::dynamic_smem_bytes). Strides in elements; rows of Q, K, V, O must start 16-byte aligned
// (row strides multiples of 4), as cp.async and the vector stores need.
// __launch_bounds__(threads, 1): without the minimum of one block, ptxas aims at occupancy register
// targets (128, 168) and spills a few bytes in some configs; shared memory, not registers, bounds the
// blocks per SM of most configs anyway.
template <int kHeadDim, int kBlockM, int kBlockN, int kWarps, int kStages, bool kTf32, bool kCausal, bool kWindow,
          bool kLearnedSinks>
__global__ void __launch_bounds__(32 * kWarps, 1)
    attn_fwd_f32_kernel(const __grid_constant__ FtAttnFwdParams<float> p) {
  using namespace ft_attn_f32;
  using T = Traits<kHeadDim, kBlockM, kBlockN, kWarps, kStages>;
  using Warp = typename FtSelect<kTf32, Tf32Warp<T, kCausal, kWindow, kLearnedSinks>,
                               FfmaWarp<T, kCausal, kWindow, kLearnedSinks>>::type;
  extern __shared__ float4 ft_attn_f32_smem[];
  float* const s_q = reinterpret_cast<float*>(ft_attn_f32_smem);
  float* const s_k = s_q + kBlockM * T::kStride;
  float* const s_v = s_k + kStages * T::kTileFloats;
  float* const s_p = s_v + kStages * T::kTileFloats;  // FFMA only

  const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  Slice s;
  s.q = p.q + b * p.q_sb + h * p.q_sh;
  s.k = p.k + b * p.k_sb + h_kv * p.k_sh;
  s.v = p.v + b * p.v_sb + h_kv * p.v_sh;
  s.o = p.o + b * p.o_sb + h * p.o_sh;
  s.lse = p.lse + (static_cast<long long>(b) * p.heads_q + h) * p.seq_q;
  s.q_ss = p.q_ss, s.k_ss = p.k_ss, s.v_ss = p.v_ss, s.o_ss = p.o_ss;
  s.seq_q = p.seq_q;
  s.scale_log2 = p.scale_log2;
  s.sink_log2 = kLearnedSinks ? p.sinks[h] * 1.4426950408889634f : neg_inf();

  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.x * kBlockM, m1 = min(m0 + kBlockM, p.seq_q);
  const int w0 = m0 + warp * T::kRowsPerWarp, w1 = min(w0 + T::kRowsPerWarp, p.seq_q);
  const FtAttnTiles<kCausal, kWindow> tiles(mask, m0, m1, kBlockN);
  const int n_tiles = tiles.count();

  // cp.async groups, oldest first: Q, then one per K/V tile (empty ones past the last tile keep the count
  // regular), so "all but the newest kStages - 1 groups done" means: Q and tile t are in shared memory.
  load_rows_async<kBlockM, kHeadDim, T::kThreads>(s_q, s.q, p.q_ss, m0, p.seq_q);
  cp_async_commit();
  auto load_kv = [&](int t) {
    const int n0 = tiles.tile(t) * kBlockN, buf = t % kStages;
    load_rows_async<kBlockN, kHeadDim, T::kThreads>(s_k + buf * T::kTileFloats, s.k, p.k_ss, n0, p.seq_k);
    load_rows_async<kBlockN, kHeadDim, T::kThreads>(s_v + buf * T::kTileFloats, s.v, p.v_ss, n0, p.seq_k);
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < n_tiles) load_kv(t);
    cp_async_commit();
  }

  Warp acc;
  acc.init(s, lane);
  const float* q_w = s_q + warp * T::kRowsPerWarp * T::kStride;
  float* p_w = s_p + warp * T::kRowsPerWarp * T::kPStride;
  cp_async_wait<kStages - 1>();  // Q
  __syncthreads();
  acc.prepare_q(q_w, lane);

  for (int t = 0; t < n_tiles; ++t) {
    if (t + kStages - 1 < n_tiles) load_kv(t + kStages - 1);  // into the buffer freed at the end of t - 1
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    const int n0 = tiles.tile(t) * kBlockN, buf = t % kStages;
    if (ft_attn_tile_has_work(mask, w0, w1, n0, kBlockN))
      acc.tile(s, mask, q_w, s_k + buf * T::kTileFloats, s_v + buf * T::kTileFloats, p_w, w0, w1, n0, lane);
    __syncthreads();  // every warp is done with buffer t % kStages before it is refilled
  }
  cp_async_wait<0>();
  acc.store(s, w0, lane);
}
