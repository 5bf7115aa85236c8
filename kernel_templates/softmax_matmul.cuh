// kernel_templates/softmax_matmul.cuh: out[b] = softmax(X[b]) @ V[b] without materializing softmax(X)
// (course part 1): X (batch, d1, d2), V (batch, d2, d3), out (batch, d1, d3), row-major, one pass over d2.
// A block owns kBlockM rows of X and kBlockN columns of out; per chunk of kBlockK columns of X it updates
// each row's running max m and sum l (online softmax), rescales its accumulators by e^(m_old - m_new) and
// adds exp(X_chunk - m_new) @ V_chunk; at the end out = acc / l. Memory is linear: one X tile and one V
// tile in shared memory, never a d1 x d2 intermediate.
//
// T: float, ft_half or ft_bf16 (X, V and out); all math in fp32 (FFMA, no tensor cores). Any d1, d2, d3:
// chunks past d2 read as -inf (weight 0), rows past d1 and columns past d3 are computed but not stored.
#include "ft/math.cuh"
#include "ft/types.cuh"

// The tile shape and how the block's threads share it. Each thread accumulates a kThreadM x kThreadN
// tile of out: kThreadM consecutive rows, and kThreadN columns as one (kThreadN 4) or two (kThreadN 8,
// the second half kBlockN / 2 further) groups of 4 consecutive columns, so that shared-memory reads are
// 16-byte and conflict-free. For the softmax statistics, kSplit threads share each row of the chunk.
template <int kBlockM_, int kBlockN_, int kBlockK_, int kNumWarps_>
struct SoftmaxMatmulTraits {
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kBlockK = kBlockK_;
  static constexpr int kThreads = 32 * kNumWarps_;
  static constexpr int kPerThread = kBlockM * kBlockN / kThreads;  ///< outputs per thread: 16, 32 or 64
  static constexpr int kThreadN = kPerThread >= 64 ? 8 : 4;
  static constexpr int kThreadM = kPerThread / kThreadN;
  static constexpr int kThreadsN = kBlockN / kThreadN;  ///< threads along a row of the out tile
  static constexpr int kPadM = kBlockM + 4;             ///< row length of the transposed X tile
  static constexpr int kSplit = kThreads >= kBlockM ? kThreads / kBlockM : 1;
  static constexpr int kStatRows = kThreads / kSplit;  ///< rows whose statistics one pass covers
  static constexpr int kRowPasses = kBlockM / kStatRows;

  static_assert(kBlockM * kBlockN % kThreads == 0, "the out tile splits evenly over the threads");
  static_assert(kPerThread == 16 || kPerThread == 32 || kPerThread == 64, "16, 32 or 64 outputs per thread");
  static_assert(kBlockN % kThreadN == 0 && kThreads % kThreadsN == 0, "threads cover the out tile's columns");
  static_assert((kThreads / kThreadsN) * kThreadM == kBlockM, "threads cover the out tile's rows");
  static_assert(kThreads % kBlockM == 0 || kBlockM % kThreads == 0, "rows split evenly for the statistics");
  static_assert(kBlockK >= 1 && kBlockM % 4 == 0, "16-byte reads of the X tile");
};

// Column j (< kThreadN) of thread tx's out tile: 4 consecutive columns, then (kThreadN 8) 4 more half a
// tile further on.
template <int kBlockN>
__device__ __forceinline__ int softmax_matmul_col(int tx, int j) {
  return (j < 4 ? 0 : kBlockN / 2) + tx * 4 + (j & 3);
}

