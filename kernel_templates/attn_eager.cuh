// kernel_templates/attn_eager.cuh: the element-wise and row operations of the attn_eager baseline, which
// replays eager PyTorch's naive attention (the seeds' "PyTorch (Naive)") op for op; the two matmuls are
// cuBLAS calls made by the host (harness/kernels/attn_eager.cpp). One kernel, one PyTorch op per launch:
// `op` picks the operation, each reads its operands and writes a buffer of its own (or its output in
// place where PyTorch's op is in place: masked_fill_, exp_, log_, add_), so every intermediate the eager
// code holds is materialized here too. Values of AttnEagerOp match the host's EagerOp.
//
// Element-wise ops stride over n elements (the big ones, scale, casts and exp, four consecutive elements per
// thread in one vector access, as PyTorch's vectorized element-wise kernels do); row ops (softmax, row max /
// sum, and masked_fill and the row subtraction, which so need no 64-bit division per element) run one block
// per row (blocks stride over rows, four elements per access where the row length allows) and
// reduce in fp32 like PyTorch's CUDA softmax and reductions. The softmax is PyTorch's: max, sum of
// exp(x - max), exp(x - max) / sum; a row that is all -inf therefore gives NaN, as torch.softmax does.
#include "attn_params.cuh"
#include "ft/mask.cuh"
#include "ft/types.cuh"
#include "ft/warp.cuh"

enum AttnEagerOp : int {
  kEagerRepeatKv = 0,    // out[b, h, s, :] = a[b, h / group, s, :]; n = batch * heads_q * seq_k * head_dim
  kEagerScale = 1,       // out = T(float(a) * scale)
  kEagerMask = 2,        // out (bool, seq_q x seq_k) = key j visible to query i
  kEagerNot = 3,         // out (bool) = !a
  kEagerMaskedFill = 4,  // out (T, in place) = -inf where b (bool, seq_q x seq_k, broadcast) is set; n = rows
  kEagerCatSink = 5,     // out (f32, rows x (cols + 1)) = [float(a) (T, rows x cols), sinks[head]] (b: sinks)
  kEagerToFloat = 6,     // out (f32) = float(a), a of type T
  kEagerSoftmax = 7,     // out (f32) row = softmax(a row); a is f32 when a_f32, else T; n = rows
  kEagerToDtype = 8,     // out (T) = T(a), a f32
  kEagerRowMax = 9,      // out[r] = max_j a[r, j] (f32); n = rows
  kEagerZeroInf = 10,    // out[r] = 0 where |out[r]| == inf (f32, in place)
  kEagerSubRow = 11,     // out[r, j] = a[r, j] - b[r] (f32); n = rows
  kEagerExp = 12,        // out = exp(out) (f32, in place)
  kEagerRowSum = 13,     // out[r] = sum_j a[r, j] (f32); n = rows
  kEagerLog = 14,        // out = log(out) (f32, in place)
  kEagerAdd = 15,        // out = out + a (f32, in place)
};

// A block's reduction of one value per thread: warp shuffles, then the warps' results in shared memory.
// kMax: maximum, else sum. Every thread of the block gets the result.
template <int kBlockThreads, bool kMax>
__device__ __forceinline__ float eager_block_reduce(float v, float* scratch) {
  constexpr int kWarps = kBlockThreads / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read from the previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float all = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) all = kMax ? fmaxf(all, scratch[w]) : all + scratch[w];
  return all;
}

// Four consecutive elements p[e .. e + 4) as floats, as one vector access when `vec` (the caller knows
// p + e is 4-element aligned: every buffer starts 512-byte aligned, and e is a multiple of 4 from a row
// start whose length is a multiple of 4), else element by element up to n. Returns how many were read.
template <typename T>
__device__ __forceinline__ int eager_load4(const T* p, long long e, long long n, bool vec, float (&x)[4]) {
  if (vec && e + 4 <= n) {
    const FtVec<T, 4> v = load_vec<T, 4>(p + e);
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = to_float(v.v[k]);
    return 4;
  }
  int c = 0;
  for (; c < 4 && e + c < n; ++c) x[c] = to_float(p[e + c]);
  return c;
}
template <typename T>
__device__ __forceinline__ void eager_store4(T* p, long long e, int count, bool vec, const float (&x)[4]) {
  if (vec && count == 4) {
    FtVec<T, 4> v;
#pragma unroll
    for (int k = 0; k < 4; ++k) v.v[k] = from_float<T>(x[k]);
    store_vec<T, 4>(p + e, v);
    return;
  }
  for (int c = 0; c < count; ++c) p[e + c] = from_float<T>(x[c]);
}

