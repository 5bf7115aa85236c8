// kernel_templates/attn_bwd_rows.cuh: the attention backward's two row kernels (the attn_bwd_preprocess and
// attn_bwd_dsink families):
//   preprocess  D_i = rowsum(dO_i * O_i), fp32
//   dsink       d s_h = -sum_{b, i} exp(s_h - LSE_bhi) D_bhi, one block per head, fixed order (deterministic)
// LSE and D are (batch, heads_q, seq_q) fp32; dO shares O's (Q's) strides.
#pragma once

#include "attn_params.cuh"
#include "ft/math.cuh"
#include "ft/types.cuh"
#include "ft/warp.cuh"

// ---------------------------------------------------------------------------------------------
// D = rowsum(dO * O) in fp32: one block per (block_m rows, query head, batch); kHeadDim / kVec lanes per
// row, each reading 16 bytes (kVec = 8 fp16 / bf16 or 4 fp32 elements) of O and dO.
template <typename T, int kHeadDim, int kBlockM, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_preprocess_kernel(const __grid_constant__ FtAttnBwdParams<T> p) {
  enum : int { kVec = 16 / sizeof(T), kLanes = kHeadDim / kVec, kRowsPerPass = 32 / kLanes };
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "head_dim / kVec lanes per row");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y, b = blockIdx.z, m0 = blockIdx.x * kBlockM;
  const long long head = b * p.q_sb + h * p.q_sh;
  for (int base = warp * kRowsPerPass; base < kBlockM; base += kWarps * kRowsPerPass) {
    const int row = m0 + base + lane / kLanes;
    const bool in = base + lane / kLanes < kBlockM && row < p.seq_q;
    float sum = 0.f;
    if (in) {
      const long long off = head + row * p.q_ss + (lane % kLanes) * kVec;
      const FtVec<T, kVec> a = load_vec<T, kVec>(p.o + off), d = load_vec<T, kVec>(p.dout + off);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum = fmaf(to_float(a.v[e]), to_float(d.v[e]), sum);
    }
    sum = warp_sum<kLanes>(sum);
    if (in && lane % kLanes == 0) p.delta[(static_cast<long long>(b) * p.heads_q + h) * p.seq_q + row] = sum;
  }
}

// ---------------------------------------------------------------------------------------------
// d s_h = -sum_{b, i} exp(s_h - LSE_bhi) D_bhi: one block per query head, each thread a strided partial
// sum, then the warps' sums added in warp order: the same bits on every run.
template <int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dsink_kernel(const __grid_constant__ FtAttnBwdParams<float> p) {
  __shared__ float part[kWarps];
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float s = p.sinks[h];
  float sum = 0.f;
  for (int b = 0; b < p.batch; ++b) {
    const long long row0 = (static_cast<long long>(b) * p.heads_q + h) * p.seq_q;
    for (int i = threadIdx.x; i < p.seq_q; i += kWarps * 32) sum += exp_of(s - p.lse[row0 + i]) * p.delta[row0 + i];
  }
  sum = warp_sum(sum);
  if (lane == 0) part[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += part[w];
    p.dsinks[h] = -total;
  }
}
