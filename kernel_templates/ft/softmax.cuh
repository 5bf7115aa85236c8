// kernel_templates/ft/softmax.cuh: the softmax, written once for every kernel.
//   OnlineStats          the merge form (running max and sum of two partial states): the row kernels.
//   FtOnlineRow / ...    the streaming form of the attention forwards: a row's running max and sum advance one
//                        key tile at a time, the output is rescaled by alpha, and the row ends with its LSE. One
//                        convention for every forward: scores in the log2 domain (score * scale * log2 e, one
//                        FMA), the running max in those units, a learned sink as the row's starting max whose
//                        exp2 joins the sum at the end.
//   ft_prob_from_lse     the backward's P, recomputed from a raw score and the row's LSE.
// kExact: exp2f and a natural-log LSE (the fp32 kernels, held to the fp32 reference); else ex2.approx.
#pragma once

#include "ft/mask.cuh"
#include "ft/math.cuh"
#include "ft/warp.cuh"

// ---------------------------------------------------------------------------------------------
// Merge form: running max m and running sum s of exp(x - m). Merging two partial states rescales each sum to
// the common max; an empty state is (-inf, 0).
struct OnlineStats {
  float max;
  float sum;
};
__device__ __forceinline__ OnlineStats online_empty() { return {-__int_as_float(0x7f800000), 0.0f}; }
__device__ __forceinline__ OnlineStats online_merge(OnlineStats a, OnlineStats b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -__int_as_float(0x7f800000)) return a;  // both empty
  return {m, a.sum * exp_of(a.max - m) + b.sum * exp_of(b.max - m)};
}
template <int kWidth = 32>
__device__ __forceinline__ OnlineStats warp_online_merge(OnlineStats s) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    OnlineStats other{__shfl_xor_sync(kFullMask, s.max, offset), __shfl_xor_sync(kFullMask, s.sum, offset)};
    s = online_merge(s, other);
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Streaming form. One query row as one lane holds it: the lanes that share the row hold the same max and each
// a share of the sum (added at the end).
struct FtOnlineRow {
  float max;  ///< running max of the row's scores, log2 units (score * scale * log2 e); -inf before any key
  float sum;  ///< this lane's share of sum exp2(score - max)

  /// A row with no key seen yet; `sink_log2` (a learned sink logit * log2 e, or -inf) starts the max, so that a
  /// sink far above the scores cannot overflow the sum.
  __device__ __forceinline__ void init(float sink_log2) {
    max = sink_log2;
    sum = 0.f;
  }
  /// Moves the max to include a key tile whose largest score is `tile_max` (log2 units, over all lanes of the
  /// row; -inf when none is visible). Returns the base to subtract from the tile's scores; alpha = exp2(old max
  /// - base) rescales the sum (done here when the caller passes the tile's sum to add) and the output.
  /// kLazy (FA4's lazy rescale): the max moves only when the tile's exceeds it by more than 8 (a factor 256);
  /// otherwise the old max stays the base (alpha = 1: the caller may skip the rescale), so the tile's
  /// probabilities may reach 2^8, well inside fp16 / bf16 and the fp32 sums. The LSE and O use the max it keeps.
  template <bool kExact, bool kLazy = false>
  __device__ __forceinline__ float advance(float tile_max, float& alpha) {
    if (kLazy && tile_max - max <= 8.f) {  // false while the row is empty (max = -inf) or the tile is (NaN)
      alpha = 1.f;
      return max;
    }
    const float m_new = fmaxf(max, tile_max);
    const float base = m_new == -__int_as_float(0x7f800000) ? 0.f : m_new;  // exp2(-inf - 0) = 0, not NaN
    alpha = ft_exp2_as<kExact>(max - base);  // 0 while the row was empty
    max = m_new;
    return base;
  }
  /// The row's end, with `total` the sum over its lanes: the output's scale (1 / l, 0 for a row that saw
  /// nothing) and the LSE (natural log, -inf for such a row); a learned sink adds exp2(sink_log2 - max) to l.
  template <bool kExact, bool kLearnedSinks>
  __device__ __forceinline__ float finish(float total, float sink_log2, float& lse) const {
    const float kLn2 = 0.6931471805599453f;
    const float base = max == -__int_as_float(0x7f800000) ? 0.f : max;
    if (kLearnedSinks) total += ft_exp2_as<kExact>(sink_log2 - base);
    if (kExact)
      lse = total > 0.f ? fmaf(base, kLn2, logf(total)) : -__int_as_float(0x7f800000);
    else
      lse = total > 0.f ? (base + log2f(total)) * kLn2 : -__int_as_float(0x7f800000);
    return total > 0.f ? 1.f / total : 0.f;
  }
};