// __launch_bounds__(threads, 1): with the thread count alone, ptxas (NVRTC 13.0) caps some
// instantiations at 48 registers and spills (e.g. <ft_half, 32, 64, 16, 4> on sm_90a).
template <typename T, int kBlockM, int kBlockN, int kBlockK, int kNumWarps>
__global__ void __launch_bounds__(32 * kNumWarps, 1)
    softmax_matmul_kernel(const T* __restrict__ x, const T* __restrict__ v, T* __restrict__ out, int d1, int d2,
                          int d3) {
  using Tr = SoftmaxMatmulTraits<kBlockM, kBlockN, kBlockK, kNumWarps>;
  constexpr int kThreads = Tr::kThreads, kThreadM = Tr::kThreadM, kThreadN = Tr::kThreadN;
  constexpr int kPadM = Tr::kPadM, kSplit = Tr::kSplit, kStatRows = Tr::kStatRows, kRowPasses = Tr::kRowPasses;
  const float neg_inf = -__int_as_float(0x7f800000);

  // Shared memory (fp32): the chunk of X transposed (k-major, so a thread's rows are one 16-byte read),
  // then exp(X - m); the chunk of V; per-row partial maxima and sums of the kSplit threads of a row; the
  // rescale factor, running max and running sum of each row.
  extern __shared__ float4 smem_raw[];
  float* xs = reinterpret_cast<float*>(smem_raw);  // [kBlockK][kPadM]
  float* vs = xs + kBlockK * kPadM;                 // [kBlockK][kBlockN]
  float* part_max = vs + kBlockK * kBlockN;         // [kSplit][kBlockM]
  float* part_sum = part_max + kSplit * kBlockM;    // [kSplit][kBlockM]
  float* row_alpha = part_sum + kSplit * kBlockM;   // [kBlockM]
  float* row_max = row_alpha + kBlockM;             // [kBlockM]
  float* row_sum = row_max + kBlockM;               // [kBlockM]

  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kBlockN, m0 = blockIdx.y * kBlockM;
  const long long batch = blockIdx.z;
  const T* xb = x + batch * d1 * static_cast<long long>(d2);
  const T* vb = v + batch * d2 * static_cast<long long>(d3);
  T* ob = out + batch * d1 * static_cast<long long>(d3);

  // This thread's out tile: rows ty * kThreadM + i, columns softmax_matmul_col<kBlockN>(tx, j).
  const int tx = tid % Tr::kThreadsN, ty = tid / Tr::kThreadsN;
  // Its rows for the statistics: stat_row + pass * kStatRows, chunk columns g, g + kSplit, ...
  const int stat_row = tid % kStatRows, g = tid / kStatRows;

  float acc[kThreadM][kThreadN];
#pragma unroll
  for (int i = 0; i < kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) acc[i][j] = 0.0f;
  for (int r = tid; r < kBlockM; r += kThreads) row_max[r] = neg_inf, row_sum[r] = 0.0f;
  float new_max[kRowPasses];

  for (int k0 = 0; k0 < d2; k0 += kBlockK) {
    // 1. Load the chunk (coalesced along d2 for X, along d3 for V), widened to fp32.
    for (int e = tid; e < kBlockM * kBlockK; e += kThreads) {
      const int r = e / kBlockK, kk = e % kBlockK;
      const int gr = m0 + r, gk = k0 + kk;
      float val = neg_inf;  // past d2: weight e^-inf = 0
      if (gk < d2) val = gr < d1 ? to_float(xb[gr * static_cast<long long>(d2) + gk]) : 0.0f;
      xs[kk * kPadM + r] = val;
    }
    for (int e = tid; e < kBlockK * kBlockN; e += kThreads) {
      const int kk = e / kBlockN, n = e % kBlockN;
      const int gk = k0 + kk, gn = n0 + n;
      vs[kk * kBlockN + n] = gk < d2 && gn < d3 ? to_float(vb[gk * static_cast<long long>(d3) + gn]) : 0.0f;
    }
    __syncthreads();

    // 2. Partial maxima of the chunk's rows.
#pragma unroll
    for (int pass = 0; pass < kRowPasses; ++pass) {
      const int r = stat_row + pass * kStatRows;
      float m = neg_inf;
      for (int kk = g; kk < kBlockK; kk += kSplit) m = fmaxf(m, xs[kk * kPadM + r]);
      part_max[g * kBlockM + r] = m;
    }
    __syncthreads();

    // 3. The new running max; X becomes exp(X - m_new) in place; partial sums; the rescale factor.
#pragma unroll
    for (int pass = 0; pass < kRowPasses; ++pass) {
      const int r = stat_row + pass * kStatRows;
      float m = row_max[r];
#pragma unroll
      for (int s = 0; s < kSplit; ++s) m = fmaxf(m, part_max[s * kBlockM + r]);
      new_max[pass] = m;
      float sum = 0.0f;
      for (int kk = g; kk < kBlockK; kk += kSplit) {
        const float p = exp_of(xs[kk * kPadM + r] - m);
        xs[kk * kPadM + r] = p;
        sum += p;
      }
      part_sum[g * kBlockM + r] = sum;
      if (g == 0) row_alpha[r] = exp_of(row_max[r] - m);  // 0 on the first chunk (m_old = -inf)
    }
    __syncthreads();

    // 4. One thread per row updates its running statistics; every thread rescales its accumulators and
    //    adds P_chunk @ V_chunk.
    if (g == 0) {
#pragma unroll
      for (int pass = 0; pass < kRowPasses; ++pass) {
        const int r = stat_row + pass * kStatRows;
        float sum = 0.0f;
#pragma unroll
        for (int s = 0; s < kSplit; ++s) sum += part_sum[s * kBlockM + r];
        row_sum[r] = row_sum[r] * row_alpha[r] + sum;
        row_max[r] = new_max[pass];
      }
    }
#pragma unroll
    for (int i = 0; i < kThreadM; ++i) {
      const float alpha = row_alpha[ty * kThreadM + i];
#pragma unroll
      for (int j = 0; j < kThreadN; ++j) acc[i][j] *= alpha;
    }
#pragma unroll 4
    for (int kk = 0; kk < kBlockK; ++kk) {
      float a[kThreadM], b[kThreadN];
#pragma unroll
      for (int i = 0; i < kThreadM; i += 4) {
        const float4 t = *reinterpret_cast<const float4*>(xs + kk * kPadM + ty * kThreadM + i);
        a[i] = t.x, a[i + 1] = t.y, a[i + 2] = t.z, a[i + 3] = t.w;
      }
#pragma unroll
      for (int j = 0; j < kThreadN; j += 4) {
        const float4 t = *reinterpret_cast<const float4*>(vs + kk * kBlockN + softmax_matmul_col<kBlockN>(tx, j));
        b[j] = t.x, b[j + 1] = t.y, b[j + 2] = t.z, b[j + 3] = t.w;
      }
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // the next chunk overwrites xs and vs
  }

  // out = acc / l. (row_sum was last written before the loop's final barrier.)
#pragma unroll
  for (int i = 0; i < kThreadM; ++i) {
    const int r = ty * kThreadM + i, gr = m0 + r;
    if (gr >= d1) continue;
    const float inv_sum = 1.0f / row_sum[r];
    T* o_row = ob + gr * static_cast<long long>(d3);
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) {
      const int gn = n0 + softmax_matmul_col<kBlockN>(tx, j);
      if (gn < d3) o_row[gn] = from_float<T>(acc[i][j] * inv_sum);
    }
  }
}
