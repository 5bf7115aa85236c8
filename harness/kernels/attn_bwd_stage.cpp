// harness/kernels/attn_bwd_stage.cpp: what the attention backward operations share (attn_bwd_stage.hpp).
#include "harness/kernels/attn_bwd_stage.hpp"

#include <algorithm>
#include <cmath>

#include "harness/cuda/module.hpp"
#include "reference/dtype.hpp"

namespace flashtune::kernels::attn_bwd {
namespace {

std::string n(std::int64_t v) { return std::to_string(v); }

// An O with rowsum(dO_i * O_i) = delta_i exactly (up to double rounding): O_i = delta_i dO_i / |dO_i|^2.
std::vector<double> o_for_delta(const Shape& s, const std::vector<double>& dout, const std::vector<double>& delta) {
  const std::int64_t d = s.head_dim;
  std::vector<double> o(dout.size());
  for (std::size_t r = 0; r < delta.size(); ++r) {
    double sq = 0;
    for (std::int64_t e = 0; e < d; ++e) sq += dout[r * std::size_t(d) + std::size_t(e)] * dout[r * std::size_t(d) + std::size_t(e)];
    for (std::int64_t e = 0; e < d; ++e)
      o[r * std::size_t(d) + std::size_t(e)] = delta[r] * dout[r * std::size_t(d) + std::size_t(e)] / sq;
  }
  return o;
}

// `rows` as reference_rows() gives them, or (empty: every row) 0 .. count - 1.
std::vector<std::int64_t> every_row_if_empty(std::vector<std::int64_t> rows, std::int64_t count) {
  if (rows.empty())
    for (std::int64_t i = 0; i < count; ++i) rows.push_back(i);
  return rows;
}

// Marks `rows` (of `seq` per head, over `heads` heads of `width` elements each) checked; empty when they are all
// `seq` rows (HostTensor::checked: every element).
std::vector<std::uint8_t> checked_rows(const std::vector<std::int64_t>& rows, std::int64_t heads, std::int64_t seq,
                                       std::int64_t width) {
  if (rows.empty() || std::int64_t(rows.size()) == seq) return {};
  std::vector<std::uint8_t> c(std::size_t(heads * seq * width), 0);
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i : rows) std::fill_n(c.begin() + std::ptrdiff_t((h * seq + i) * width), width, 1);
  return c;
}

}  // namespace

ParamsArg bwd_params(const Shape& s, const std::vector<Binding>& bindings) {
  const std::int64_t hq = s.heads_q, hkv = s.heads_kv, sq = s.seq_q, sk = s.seq_k, d = s.head_dim;
  BwdParams prm{};
  prm.q_sb = hq * sq * d, prm.q_sh = sq * d, prm.q_ss = d;
  prm.k_sb = hkv * sk * d, prm.k_sh = sk * d, prm.k_ss = d;
  prm.batch = int(s.batch), prm.heads_q = int(hq), prm.heads_kv = int(hkv), prm.seq_q = int(sq), prm.seq_k = int(sk);
  prm.window = int(s.window), prm.sink_tokens = int(s.sink_tokens);
  prm.sink_split = 1, prm.item_split = 1;
  prm.scale = float(1.0 / std::sqrt(double(d)));
  ParamsArg a = ParamsArg::of(prm);
  for (const auto& b : bindings) a.bind(b.member, b.buffer);
  return a;
}

std::pair<double, double> lse_range(const Shape& s, bool with_sink) {
  double lo = std::log(double(s.seq_k));
  if (with_sink && s.learned_sinks) lo = std::max(lo, double(s.sink_bias) + 1.0);
  return {lo, lo + 0.5};
}

std::vector<double> delta_of(const Shape& s, const std::vector<double>& o, const std::vector<double>& dout,
                             RefPrecision precision) {
  const std::int64_t d = s.head_dim;
  std::vector<double> delta(std::size_t(s.rows()), 0.0);
  for (std::size_t r = 0; r < delta.size(); ++r) {
    double sd = 0;
    float sf = 0;
    for (std::int64_t e = 0; e < d; ++e) {
      const std::size_t x = r * std::size_t(d) + std::size_t(e);
      sd += o[x] * dout[x];
      sf += float(o[x]) * float(dout[x]);
    }
    delta[r] = precision == RefPrecision::f64 ? sd : double(sf);
  }
  return delta;
}

std::vector<std::int64_t> query_rows_to_check(const Shape& s) {
  return every_row_if_empty(attn::reference_rows(s, attn::kReferenceBudget), s.seq_q);
}