// T: the problem's storage type (float, ft_half, ft_bf16). The mask flags only matter to kEagerMask.
template <typename T, int kBlockThreads, bool kCausal, bool kWindow>
__global__ void __launch_bounds__(kBlockThreads, 1)
    attn_eager_kernel(const __grid_constant__ FtAttnEagerParams p) {
  const int op = p.op, cols = p.cols, a_f32 = p.a_f32, heads_q = p.heads_q, group = p.group, seq_q = p.seq_q;
  const int seq_k = p.seq_k, head_dim = p.head_dim, window = p.window, sink_tokens = p.sink_tokens;
  const long long n = p.n;
  const float scale = p.scale;
  const void* const __restrict__ a = p.a;
  const void* const __restrict__ b = p.b;
  void* const __restrict__ out = p.out;
  static_assert(kBlockThreads % 32 == 0 && kBlockThreads >= 32 && kBlockThreads <= 1024,
                "whole warps, at most 1024 threads");
  __shared__ float scratch[kBlockThreads / 32];
  const float inf = __int_as_float(0x7f800000);
  const long long first = static_cast<long long>(blockIdx.x) * kBlockThreads + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * kBlockThreads;
  const T* at = static_cast<const T*>(a);
  const float* af = static_cast<const float*>(a);
  const float* bf = static_cast<const float*>(b);
  const unsigned char* ab = static_cast<const unsigned char*>(a);
  const unsigned char* bb = static_cast<const unsigned char*>(b);
  T* ot = static_cast<T*>(out);
  float* of = static_cast<float*>(out);
  unsigned char* ob = static_cast<unsigned char*>(out);

  switch (op) {
    case kEagerRepeatKv: {
      // out is (batch, heads_q, seq_k, head_dim); its head h copies kv head h / group of a.
      const long long per_head = static_cast<long long>(seq_k) * head_dim;
      for (long long e = first; e < n; e += stride) {
        const long long bh = e / per_head, bkv = bh / heads_q * (heads_q / group) + bh % heads_q / group;
        ot[e] = at[bkv * per_head + e % per_head];
      }
      break;
    }
    case kEagerScale:  // a 4-wide op: each thread takes four consecutive elements
      for (long long e = 4 * first; e < n; e += 4 * stride) {
        float x[4];
        const int c = eager_load4(at, e, n, true, x);
#pragma unroll
        for (int k = 0; k < 4; ++k) x[k] *= scale;
        eager_store4(ot, e, c, true, x);
      }
      break;
    case kEagerMask: {
      const FtAttnMask<kCausal, kWindow> mask(seq_q, seq_k, window, sink_tokens);
      for (long long e = first; e < n; e += stride) ob[e] = mask.visible(int(e / seq_k), int(e % seq_k)) ? 1 : 0;
      break;
    }
    case kEagerNot:
      for (long long e = first; e < n; e += stride) ob[e] = ab[e] ? 0 : 1;
      break;
    case kEagerMaskedFill: {  // a row op: the mask row of a score row is its query's, no division per element
      const bool vec = seq_k % 4 == 0;
      for (long long row = blockIdx.x; row < n; row += gridDim.x) {
        const unsigned char* m = bb + (row % seq_q) * seq_k;
        T* o = ot + row * seq_k;
        for (int j = 4 * threadIdx.x; j < seq_k; j += 4 * kBlockThreads) {
          float x[4];
          const int c = eager_load4(o, j, seq_k, vec, x);
          unsigned char mk[4] = {0, 0, 0, 0};
          if (vec && c == 4) {
            const FtVec<unsigned char, 4> mv = load_vec<unsigned char, 4>(m + j);
#pragma unroll
            for (int k = 0; k < 4; ++k) mk[k] = mv.v[k];
          } else {
            for (int k = 0; k < c; ++k) mk[k] = m[j + k];
          }
#pragma unroll
          for (int k = 0; k < 4; ++k)
            if (mk[k]) x[k] = -inf;
          eager_store4(o, j, c, vec, x);
        }
      }
      break;
    }
    case kEagerCatSink:
      for (long long e = first; e < n; e += stride) {
        const long long r = e / (cols + 1);
        const int c = static_cast<int>(e % (cols + 1));
        of[e] = c < cols ? to_float(at[r * cols + c]) : bf[(r / seq_q) % heads_q];
      }
      break;
    case kEagerToFloat:  // 4-wide
      for (long long e = 4 * first; e < n; e += 4 * stride) {
        float x[4];
        eager_store4(of, e, eager_load4(at, e, n, true, x), true, x);
      }
      break;
    case kEagerToDtype:  // 4-wide
      for (long long e = 4 * first; e < n; e += 4 * stride) {
        float x[4];
        eager_store4(ot, e, eager_load4(af, e, n, true, x), true, x);
      }
      break;
    case kEagerZeroInf:
      for (long long e = first; e < n; e += stride)
        if (fabsf(of[e]) == inf) of[e] = 0.0f;
      break;
    case kEagerSubRow: {  // a row op, as masked_fill
      const bool vec = cols % 4 == 0;
      for (long long row = blockIdx.x; row < n; row += gridDim.x) {
        const float row_max = bf[row];
        for (int j = 4 * threadIdx.x; j < cols; j += 4 * kBlockThreads) {
          float x[4];
          const int c = eager_load4(af + row * cols, j, cols, vec, x);
#pragma unroll
          for (int k = 0; k < 4; ++k) x[k] -= row_max;
          eager_store4(of + row * cols, j, c, vec, x);
        }
      }
      break;
    }
    case kEagerExp:  // 4-wide
      for (long long e = 4 * first; e < n; e += 4 * stride) {
        float x[4];
        const int c = eager_load4(of, e, n, true, x);
#pragma unroll
        for (int k = 0; k < 4; ++k) x[k] = expf(x[k]);
        eager_store4(of, e, c, true, x);
      }
      break;
    case kEagerLog:
      for (long long e = first; e < n; e += stride) of[e] = logf(of[e]);
      break;
    case kEagerAdd:
      for (long long e = first; e < n; e += stride) of[e] += af[e];
      break;
    case kEagerSoftmax: {  // rows read 4 elements at a time
      const bool vec = cols % 4 == 0;
      for (long long row = blockIdx.x; row < n; row += gridDim.x) {
        const long long base = row * cols;
        auto load = [&](int j, float (&x)[4]) {
          return a_f32 ? eager_load4(af + base, j, cols, vec, x) : eager_load4(at + base, j, cols, vec, x);
        };
        float x[4];
        float m = -inf;
        for (int j = 4 * threadIdx.x; j < cols; j += 4 * kBlockThreads) {
          const int c = load(j, x);
          for (int k = 0; k < c; ++k) m = fmaxf(m, x[k]);
        }
        const float row_max = eager_block_reduce<kBlockThreads, true>(m, scratch);
        float l = 0.0f;
        for (int j = 4 * threadIdx.x; j < cols; j += 4 * kBlockThreads) {
          const int c = load(j, x);
          for (int k = 0; k < c; ++k) l += expf(x[k] - row_max);
        }
        const float row_sum = eager_block_reduce<kBlockThreads, false>(l, scratch);
        for (int j = 4 * threadIdx.x; j < cols; j += 4 * kBlockThreads) {
          const int c = load(j, x);
#pragma unroll
          for (int k = 0; k < 4; ++k) x[k] = expf(x[k] - row_max) / row_sum;
          eager_store4(of + base, j, c, vec, x);
        }
      }
      break;
    }
    case kEagerRowMax:
    case kEagerRowSum:
      for (long long row = blockIdx.x; row < n; row += gridDim.x) {
        float v = op == kEagerRowMax ? -inf : 0.0f;
        for (int j = 4 * threadIdx.x; j < cols; j += 4 * kBlockThreads) {
          float x[4];
          const int c = eager_load4(af + row * cols, j, cols, cols % 4 == 0, x);
          for (int k = 0; k < c; ++k) v = op == kEagerRowMax ? fmaxf(v, x[k]) : v + x[k];
        }
        const float all = op == kEagerRowMax ? eager_block_reduce<kBlockThreads, true>(v, scratch)
                                             : eager_block_reduce<kBlockThreads, false>(v, scratch);
        if (threadIdx.x == 0) of[row] = all;
      }
      break;
    default:
      break;
  }
}
