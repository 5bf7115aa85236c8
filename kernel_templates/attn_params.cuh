// kernel_templates/attn_params.cuh: the parameter structs of the attention operations, one per operation
// (the forward; the backward's stages share one, as they share their tensors; the two baselines' kernels), plain C++ that both the
// kernels (NVRTC) and the host (harness/kernels) compile. A kernel takes its struct by value as
// `const __grid_constant__ FtAttnFwdParams<T> p` and nothing else; the host fills FtAttnFwdParams<void>
// (same layout: every member is a pointer or a number) and binds the pointers to its device buffers.
//
// Layout (DESIGN.md "Attention conventions"): Q, O, dO, dQ (batch, heads_q, seq_q, head_dim) and K, V, dK,
// dV (batch, heads_kv, seq_k, head_dim), head_dim contiguous, strides per batch / head / row [elements];
// LSE, D (batch, heads_q, seq_q) contiguous fp32, LSE in natural log; sinks, dsinks (heads_q) fp32.
#pragma once

// Attention forward: O, LSE from Q, K, V (and the learned sink logits).
template <typename T>
struct FtAttnFwdParams {
  const T* q;
  const T* k;
  const T* v;
  const float* sinks;  // learned sink logits s_h; read only by kernels built with learned sinks
  T* o;
  float* lse;
  long long q_sb, q_sh, q_ss;  // [elements] Q strides per batch, head, row
  long long k_sb, k_sh, k_ss;  // [elements] K
  long long v_sb, v_sh, v_ss;  // [elements] V
  long long o_sb, o_sh, o_ss;  // [elements] O
  int heads_q, heads_kv, seq_q, seq_k;
  int window;          // keys a query sees back from the causal edge (kernels built with kWindow)
  int sink_tokens;     // leading keys every query sees under a window
  float scale_log2;    // softmax scale * log2(e)
};

// Attention backward, every stage (preprocess D = rowsum(dO * O), dK / dV, dQ, dQ with D inline, the fused
// pass, the learned-sink gradient); each reads the members its stage needs. Q, O, dO and dQ share the q_
// strides, K, V, dK and dV the k_ strides.
template <typename T>
struct FtAttnBwdParams {
  const T* q;
  const T* k;
  const T* v;
  const T* o;
  const T* dout;
  const float* lse;
  float* delta;        // D: read by dkdv, dq, fused and dsink; written by preprocess and dq_delta
  const float* sinks;  // dsink only
  T* dq;
  T* dk;
  T* dv;
  float* dsinks;       // dsink only
  float* ws;           // dkdv: the sink-token split's partials; fused: the fp32 dQ accumulator
  long long q_sb, q_sh, q_ss;  // [elements] Q, O, dO, dQ strides per batch, head, row
  long long k_sb, k_sh, k_ss;  // [elements] K, V, dK, dV
  int batch, heads_q, heads_kv, seq_q, seq_k, window, sink_tokens;
  int sink_split;  // dkdv: blocks per sink-token key tile (1: no split)
  int reduce;      // dkdv: 0 = the main pass, 1 = add the split partials into dK, dV
  int convert;     // fused: 0 = the main pass, 1 = convert the fp32 dQ accumulator to dQ
  float scale;     // softmax scale
};

// The materialized-score baselines' kernels (attn_naive, attn_eager: cuBLAS GEMMs around them).
// attn_naive_softmax_kernel: S (batch, heads_q, seq_q, seq_k) -> P in place, LSE per row.
template <typename T>
struct FtAttnNaiveParams {
  T* s;
  float* lse;
  const float* sinks;  // learned sink logits (kernels built with learned sinks)
  long long rows;      // batch * heads_q * seq_q
  int heads_q, seq_q, seq_k, window, sink_tokens;
};

// attn_eager_kernel: one elementwise or row op of eager attention (kEagerRepeatKv, ...) on a -> out (b: the op's
// second operand). a, b and out are the launch's buffers, bound per op; the shape members are the problem's.
struct FtAttnEagerParams {
  const void* a;
  const void* b;
  void* out;
  long long n;  // elements (or rows, for a row op) the op covers
  int op;
  int cols;     // row length of a row op
  int a_f32;    // 1: a is fp32 whatever the problem's dtype
  int heads_q, group, seq_q, seq_k, head_dim, window, sink_tokens;
  float scale;  // softmax scale (kEagerScale)
};

#ifndef __CUDACC_RTC__
static_assert(sizeof(FtAttnFwdParams<void>) == 6 * 8 + 12 * 8 + 7 * 4 + 4, "FtAttnFwdParams: 172 bytes of members, padded to 8");
static_assert(sizeof(FtAttnBwdParams<void>) == 13 * 8 + 6 * 8 + 10 * 4 + 4 + 4, "FtAttnBwdParams: 196 bytes of members, padded to 8");
static_assert(sizeof(FtAttnNaiveParams<void>) == 4 * 8 + 5 * 4 + 4, "FtAttnNaiveParams: 52 bytes of members, padded to 8");
static_assert(sizeof(FtAttnEagerParams) == 4 * 8 + 10 * 4 + 4 + 4, "FtAttnEagerParams: 76 bytes of members, padded to 8");
#endif

