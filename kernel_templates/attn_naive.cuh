// kernel_templates/attn_naive.cuh: the middle step of the naive attention baseline (attn_naive family):
// S = scale * Q K^T was materialized by a cuBLAS GEMM (batch, heads_q, seq_q, seq_k); this kernel turns
// each row of S into P in place, P_ij = exp(S_ij - LSE_i) on visible keys and 0 elsewhere, and writes
// LSE_i = log(sum_visible exp(S_ij) [+ exp(sink_h)]) (natural log, fp32); a cuBLAS GEMM then makes O = P V.
// The mask and sink rules are ft/mask.cuh's (DESIGN.md "Attention conventions"); a row with no
// visible key gets P = 0 (so O = 0) and LSE = -inf, or LSE = sink_h with a learned sink.
//
// One block per row (blocks stride over rows): one pass keeps each thread's running (max, sum), merged
// across the block; a second pass writes P. T is S's storage type (float, ft_half, ft_bf16); math in fp32.
// Rows are read with 16-byte loads when seq_k keeps them 16-byte aligned, element by element otherwise.
#include "attn_params.cuh"
#include "ft/mask.cuh"
#include "ft/softmax.cuh"
#include "ft/types.cuh"
#include "ft/warp.cuh"

// __launch_bounds__(kBlockThreads, 1): without the minimum of one block per SM, ptxas (NVRTC 13.0,
// sm_80) holds 1024-thread instantiations to 32 registers and spills.
template <typename T, int kBlockThreads, bool kCausal, bool kWindow, bool kLearnedSinks>
__global__ void __launch_bounds__(kBlockThreads, 1)
    attn_naive_softmax_kernel(const __grid_constant__ FtAttnNaiveParams<T> p) {
  T* const __restrict__ s = p.s;
  float* const __restrict__ lse = p.lse;
  const float* const __restrict__ sinks = p.sinks;
  const long long rows = p.rows;
  const int heads_q = p.heads_q, seq_q = p.seq_q, seq_k = p.seq_k, window = p.window, sink_tokens = p.sink_tokens;
  static_assert(kBlockThreads % 32 == 0 && kBlockThreads >= 32 && kBlockThreads <= 1024,
                "whole warps, at most 1024 threads");
  constexpr int kWarps = kBlockThreads / 32;
  constexpr int kVec = 16 / sizeof(T);
  const float neg_inf = -__int_as_float(0x7f800000);

  __shared__ OnlineStats warp_stats[kWarps];
  __shared__ OnlineStats row_stats;

  const FtAttnMask<kCausal, kWindow> mask(seq_q, seq_k, window, sink_tokens);
  const bool vectorized = seq_k % kVec == 0 && is_aligned_for_vec<kVec>(s);

  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const int i = static_cast<int>(row % seq_q);
    T* s_row = s + row * static_cast<long long>(seq_k);

    // Pass 1: this thread's running max m and sum l of exp(S - m) over its visible keys.
    float m = neg_inf, l = 0.0f;
    auto add = [&](float x) {
      if (x > m) {
        l = l * exp_of(m - x) + 1.0f;
        m = x;
      } else {
        l += exp_of(x - m);
      }
    };
    if (vectorized) {
      for (int j0 = threadIdx.x * kVec; j0 < seq_k; j0 += kBlockThreads * kVec) {
        const FtVec<T, kVec> v = load_vec<T, kVec>(s_row + j0);
#pragma unroll
        for (int c = 0; c < kVec; ++c)
          if (mask.visible(i, j0 + c)) add(to_float(v.v[c]));
      }
    } else {
      for (int j = threadIdx.x; j < seq_k; j += kBlockThreads)
        if (mask.visible(i, j)) add(to_float(s_row[j]));
    }

    // The row's statistics: shuffles within each warp, then one thread merges the warps and the sink.
    OnlineStats stats = warp_online_merge(OnlineStats{m, l});
    if (threadIdx.x % 32 == 0) warp_stats[threadIdx.x / 32] = stats;
    __syncthreads();
    if (threadIdx.x == 0) {
      OnlineStats all = warp_stats[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) all = online_merge(all, warp_stats[w]);
      if (kLearnedSinks) all = online_merge(all, OnlineStats{sinks[(row / seq_q) % heads_q], 1.0f});
      row_stats = all;
      lse[row] = all.max == neg_inf ? neg_inf : all.max + logf(all.sum);
    }
    __syncthreads();
    const float row_max = row_stats.max;
    const float inv_sum = row_max == neg_inf ? 0.0f : 1.0f / row_stats.sum;  // empty row: P = 0

    // Pass 2: P in place; masked keys get 0 so that the P V GEMM ignores them.
    auto prob = [&](float x, int j) { return mask.visible(i, j) ? exp_of(x - row_max) * inv_sum : 0.0f; };
    if (vectorized) {
      for (int j0 = threadIdx.x * kVec; j0 < seq_k; j0 += kBlockThreads * kVec) {
        FtVec<T, kVec> v = load_vec<T, kVec>(s_row + j0);
#pragma unroll
        for (int c = 0; c < kVec; ++c) v.v[c] = from_float<T>(prob(to_float(v.v[c]), j0 + c));
        store_vec<T, kVec>(s_row + j0, v);
      }
    } else {
      for (int j = threadIdx.x; j < seq_k; j += kBlockThreads) s_row[j] = from_float<T>(prob(to_float(s_row[j]), j));
    }
  }
}