std::vector<std::int64_t> key_rows_to_check(const Shape& s) {
  return every_row_if_empty(attn::reference_rows(s.transposed(), attn::kReferenceBudget), s.seq_k);
}

void take_dq(reference::AttnGrads& g, HostTensor& dq, const std::vector<std::int64_t>& q_rows, const Shape& s) {
  dq.values = std::move(g.dq);
  dq.checked = checked_rows(q_rows, s.batch * s.heads_q, s.seq_q, s.head_dim);
}

void take_dkdv(reference::AttnGrads& g, HostTensor& dk, HostTensor& dv, const std::vector<std::int64_t>& k_rows,
               const Shape& s) {
  dk.values = std::move(g.dk);
  dv.values = std::move(g.dv);
  dk.checked = dv.checked = checked_rows(k_rows, s.batch * s.heads_kv, s.seq_k, s.head_dim);
}

std::string mma_sync_name(const std::string& kernel, const BwdConfig& c, const Shape& s) {
  return kernel + "<" + attn::storage_type(s.dtype) + ", " + n(s.head_dim) + ", " + n(c.block_m) + ", " + n(c.block_n) +
         ", " + n(c.num_warps) + ", " + n(c.num_stages) + ", " + attn::bool_arg(s.causal) + ", " +
         attn::bool_arg(s.has_window()) + ", " + n(c.min_blocks) + ">";
}

std::optional<std::string> mma_sync_problem(const BwdConfig& c, const core::DeviceLimits& d, std::int64_t own,
                                            const char* owned, std::int64_t smem, std::int64_t regs) {
  const std::int64_t warps = c.num_warps;
  if (own % (16 * warps) != 0 || own / (16 * warps) > 2 || own / (16 * warps) < 1)
    return std::string(owned) + " " + n(own) + " must be 16 or 32 rows per warp x num_warps " + n(warps);
  if (c.block_m % 16 != 0 || c.block_n % 16 != 0) return "block_m and block_n must be multiples of 16";
  if (c.num_stages < 1 || c.num_stages > 4) return "num_stages must be in 1..4";
  if (d.sm_major < 8) return "needs sm_80 or newer (bf16 mma.sync, cp.async)";
  if (smem > d.max_shared_per_block_optin)
    return "shared memory " + n(smem) + " B > " + n(d.max_shared_per_block_optin) + " B";
  // The estimates are calibrated on ptxas (attn_bwd_test compiles the default spaces): past about 224 the
  // kernels spill, though the hard limit is 255.
  const std::int64_t limit = std::min<std::int64_t>(224, d.max_regs_per_thread);
  if (regs > limit) return "about " + n(regs) + " registers per thread needed (limit " + n(limit) + " without spills)";
  return std::nullopt;
}

// min_blocks (the mma.sync kernels at fp16 / bf16): blocks per SM the kernel is compiled to fit
// (__launch_bounds__), which caps its registers at 65536 / (32 num_warps min_blocks). For short loops
// (windows), where more resident blocks hide the latency of each one's chain of MMAs.
TunableSpec min_blocks_tunable() {
  // 5, 7, 12: the GPT-OSS dkdv, dq_delta and dq winners (docs/NOTES.md, sessions 13 and 16).
  return {"min_blocks", {1, 5, 7, 12},
          "blocks per SM the mma.sync kernel is compiled to fit (__launch_bounds__), capping its registers at 65536 / "
          "(32 num_warps min_blocks); 1 = no cap (fp32 and mma 90 take 1)"};
}

std::optional<std::string> min_blocks_problem(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d,
                                              std::int64_t smem, std::int64_t acc) {
  const std::int64_t mb = c.min_blocks;
  if (mb == 1) return std::nullopt;
  if (mb < 1 || mb > 32) return "min_blocks must be in 1..32";
  if (s.dtype == core::DType::f32) return "min_blocks > 1 is an fp16 / bf16 option; fp32 takes 1";
  const std::int64_t warps = c.num_warps;
  if (auto why = attn::blocks_per_sm_problem(mb, 32 * warps, smem, d)) return why;
  const std::int64_t cap = std::min<std::int64_t>(d.max_regs_per_thread, d.max_regs_per_block / (32 * warps * mb) / 8 * 8);
  if (cap < acc + 40)
    return "min_blocks " + n(mb) + " caps registers at " + n(cap) + " per thread, too few for the " + n(acc) +
           " accumulators and ~40 others";
  return std::nullopt;
}