// A thread's two rows (r = 0: g, 1: g + 8) before any key: sink_log2[r] = the learned sink logit sink_of(r) * log2 e
// (kLearnedSinks), else -inf, starts each row's max (FtOnlineRow::init) and is kept for FtOnlineRow::finish.
template <bool kLearnedSinks, typename SinkOf>
__device__ __forceinline__ void ft_online_rows_init(FtOnlineRow (&rows)[2], float (&sink_log2)[2], SinkOf sink_of) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sink_log2[r] = kLearnedSinks ? sink_of(r) * 1.4426950408889634f : -__int_as_float(0x7f800000);
    rows[r].init(sink_log2[r]);
  }
}

// One key tile of the streaming softmax on a 16-row accumulator tile in the mma.sync / wgmma / TF32 layout
// (ft/mma.cuh: element 2 r + e of 8-column tile nt is row g + 8 r, key 8 nt + 2 t4 + e of the tile; the quad's
// 4 lanes share a row). s holds the raw scores Q.K in, the unnormalized P = exp2(score - base) out (0 where not
// visible); rows[r] advances; alpha[r] is left for the caller to scale the output rows with. kMasked:
// visible(r, key) says whether row r sees key `key` of the tile (boundary tiles only, ft_if_masked). round_p
// rounds each probability before the sum adds it (TF32: the sum is then of the values the tensor cores use).
// kPoly >= 2: in interior tiles (no -inf), 8-key tile nt with nt % kPoly == kPoly - 1 takes its exponentials on the
// FMA pipe (ft_exp2_poly), the others on the SFU; 1: all on the SFU. kLazy: FtOnlineRow::advance's lazy rescale.
template <bool kExact, bool kMasked, int kPoly = 1, bool kLazy = false, int kNT, typename Visible, typename RoundP>
__device__ __forceinline__ void ft_softmax_tile(float (&s)[kNT][4], FtOnlineRow (&rows)[2], float scale_log2,
                                                Visible visible, RoundP round_p, float (&alpha)[2]) {
  const float kNegInf = -__int_as_float(0x7f800000);
  const int t4 = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = kNegInf;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[nt][2 * r + e];
        if (kMasked && !visible(r, nt * 8 + 2 * t4 + e)) x = kNegInf;
        mx = fmaxf(mx, x);
      }
    mx = warp_max<4>(mx);
    const float base = rows[r].template advance<kExact, kLazy>(mx * scale_log2, alpha[r]);
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[nt][2 * r + e];
        const float arg = fmaf(x, scale_log2, -base);
        if (!kExact && !kMasked && kPoly >= 2 && nt % kPoly == kPoly - 1)  // constant once unrolled
          x = round_p(ft_exp2_poly(arg));
        else
          x = round_p(ft_exp2_as<kExact>(arg));
        sum += x;
      }
    rows[r].sum = rows[r].sum * alpha[r] + sum;
  }
}
// ft_softmax_tile with the element-wise mask only where `masked` (a boundary tile; ft/mask.cuh ft_if_masked):
// two copies, interior tiles skip visible().
template <bool kExact, int kPoly = 1, bool kLazy = false, int kNT, typename Visible, typename RoundP>
__device__ __forceinline__ void ft_softmax_tile_if(bool masked, float (&s)[kNT][4], FtOnlineRow (&rows)[2],
                                                   float scale_log2, Visible visible, RoundP round_p, float (&alpha)[2]) {
  ft_if_masked(masked, [&](auto m) {
    ft_softmax_tile<kExact, decltype(m)::value, kPoly, kLazy>(s, rows, scale_log2, visible, round_p, alpha);
  });
}
// The output's rows times the alphas of a softmax step: acc holds kCols columns of rows g (r = 0) and g + 8
// (r = 1) in the accumulator layout (element 4 dt + 2 r + e; ft/mma.cuh, ft/wgmma.cuh).
template <int kCols>
__device__ __forceinline__ void ft_rescale_rows(float* acc, const float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int dt = 0; dt < kCols / 8; ++dt) acc[dt * 4 + 2 * r] *= alpha[r], acc[dt * 4 + 2 * r + 1] *= alpha[r];
}
/// ft_softmax_tile's round_p for 16-bit and exact kernels: none (P V rounds P to T itself).
struct FtNoRounding {
  __device__ __forceinline__ float operator()(float x) const { return x; }
};

// ---------------------------------------------------------------------------------------------
// The backward's P: 2^(S scale log2 e - LSE log2 e), the softmax probability of a raw score S = Q.K whose row
// has log-sum-exp LSE (natural log; pass lse_log2 = LSE * log2 e). 0 where the pair is not visible is the
// caller's (it knows the layout).
template <bool kExact>
__device__ __forceinline__ float ft_prob_from_lse(float s, float scale_log2, float lse_log2) {
  return ft_exp2_as<kExact>(fmaf(s, scale_log2, -lse_log2));
}
