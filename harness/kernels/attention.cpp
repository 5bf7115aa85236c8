// harness/kernels/attention.cpp: the attention problem, buffers, counts and reference shared by the
// attention forward operations, and what the materialized-score baselines share.
#include "harness/kernels/attention.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cmath>
#include <numeric>
#include <set>

#include "harness/cuda/cublas.hpp"
#include "reference/dtype.hpp"

namespace flashtune::kernels::attn {

KernelArg fwd_params(const Shape& s) {
  using Params = FtAttnFwdParams<void>;
  const std::int64_t hq = s.heads_q, hkv = s.heads_kv, sq = s.seq_q, sk = s.seq_k, d = s.head_dim;
  Params prm{};
  prm.q_sb = prm.o_sb = hq * sq * d, prm.q_sh = prm.o_sh = sq * d, prm.q_ss = prm.o_ss = d;
  prm.k_sb = prm.v_sb = hkv * sk * d, prm.k_sh = prm.v_sh = sk * d, prm.k_ss = prm.v_ss = d;
  prm.heads_q = int(hq), prm.heads_kv = int(hkv), prm.seq_q = int(sq), prm.seq_k = int(sk);
  prm.window = int(s.window), prm.sink_tokens = int(s.sink_tokens);
  prm.scale_log2 = float(1.0 / std::sqrt(double(d)) * 1.4426950408889634);
  return ParamsArg::of(prm)
      .bind(offsetof(Params, q), kQ)
      .bind(offsetof(Params, k), kK)
      .bind(offsetof(Params, v), kV)
      .bind(offsetof(Params, sinks), kSinks)
      .bind(offsetof(Params, o), kO)
      .bind(offsetof(Params, lse), kLse);
}

void map_heads_tensor(ParamsArg& params, std::size_t offset, int buffer, const Shape& s, std::int64_t seq,
                      std::int64_t heads, long long ss, long long sh, long long sb, std::int64_t rows,
                      std::int64_t box_heads) {
  const auto u = [](auto v) { return std::uint64_t(v); };
  params.map({offset, buffer, s.dtype, {u(s.head_dim), u(seq), u(heads), u(s.batch)}, {u(ss) * 2, u(sh) * 2, u(sb) * 2},
              {64, std::uint32_t(rows), std::uint32_t(box_heads), 1}});
}

std::optional<std::string> blocks_per_sm_problem(std::int64_t blocks, std::int64_t threads, std::int64_t smem,
                                                 const core::DeviceLimits& d) {
  if (threads * blocks > 2048)
    return "min_blocks " + std::to_string(blocks) + " x " + std::to_string(threads) + " threads > 2048 per SM";
  if ((smem + 1024) * blocks > d.max_shared_per_sm)
    return "min_blocks " + std::to_string(blocks) + " x " + std::to_string(smem) + " B of shared memory > " +
           std::to_string(d.max_shared_per_sm) + " B per SM";
  return std::nullopt;
}

std::vector<std::int64_t> reference_rows(const Shape& s, double budget) {
  const std::int64_t seq_q = s.seq_q;
  const double per_row = double(s.batch) * double(s.heads_q) * double(s.seq_k) * double(s.head_dim);
  if (per_row * double(seq_q) <= budget) return {};
  const std::int64_t n = std::clamp<std::int64_t>(std::int64_t(budget / per_row), 16, seq_q);
  std::set<std::int64_t> rows;
  for (std::int64_t i = 0; i < 4 && i < seq_q; ++i) rows.insert(i), rows.insert(seq_q - 1 - i);
  for (std::int64_t k = 0; std::int64_t(rows.size()) < n && k < 4 * n; ++k) {
    const std::int64_t base = k * seq_q / n;
    rows.insert(std::min(seq_q - 1, base + (k * 37) % 61));
  }
  return {rows.begin(), rows.end()};
}

std::vector<std::string> problem_dims() { return {"batch", "heads_q", "seq_q", "head_dim"}; }

std::vector<OptionalDim> optional_problem_dims() {
  return {
      {"heads_kv", -1, "key/value heads (GQA: heads_q a multiple of it; 1 = MQA); default heads_q"},
      {"seq_k", -1, "keys; default seq_q (causal masks align bottom-right when they differ)"},
      {"causal", 0, "1: key j visible to query i only when j <= i + seq_k - seq_q"},
      {"window", 0, "sliding window W > 0: key j visible only when j > i + seq_k - seq_q - W; 0 = none"},
      {"sink_tokens", 0, "the first k keys stay visible through the window (StreamingLLM)"},
      {"learned_sinks", 0, "1: one learned logit per query head joins the softmax denominator (GPT-OSS)"},
      {"tf32", 0, "f32 only: 1 = TF32 tensor cores, 0 = exact fp32 FMA"},
      {"qk_range", 1, "Q and K are drawn uniform in [-r, r] (large r: large logits)"},
      {"sink_bias", 0, "learned sink logits are drawn uniform in [b - 1, b + 1]"},
  };
}

std::vector<BufferSpec> fwd_buffers(const Shape& s) {
  const double r = double(s.qk_range), bias = double(s.sink_bias);
  return {
      {"q", s.dtype, s.elements_q(), BufferRole::input, -r, r},
      {"k", s.dtype, s.elements_kv(), BufferRole::input, -r, r},
      {"v", s.dtype, s.elements_kv(), BufferRole::input, -1.0, 1.0},
      {"sinks", core::DType::f32, s.heads_q, BufferRole::input, bias - 1.0, bias + 1.0},
      {"o", s.dtype, s.elements_q(), BufferRole::output, 0, 0},
      {"lse", core::DType::f32, s.rows(), BufferRole::output, 0, 0},
  };
}

double fwd_bytes(const Shape& s) {
  double n = 0;
  for (const auto& b : fwd_buffers(s)) n += double(b.elements) * double(core::dtype_size(b.dtype));
  return n;
}

double fwd_flops(const Shape& s) {
  return 4.0 * double(s.head_dim) * reference::attention_visible_pairs(s);
}

void fwd_reference(const std::string& who, const Shape& s, const std::vector<HostTensor>& inputs,
                   std::vector<HostTensor>& outputs, RefPrecision precision) {
  if (inputs.size() != 4 || outputs.size() != 2) throw core::Error(who + ".reference: expects q, k, v, sinks -> o, lse");
  const auto rows = reference_rows(s, kReferenceBudget);
  auto& o = outputs[0].values;
  auto& lse = outputs[1].values;
  if (precision == RefPrecision::f64) {
    reference::attention_naive_rows<double>(s, inputs[0].values, inputs[1].values, inputs[2].values, inputs[3].values,
                                            rows, o, lse);
  } else {
    const bool tf32 = s.tf32;
    auto rounded = [&](const std::vector<double>& x) {
      std::vector<double> y(x);
      for (double& v : y) v = reference::round_tf32(v);
      return y;
    };
    if (tf32)
      reference::attention_naive_rows<float>(s, rounded(inputs[0].values), rounded(inputs[1].values),
                                             rounded(inputs[2].values), inputs[3].values, rows, o, lse);
    else
      reference::attention_naive_rows<float>(s, inputs[0].values, inputs[1].values, inputs[2].values,
                                             inputs[3].values, rows, o, lse);
    reference::round_all(outputs[0].dtype, o);
    reference::round_all(core::DType::f32, lse);
  }
  for (auto& out : outputs) out.checked.clear();
  if (rows.empty()) return;
  const std::int64_t heads = s.batch * s.heads_q;
  outputs[0].checked.assign(o.size(), 0);
  outputs[1].checked.assign(lse.size(), 0);
  for (std::int64_t bh = 0; bh < heads; ++bh)
    for (std::int64_t i : rows) {
      const std::size_t row = std::size_t(bh * s.seq_q + i);
      outputs[1].checked[row] = 1;
      std::fill_n(outputs[0].checked.begin() + std::ptrdiff_t(row * std::size_t(s.head_dim)), s.head_dim, 1);
    }
}

// O is a convex combination of V in [-1, 1]. The kernels multiply P rounded to the input dtype (as
// FlashAttention does) while the naive same-precision reference keeps P in fp32, so atol forgives that
// rounding: about one ulp of P at 1 (fp16 2^-10, bf16 2^-7), TF32 (2^-10 on P and a few ulps of the
// products), exact fp32 a few ulps of an fp32 sum over thousands of keys.
double fwd_atol(const Shape& s) {
  switch (s.dtype) {
    case core::DType::f16: return 1e-3;
    case core::DType::bf16: return 8e-3;
    case core::DType::f32: break;
  }
  return s.tf32 ? 2e-3 : 2e-5;
}

std::optional<std::string> check_gemm_sizes(std::int64_t rows, std::int64_t batch) {
  if (rows > INT_MAX) return "the GEMMs' " + std::to_string(rows) + " query rows must fit cuBLAS's int (< 2^31)";
  if (batch > INT_MAX) return "the GEMMs' batch of " + std::to_string(batch) + " must fit cuBLAS's int (< 2^31)";
  return std::nullopt;
}

LaunchShape BaselineKernel::launch_shape(const BaselineConfig& c, const Shape& s, const core::DeviceLimits&) const {
  LaunchShape l;
  l.grid[0] = unsigned(std::min<std::int64_t>(s.rows(), INT_MAX));
  l.block[0] = unsigned(c.block_threads);
  return l;
}

std::optional<std::string> BaselineKernel::can_run(const BaselineConfig& c, const Shape&, const core::DeviceLimits& d) const {
  const std::int64_t t = c.block_threads;
  if (t < 32 || t % 32 != 0) return "block_threads " + std::to_string(t) + " must be a positive multiple of 32";
  if (t > d.max_threads_per_block)
    return "block_threads " + std::to_string(t) + " > " + std::to_string(d.max_threads_per_block) + " per block";
  return std::nullopt;
}

double rounded_scores_atol(const Shape& s, double base, int roundings) {
  if (s.dtype == core::DType::f32) return base;
  const double u = s.dtype == core::DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double r = double(s.qk_range);
  return base + double(roundings) * 2.0 * u * 1.5 * r * r;
}

// Row-major X (r x c) is column-major X^T with the same leading dimension, so per group:
// S^T (seq_k x rows) = K (seq_k x d, i.e. col-major d x seq_k transposed) * Q^T (d x rows).
void gemm_scores(const ScoreGemms& g, void* stream) {
  cuda::StridedBatchedGemm qk;
  qk.op_a = cuda::GemmOp::t, qk.op_b = cuda::GemmOp::n;
  qk.m = g.seq_k, qk.n = g.rows, qk.k = g.head_dim, qk.batch = g.groups;
  qk.alpha = g.scale;
  qk.a = g.k, qk.a_type = g.dtype, qk.lda = g.head_dim, qk.stride_a = g.seq_k * g.head_dim;
  qk.b = g.q, qk.b_type = g.dtype, qk.ldb = g.head_dim, qk.stride_b = g.rows * g.head_dim;
  qk.c = g.s, qk.c_type = g.s_dtype, qk.ldc = g.seq_k, qk.stride_c = g.rows * g.seq_k;
  qk.tf32 = g.tf32;
  qk.workspace = g.workspace, qk.workspace_bytes = g.workspace_bytes;
  cuda::gemm(qk, static_cast<CUstream>(stream));
}

// O^T (d x rows) = V^T (d x seq_k) * P^T (seq_k x rows).
void gemm_output(const ScoreGemms& g, void* stream) {
  const std::int64_t ld_p = g.ld_p > 0 ? g.ld_p : g.seq_k;
  cuda::StridedBatchedGemm pv;
  pv.op_a = cuda::GemmOp::n, pv.op_b = cuda::GemmOp::n;
  pv.m = g.head_dim, pv.n = g.rows, pv.k = g.seq_k, pv.batch = g.groups;
  pv.a = g.v, pv.a_type = g.dtype, pv.lda = g.head_dim, pv.stride_a = g.seq_k * g.head_dim;
  pv.b = g.p, pv.b_type = g.p_dtype, pv.ldb = ld_p, pv.stride_b = g.rows * ld_p;
  pv.c = g.o, pv.c_type = g.dtype, pv.ldc = g.head_dim, pv.stride_c = g.rows * g.head_dim;
  pv.tf32 = g.tf32;
  pv.workspace = g.workspace, pv.workspace_bytes = g.workspace_bytes;
  cuda::gemm(pv, static_cast<CUstream>(stream));
}

void expect_buffers(const LaunchEnv& env, std::size_t n, const std::string& who) {
  if (env.buffers.size() != n)
    throw core::Error(who + ".launch: expects " + std::to_string(n) + " buffers, got " + std::to_string(env.buffers.size()));
}

WorkspacePlan plan_workspace(const std::vector<LiveTensor>& tensors, std::int64_t granule) {
  auto rounded = [&](std::int64_t b) { return (b + granule - 1) / granule * granule; };
  WorkspacePlan plan;
  plan.offsets.assign(tensors.size(), 0);
  int last_step = 0;
  for (const auto& t : tensors) last_step = std::max(last_step, t.dies);
  for (int step = 0; step <= last_step; ++step) {
    std::int64_t live = 0;
    for (const auto& t : tensors)
      if (t.born <= step && step <= t.dies) live += rounded(t.bytes);
    plan.peak = std::max(plan.peak, live);
  }
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tensors[a].bytes > tensors[b].bytes; });
  std::vector<std::size_t> placed;
  for (std::size_t i : order) {
    const auto& t = tensors[i];
    // The placed tensors alive at the same time, by offset: take the lowest gap that fits.
    std::vector<std::size_t> rivals;
    for (std::size_t j : placed)
      if (tensors[j].born <= t.dies && t.born <= tensors[j].dies) rivals.push_back(j);
    std::sort(rivals.begin(), rivals.end(), [&](std::size_t a, std::size_t b) { return plan.offsets[a] < plan.offsets[b]; });
    std::int64_t at = 0;
    for (std::size_t j : rivals) {
      if (plan.offsets[j] >= at + rounded(t.bytes)) break;
      at = std::max(at, plan.offsets[j] + rounded(tensors[j].bytes));
    }
    plan.offsets[i] = at;
    plan.bytes = std::max(plan.bytes, at + rounded(t.bytes));
    placed.push_back(i);
  }
  return plan;
}

}  // namespace flashtune::kernels::attn