std::string wgmma_name(const std::string& kernel, const BwdConfig& c, const Shape& s) {
  return kernel + "<" + attn::storage_type(s.dtype) + ", " + n(s.head_dim) + ", " + n(c.block_m) + ", " +
         n(c.warpgroups()) + ", " + n(c.num_stages) + ", " + attn::bool_arg(s.causal) + ", " +
         attn::bool_arg(s.has_window()) + ">";
}

std::optional<std::string> wgmma_problem(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d,
                                         std::int64_t smem, std::int64_t regs, bool rows80) {
  const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps;
  const std::int64_t stages = c.num_stages, hd = s.head_dim;
  if (d.arch != "sm_90a") return "wgmma needs sm_90a, not " + d.arch;
  if (s.dtype == core::DType::f32) return "wgmma kernels take fp16 / bf16 only, not fp32 (use mma 80: exact or tf32)";
  if (warps < 4 || warps % 4 != 0 || bn != 16 * warps)
    return "block_n " + n(bn) + " must be 64 keys per warpgroup (16 x num_warps " + n(warps) + ", a multiple of 4)";
  if (bm != 64 && bm != 128 && !(rows80 && bm == 80)) return rows80 ? "block_m must be 64, 80 or 128" : "block_m must be 64 or 128";
  if (hd % 64 != 0) return "head_dim must be a multiple of 64 (128-byte swizzled rows)";
  if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
  if (32 * warps > d.max_threads_per_block) return "num_warps " + n(warps) + " out of range";
  if (smem > d.max_shared_per_block_optin)
    return "shared memory " + n(smem) + " B > " + n(d.max_shared_per_block_optin) + " B";
  if (regs > d.max_regs_per_thread)
    return "about " + n(regs) + " registers per thread needed (limit " + n(d.max_regs_per_thread) + ")";
  return std::nullopt;
}

double visible_pair_flops(const Shape& s, double per_dim) {
  return per_dim * double(s.head_dim) * reference::attention_visible_pairs(s);
}

void launch_pass(const LaunchEnv& env, const std::vector<KernelArg>& args) {
  cuda::launch(static_cast<CUfunction>(env.function), env.shape.grid, env.shape.block, env.shape.dynamic_smem_bytes,
               static_cast<CUstream>(env.stream), pack_kernel_args(args, env.buffers).pointers.data());
}

void launch_second_pass(const LaunchEnv& env, std::vector<KernelArg>& args, std::size_t flag, const unsigned (&grid)[3],
                        bool programmatic) {
  std::get<ParamsArg>(args[0]).set(flag, std::int32_t(1));
  auto packed = pack_kernel_args(args, env.buffers);
  if (programmatic)
    cuda::launch_programmatic(static_cast<CUfunction>(env.function), grid, env.shape.block, 0,
                              static_cast<CUstream>(env.stream), packed.pointers.data());
  else
    cuda::launch(static_cast<CUfunction>(env.function), grid, env.shape.block, 0, static_cast<CUstream>(env.stream),
                 packed.pointers.data());
}

LaunchShape grad_launch(std::int64_t grid_x, std::int64_t grid_y, const BwdConfig& c, const Shape& s, std::int64_t smem) {
  LaunchShape l;
  l.grid[0] = unsigned(grid_x);
  l.grid[1] = unsigned(grid_y);
  l.grid[2] = unsigned(s.batch);
  l.block[0] = unsigned(c.threads());
  l.dynamic_smem_bytes = unsigned(smem);
  return l;
}

std::vector<TunableSpec> GradStage::shared_tunables() const {
  return {
      {"block_m", {16, 32, 64}, "query rows per tile"},
      {"block_n", {32, 64, 128}, "keys per tile"},
      {"num_warps", {1, 2, 4, 8}, "warps per block"},  // 1: the GPT-OSS dq and dq_delta winners
      {"num_stages", {1, 2}, "tiles in flight (cp.async pipeline depth)"},
  };
}

std::vector<BufferSpec> GradStage::buffers(const core::Problem& p) const {
  const Shape s(p);
  const double r = double(s.qk_range);
  const auto [lo, hi] = lse_range(s, false);
  std::vector<BufferSpec> b{{"q", s.dtype, s.elements_q(), BufferRole::input, -r, r},
                            {"k", s.dtype, s.elements_kv(), BufferRole::input, -r, r},
                            {"v", s.dtype, s.elements_kv(), BufferRole::input, -1.0, 1.0},
                            {"dout", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0},
                            {"lse", core::DType::f32, s.rows(), BufferRole::input, lo, hi},
                            {"delta", core::DType::f32, s.rows(), BufferRole::input, -1.0, 1.0}};
  for (const auto& [out_name, count] : outputs(s)) b.push_back({out_name, s.dtype, count, BufferRole::output, 0, 0});
  add_workspace(s, b);
  return b;
}

std::vector<KernelArg> GradStage::arguments(const core::Config& config, const core::Problem& p) const {
  const Shape s(p);
  const BwdConfig c(config);
  return variant_for(c, s).arguments(c, s, {bwd_params(s, bindings(c, s))});  // the TMA variant adds its maps
}

/// Element-wise tolerance on top of twice the naive fp32 error: the kernel rounds P and dS to the input
/// dtype before their products (as FlashAttention does), the naive reference keeps them in fp32. TF32
/// rounds P and dS to a 10-bit mantissa as fp16 does (the naive reference sees Q, K, V, dO rounded to
/// tf32 too); those roundings are independent, so their error in a gradient grows as the square root of
/// the terms it sums (n: seq_k for dQ, seq_q x the GQA group for dK and dV): 1e-3 up to 16 terms, x
/// sqrt(n / 16) past that (seq_k 1 over 1000 queries: 0.0236 seen against 2 x 0.0096 + 1e-3).
/// Exact fp32 differs from the naive fp32 by summation order and exp2 (a few ulps).
double GradStage::default_atol(const core::Problem& p) const {
  const Shape s(p);
  if (s.dtype == core::DType::f32) {
    if (!s.tf32) return 2e-5;
    const double terms = std::max(double(s.seq_k), double(s.seq_q * s.heads_q / s.heads_kv));
    return 1e-3 * std::sqrt(std::max(1.0, terms / 16.0));
  }
  return s.dtype == core::DType::f16 ? 5e-4 : 4e-3;
}

void GradStage::reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                          RefPrecision precision) const {
  const Shape s(p);
  if (in.size() != 6 || out.size() != outputs(s).size())
    throw core::Error(name() + ".reference: expects q, k, v, dout, lse, delta -> gradients");
  naive_gradients(s, in, precision, nullptr, out);
}

void GradStage::naive_gradients(const Shape& s, const std::vector<HostTensor>& in, RefPrecision precision,
                                const std::vector<double>* o_given, std::vector<HostTensor>& out) const {
  const bool tf32 = precision == RefPrecision::same && s.tf32;
  std::vector<double> rounded[kLse];  // Q, K, V, dO rounded to tf32, only when tf32
  auto operand = [&](int i) -> const std::vector<double>& {
    if (!tf32) return in[std::size_t(i)].values;
    rounded[i] = in[std::size_t(i)].values;
    for (double& e : rounded[i]) e = reference::round_tf32(e);
    return rounded[i];
  };
  const auto &q = operand(kQ), &k = operand(kK), &v = operand(kV), &dout = operand(kDout);
  const std::vector<double> o_built = o_given ? std::vector<double>{} : o_for_delta(s, dout, in[kDelta].values);
  const std::vector<double>& o = o_given ? *o_given : o_built;
  std::vector<std::int64_t> q_rows, k_rows;
  rows_to_check(s, q_rows, k_rows);
  reference::AttnGrads g;
  const std::vector<double> no_sinks;
  reference::AttnShape r = s;
  r.learned_sinks = false;  // the sink enters through LSE; its gradient is attn_bwd_dsink's
  if (precision == RefPrecision::f64)
    reference::attention_backward_naive_rows<double>(r, q, k, v, no_sinks, o, in[kLse].values, dout, q_rows, k_rows, g);
  else
    reference::attention_backward_naive_rows<float>(r, q, k, v, no_sinks, o, in[kLse].values, dout, q_rows, k_rows, g);
  take(g, out, q_rows, k_rows, s);
  if (precision == RefPrecision::same)
    for (std::size_t i = 0; i < outputs(s).size(); ++i) reference::round_all(out[i].dtype, out[i].values);
}

std::vector<Binding> GradStage::grad_inputs() {
  return {{offsetof(BwdParams, q), kQ},       {offsetof(BwdParams, k), kK},     {offsetof(BwdParams, v), kV},
          {offsetof(BwdParams, dout), kDout}, {offsetof(BwdParams, lse), kLse}, {offsetof(BwdParams, delta), kDelta}};
}

}  // namespace flashtune::kernels::attn_bwd
