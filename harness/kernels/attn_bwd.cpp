// harness/kernels/attn_bwd.cpp: the attention backward families (kernel_templates/attn_bwd.cuh), one per
// stage so that each is tuned on its own: attn_bwd_preprocess (D = rowsum(dO * O)), attn_bwd_dkdv,
// attn_bwd_dq and attn_bwd_dsink (the learned-sink gradient); attn_bwd_fused does dkdv and dq in one pass
// (sm_90a). fp16 / bf16 on tensor cores, fp32 exact or TF32 (attn_bwd_f32.hpp); every mask variant of the
// forward (causal, GQA / MQA, window, sink tokens; learned sinks enter through LSE and dsink).
// attn_bwd_dkdv launches itself: with sink_split > 1 a second launch adds the split sink tiles' partials;
// its tunable mma picks mma.sync (80, every GPU since sm_80) or Hopper wgmma (90, sm_90a, attn_bwd_sm90.cuh).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <variant>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/module.hpp"

#include "harness/kernels/attention.hpp"
#include "harness/kernels/attn_bwd.hpp"
#include "harness/kernels/attn_bwd_f32.hpp"
#include "harness/kernels/config_views.hpp"
#include "harness/kernels/builtin.hpp"
#include "reference/attention_bwd.hpp"
#include "reference/dtype.hpp"

namespace flashtune::kernels {
namespace {

using namespace attn_bwd;

const char* bool_arg(std::int64_t v) { return v ? "true" : "false"; }
std::string n(std::int64_t v) { return std::to_string(v); }
std::string type_arg(const attn::Shape& s) {
  return s.dtype == core::DType::f32 ? "float" : s.dtype == core::DType::f16 ? "ft_half" : "ft_bf16";
}

// What the backward stages share: the attention problem (dims, defaults, checks) of the forward, fp16,
// bf16 and fp32 (tf32 = 1: TF32 tensor cores), head dims 16..128, byte counts from the buffers.
//
// Inputs that come from earlier stages are drawn at random, in ranges a real backward sees:
//   LSE in [L, L + 0.5], L = log(seq_k) (Q, K in [-1, 1] give |S| ~ 1/3, so rows of P sum to about 1), and
//       for the dsink stage L = max(log(seq_k), sink_bias + 1) with learned sinks (exp(s_h - LSE) <= 1, as
//       LSE >= s_h holds for a real forward);
//   O, dO in [-1, 1]; D in [-1, 1].
// They need not be consistent with Q, K, V (the formulas hold for any O and LSE); the reference gets an O
// whose rowsum(dO * O) is exactly the D input. The end-to-end test (tests/attention/attn_bwd_gpu_test.cpp)
// feeds the real forward's O and LSE.
class AttnBwdBase : public attn::AttentionFamily {
 public:
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = AttentionFamily::check_problem(p)) return why;
    if (attn::Shape(p).qk_range != 1)
      return name() + " draws LSE for qk_range 1 only (large logits are tested end to end, with the real forward's LSE)";
    return std::nullopt;
  }

 protected:
  std::vector<std::int64_t> head_dims() const override { return {16, 32, 64, 128}; }

  // LSE as a real forward leaves it: about log(seq_k) for qk_range 1 (|S| ~ 1/3), at least s_h + 1 with
  // learned sinks when `with_sink` (the dsink stage; in dkdv and dq a sink only lowers P, which would
  // leave nothing to check).
  static std::pair<double, double> lse_range(const attn::Shape& s, bool with_sink) {
    double lo = std::log(double(s.seq_k));
    if (with_sink && s.learned_sinks) lo = std::max(lo, double(s.sink_bias) + 1.0);
    return {lo, lo + 0.5};
  }

 public:
  double bytes_moved(const core::Problem& p) const override {
    double total = 0;
    for (const auto& b : buffers(p))
      if (b.role != BufferRole::workspace) total += double(b.elements) * double(core::dtype_size(b.dtype));
    return total;
  }
};


// An O with rowsum(dO_i * O_i) = delta_i exactly (up to double rounding): O_i = delta_i dO_i / |dO_i|^2.
std::vector<double> o_for_delta(const attn::Shape& s, const std::vector<double>& dout, const std::vector<double>& delta) {
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

// D = rowsum(dO * O) of every row, in double or (RefPrecision::same) summed in fp32 as the kernels do.
std::vector<double> delta_of(const attn::Shape& s, const std::vector<double>& o, const std::vector<double>& dout,
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

// Marks `rows` (of `seq` per head, over `heads` heads of `width` elements each) checked; empty = all.
std::vector<std::uint8_t> checked_rows(const std::vector<std::int64_t>& rows, std::int64_t heads, std::int64_t seq,
                                       std::int64_t width) {
  if (rows.empty()) return {};
  std::vector<std::uint8_t> c(std::size_t(heads * seq * width), 0);
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i : rows) std::fill_n(c.begin() + std::ptrdiff_t((h * seq + i) * width), width, 1);
  return c;
}

using BwdParams = FtAttnBwdParams<void>;
/// One pointer member of FtAttnBwdParams and the buffer it takes.
struct Binding {
  std::size_t member;  ///< offsetof(BwdParams, ...)
  int buffer;
};

// The backward's parameter struct of problem p (every stage's scalars; sink_split 1, reduce and convert 0),
// as one kernel argument with `bindings` bound to the stage's buffers.
ParamsArg bwd_params(const attn::Shape& s, const std::vector<Binding>& bindings) {
  const std::int64_t hq = s.heads_q, hkv = s.heads_kv, sq = s.seq_q, sk = s.seq_k;
  const std::int64_t d = s.head_dim;
  BwdParams prm{};
  prm.q_sb = hq * sq * d, prm.q_sh = sq * d, prm.q_ss = d;
  prm.k_sb = hkv * sk * d, prm.k_sh = sk * d, prm.k_ss = d;
  prm.batch = int(s.batch), prm.heads_q = int(hq), prm.heads_kv = int(hkv), prm.seq_q = int(sq), prm.seq_k = int(sk);
  prm.window = int(s.window), prm.sink_tokens = int(s.sink_tokens);
  prm.sink_split = 1;
  prm.scale = float(1.0 / std::sqrt(double(d)));
  ParamsArg a = ParamsArg::of(prm);
  for (const auto& b : bindings) a.bind(b.member, b.buffer);
  return a;
}

// What keeps a config from the wgmma backward loop (attn_bwd_sm90.cuh: attn_bwd_dkdv's mma 90 and
// attn_bwd_fused) on device d, given its shared memory and register estimate; nullopt when it can run.
std::optional<std::string> wgmma_shape_problem(const attn::BwdConfig& c, const attn::Shape& s, const core::DeviceLimits& d,
                                               std::int64_t smem, std::int64_t regs) {
  const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps;
  const std::int64_t stages = c.num_stages, hd = s.head_dim;
  if (d.arch != "sm_90a") return "wgmma needs sm_90a, not " + d.arch;
  if (s.dtype == core::DType::f32) return "wgmma kernels take fp16 / bf16 only, not fp32 (use mma 80: exact or tf32)";
  if (warps < 4 || warps % 4 != 0 || bn != 16 * warps)
    return "block_n " + n(bn) + " must be 64 keys per warpgroup (16 x num_warps " + n(warps) + ", a multiple of 4)";
  if (bm != 64 && bm != 128) return "block_m must be 64 or 128";
  if (hd % 64 != 0) return "head_dim must be a multiple of 64 (128-byte swizzled rows)";
  if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
  if (32 * warps > d.max_threads_per_block) return "num_warps " + n(warps) + " out of range";
  if (smem > d.max_shared_per_block_optin)
    return "shared memory " + n(smem) + " B > " + n(d.max_shared_per_block_optin) + " B";
  if (regs > d.max_regs_per_thread)
    return "about " + n(regs) + " registers per thread needed (limit " + n(d.max_regs_per_thread) + ")";
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
class AttnBwdPreprocess final : public AttnBwdBase {
 public:
  std::string name() const override { return "attn_bwd_preprocess"; }
  std::string stage() const override { return "backward_preprocess"; }
  std::string template_file() const override { return "attn_bwd.cuh"; }
  std::string description() const override { return "attention backward stage 1: D = rowsum(dO * O) in fp32"; }
  std::vector<TunableSpec> tunables() const override {
    return {{"block_m", {32, 64, 128}, "query rows per block"}, {"num_warps", {2, 4, 8}, "warps per block"}};
  }
  std::vector<std::string> constraints() const override { return {}; }
  std::optional<std::string> can_run(const core::Config& config, const core::Problem&, const core::DeviceLimits& d) const override {
    const attn::PreprocessConfig c(config);
    if (c.block_m < 1) return "block_m must be >= 1";
    if (c.num_warps < 1 || 32 * c.num_warps > d.max_threads_per_block)
      return "num_warps " + n(c.num_warps) + " out of range";
    return std::nullopt;
  }
  Specialization specialize(const core::Config& config, const core::Problem& p) const override {
    const attn::PreprocessConfig c(config);
    const attn::Shape s(p);
    return {"attn_bwd_preprocess_kernel<" + type_arg(s) + ", " + n(s.head_dim) + ", " + n(c.block_m) + ", " +
                n(c.num_warps) + ">",
            {}};
  }
  LaunchShape launch_shape(const core::Config& config, const core::Problem& p, const core::DeviceLimits&) const override {
    const attn::PreprocessConfig c(config);
    const attn::Shape s(p);
    LaunchShape l;
    l.grid[0] = unsigned((s.seq_q + c.block_m - 1) / c.block_m);
    l.grid[1] = unsigned(s.heads_q);
    l.grid[2] = unsigned(s.batch);
    l.block[0] = unsigned(32 * c.num_warps);
    return l;
  }
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const attn::Shape s(p);
    return {{"o", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0},
            {"dout", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0},
            {"delta", core::DType::f32, s.rows(), BufferRole::output, 0, 0}};
  }
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    const attn::Shape s(p);
    return {bwd_params(s, {{offsetof(BwdParams, o), kPreO}, {offsetof(BwdParams, dout), kPreDout},
                           {offsetof(BwdParams, delta), kPreDelta}})};
  }
  double flops(const core::Problem& p) const override { return 2.0 * double(attn::Shape(p).elements_q()); }
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    const attn::Shape s(p);
    if (in.size() != 2 || out.size() != 1) throw core::Error(name() + ".reference: expects o, dout -> delta");
    out[0].values = delta_of(s, in[0].values, in[1].values, precision);
    out[0].checked.clear();
  }
  // A sum of head_dim products of values in [-1, 1]: a few fp32 ulps of head_dim.
  double default_atol(const core::Problem& p) const override { return 1e-6 * double(attn::Shape(p).head_dim); }
};

// ---------------------------------------------------------------------------------------------
class AttnBwdDsink final : public AttnBwdBase {
 public:
  std::string name() const override { return "attn_bwd_dsink"; }
  std::string stage() const override { return "backward_dsink"; }
  std::string template_file() const override { return "attn_bwd.cuh"; }
  std::string description() const override {
    return "attention backward: learned-sink gradient -sum_i exp(s_h - LSE_i) D_i, one block per head, deterministic";
  }
  std::vector<TunableSpec> tunables() const override { return {{"num_warps", {4, 8, 16, 32}, "warps per head"}}; }
  std::vector<std::string> constraints() const override { return {}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = AttnBwdBase::check_problem(p)) return why;
    if (!attn::Shape(p).learned_sinks) return "attn_bwd_dsink needs learned_sinks = 1";
    return std::nullopt;
  }
  std::optional<std::string> can_run(const core::Config& config, const core::Problem&, const core::DeviceLimits& d) const override {
    const attn::DsinkConfig c(config);
    if (c.num_warps < 1 || 32 * c.num_warps > d.max_threads_per_block)
      return "num_warps " + n(c.num_warps) + " out of range";
    return std::nullopt;
  }
  Specialization specialize(const core::Config& config, const core::Problem&) const override {
    const attn::DsinkConfig c(config);
    return {"attn_bwd_dsink_kernel<" + n(c.num_warps) + ">", {}};
  }
  LaunchShape launch_shape(const core::Config& config, const core::Problem& p, const core::DeviceLimits&) const override {
    const attn::DsinkConfig c(config);
    const attn::Shape s(p);
    LaunchShape l;
    l.grid[0] = unsigned(s.heads_q);
    l.block[0] = unsigned(32 * c.num_warps);
    return l;
  }
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const attn::Shape s(p);
    const double bias = double(s.sink_bias);
    const auto [lo, hi] = lse_range(s, true);
    return {{"sinks", core::DType::f32, s.heads_q, BufferRole::input, bias - 1.0, bias + 1.0},
            {"lse", core::DType::f32, s.rows(), BufferRole::input, lo, hi},
            {"delta", core::DType::f32, s.rows(), BufferRole::input, -1.0, 1.0},
            {"dsinks", core::DType::f32, s.heads_q, BufferRole::output, 0, 0}};
  }
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    const attn::Shape s(p);
    return {bwd_params(s, {{offsetof(BwdParams, sinks), kSinkSinks}, {offsetof(BwdParams, lse), kSinkLse},
                           {offsetof(BwdParams, delta), kSinkDelta}, {offsetof(BwdParams, dsinks), kSinkDsinks}})};
  }
  double flops(const core::Problem& p) const override { return 3.0 * double(attn::Shape(p).rows()); }
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    const attn::Shape s(p);
    if (in.size() != 3 || out.size() != 1) throw core::Error(name() + ".reference: expects sinks, lse, delta -> dsinks");
    const std::int64_t b = s.batch, hq = s.heads_q, sq = s.seq_q;
    auto& ds = out[0].values;
    ds.assign(std::size_t(hq), 0.0);
    for (std::int64_t h = 0; h < hq; ++h) {
      double sum = 0;
      float sf = 0;
      for (std::int64_t bb = 0; bb < b; ++bb)
        for (std::int64_t i = 0; i < sq; ++i) {
          const std::size_t r = std::size_t((bb * hq + h) * sq + i);
          sum += std::exp(in[0].values[std::size_t(h)] - in[1].values[r]) * in[2].values[r];
          sf += std::exp(float(in[0].values[std::size_t(h)]) - float(in[1].values[r])) * float(in[2].values[r]);
        }
      ds[std::size_t(h)] = precision == RefPrecision::f64 ? -sum : -double(sf);
    }
    out[0].checked.clear();
  }
  // Terms of magnitude <= 1: fp32 sums of batch * seq_q of them (the naive same-precision sum is serial).
  double default_atol(const core::Problem& p) const override {
    const attn::Shape s(p);
    return 1e-6 * std::sqrt(double(s.batch * s.seq_q));
  }
};

// ---------------------------------------------------------------------------------------------
// dkdv and dq: Q, K, V, dO, LSE, D in; gradients out in the problem dtype.
class AttnBwdGrad : public AttnBwdBase {
 public:
  std::string template_file() const override { return "attn_bwd.cuh"; }
  std::vector<TunableSpec> tunables() const override {
    return {
        {"block_m", {16, 32, 64}, "query rows per tile"},
        {"block_n", {32, 64, 128}, "keys per tile"},
        {"num_warps", {1, 2, 4, 8}, "warps per block"},  // 1: the GPT-OSS dq and dq_delta winners
        {"num_stages", {1, 2}, "tiles in flight (cp.async pipeline depth)"},
    };
  }
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const attn::Shape s(p);
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
  std::vector<KernelArg> arguments(const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    return {bwd_params(s, bindings(c, s))};
  }
  Specialization specialize(const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    if (s.dtype == core::DType::f32) return {attn_bwd_f32::name_expression(f32_stage(), c, s), {}};
    return {kernel() + "<" + type_arg(s) + ", " + n(s.head_dim) + ", " + n(c.block_m) + ", " +
                n(c.block_n) + ", " + n(c.num_warps) + ", " + n(c.num_stages) + ", " +
                bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ">",
            {}};
  }
  std::optional<std::string> can_run(const core::Config& config, const core::Problem& p, const core::DeviceLimits& d) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    if (s.dtype == core::DType::f32) return attn_bwd_f32::can_run(f32_stage(), c, s, d);
    const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps, stages = c.num_stages;
    const std::int64_t own = warp_rows(c);  // rows of the warp's MMA tiles
    if (own % (16 * warps) != 0 || own / (16 * warps) > 2 || own / (16 * warps) < 1)
      return std::string(owned()) + " " + n(own) + " must be 16 or 32 rows per warp x num_warps " + n(warps);
    if (bm % 16 != 0 || bn % 16 != 0) return "block_m and block_n must be multiples of 16";
    if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
    if (d.sm_major < 8) return "needs sm_80 or newer (bf16 mma.sync, cp.async)";
    const std::int64_t smem = smem_bytes(c, s);
    if (smem > d.max_shared_per_block_optin)
      return "shared memory " + n(smem) + " B > " + n(d.max_shared_per_block_optin) + " B";
    // The estimates below are calibrated on ptxas (attn_bwd_test compiles the default spaces): past
    // about 224 the kernels spill, though the hard limit is 255.
    const std::int64_t regs = registers(c, s);
    const std::int64_t limit = std::min<std::int64_t>(224, d.max_regs_per_thread);
    if (regs > limit) return "about " + n(regs) + " registers per thread needed (limit " + n(limit) + " without spills)";
    return std::nullopt;
  }
  LaunchShape launch_shape(const core::Config& config, const core::Problem& p, const core::DeviceLimits&) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    LaunchShape l;
    l.grid[0] = unsigned(grid_x(c, s));
    l.grid[1] = unsigned(grid_y(c, s));
    l.grid[2] = unsigned(s.batch);
    l.block[0] = unsigned(32 * c.num_warps);
    l.dynamic_smem_bytes = unsigned(smem_bytes(c, s));
    return l;
  }
  /// Element-wise tolerance on top of twice the naive fp32 error: the kernel rounds P and dS to the input
  /// dtype before their products (as FlashAttention does), the naive reference keeps them in fp32. TF32
  /// rounds P and dS to a 10-bit mantissa as fp16 does (the naive reference sees Q, K, V, dO rounded to
  /// tf32 too); those roundings are independent, so their error in a gradient grows as the square root of
  /// the terms it sums (n: seq_k for dQ, seq_q x the GQA group for dK and dV): 1e-3 up to 16 terms, x
  /// sqrt(n / 16) past that (seq_k 1 over 1000 queries: 0.0236 seen against 2 x 0.0096 + 1e-3).
  /// Exact fp32 differs from the naive fp32 by summation order and exp2 (a few ulps).
  double default_atol(const core::Problem& p) const override {
    const attn::Shape s(p);
    if (s.dtype == core::DType::f32) {
      if (!s.tf32) return 2e-5;
      const double n = std::max(double(s.seq_k), double(s.seq_q * s.heads_q / s.heads_kv));
      return 1e-3 * std::sqrt(std::max(1.0, n / 16.0));
    }
    return s.dtype == core::DType::f16 ? 5e-4 : 4e-3;
  }

  /// The reference of one stage: the naive double (or fp32) backward, given an O whose rowsum(dO * O)
  /// is the D input; sampled rows when the problem is large.
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    const attn::Shape s(p);
    if (in.size() != 6 || out.size() != outputs(s).size())
      throw core::Error(name() + ".reference: expects q, k, v, dout, lse, delta -> gradients");
    naive_gradients(s, in, precision, nullptr, out);
  }

 protected:
  /// The naive double (or fp32) backward of the rows this stage checks (rows_to_check), into its outputs()
  /// (take()), from in's Q, K, V, dO and LSE and the O given, or (nullptr) an O whose rowsum(dO * O) is in's
  /// D. TF32: the same-precision reference multiplies the operands the tensor cores see, rounded to tf32.
  void naive_gradients(const attn::Shape& s, const std::vector<HostTensor>& in, RefPrecision precision,
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

  // min_blocks (the mma.sync kernels at fp16 / bf16): blocks per SM the kernel is compiled to fit
  // (__launch_bounds__), which caps its registers at 65536 / (32 num_warps min_blocks). For short loops
  // (windows), where more resident blocks hide the latency of each one's chain of MMAs.
  static TunableSpec min_blocks_tunable() {
    // 5, 7, 12: the GPT-OSS dkdv, dq_delta and dq winners (docs/NOTES.md, sessions 13 and 16).
    return {"min_blocks", {1, 5, 7, 12},
            "blocks per SM the mma.sync kernel is compiled to fit (__launch_bounds__), capping its registers at 65536 / "
            "(32 num_warps min_blocks); 1 = no cap (fp32 and mma 90 take 1)"};
  }
  // Why min_blocks cannot run (nullopt if it can); `acc`: accumulator registers per thread, below which the
  // cap would spill (ptxas needs ~40 more; the spill check prunes what is left).
  std::optional<std::string> min_blocks_problem(const attn::BwdConfig& c, const attn::Shape& s, const core::DeviceLimits& d,
                                                std::int64_t acc) const {
    const std::int64_t mb = c.min_blocks;
    if (mb == 1) return std::nullopt;
    if (mb < 1 || mb > 32) return "min_blocks must be in 1..32";
    if (s.dtype == core::DType::f32) return "min_blocks > 1 is an fp16 / bf16 option; fp32 takes 1";
    const std::int64_t warps = c.num_warps, smem = smem_bytes(c, s);
    if (32 * warps * mb > 2048)  // threads per SM on every sm_80 .. sm_90 GPU
      return "min_blocks " + n(mb) + " x " + n(32 * warps) + " threads > 2048 per SM";
    if ((smem + 1024) * mb > d.max_shared_per_sm)
      return "min_blocks " + n(mb) + " x " + n(smem) + " B of shared memory > " + n(d.max_shared_per_sm) + " B per SM";
    const std::int64_t cap = std::min<std::int64_t>(d.max_regs_per_thread, d.max_regs_per_block / (32 * warps * mb) / 8 * 8);
    if (cap < acc + 40)
      return "min_blocks " + n(mb) + " caps registers at " + n(cap) + " per thread, too few for the " + n(acc) +
             " accumulators and ~40 others";
    return std::nullopt;
  }
  // The fp16 / bf16 mma.sync kernels take min_blocks as their last template argument.
  static Specialization with_min_blocks(Specialization spec, const attn::BwdConfig& c, const attn::Shape& s) {
    if (s.dtype != core::DType::f32) spec.name_expression.insert(spec.name_expression.size() - 1, ", " + n(c.min_blocks));
    return spec;
  }
  virtual void add_workspace(const attn::Shape&, std::vector<BufferSpec>&) const {}
  virtual attn_bwd_f32::Stage f32_stage() const = 0;
  virtual std::string kernel() const = 0;
  virtual const char* owned() const = 0;
  virtual std::int64_t warp_rows(const attn::BwdConfig& c) const = 0;
  virtual std::int64_t grid_x(const attn::BwdConfig& c, const attn::Shape& s) const = 0;
  virtual std::int64_t grid_y(const attn::BwdConfig& c, const attn::Shape& s) const = 0;
  virtual std::int64_t smem_bytes(const attn::BwdConfig& c, const attn::Shape& s) const = 0;
  virtual std::int64_t registers(const attn::BwdConfig& c, const attn::Shape& s) const = 0;
  virtual std::vector<std::pair<std::string, std::int64_t>> outputs(const attn::Shape& s) const = 0;
  /// The pointer members of FtAttnBwdParams this stage's kernel reads or writes, and their buffers.
  virtual std::vector<Binding> bindings(const attn::BwdConfig& c, const attn::Shape& s) const = 0;
  /// Q, K, V, dO, LSE and D: the inputs of dkdv, dq and fused.
  static std::vector<Binding> grad_inputs() {
    return {{offsetof(BwdParams, q), kQ},       {offsetof(BwdParams, k), kK},     {offsetof(BwdParams, v), kV},
            {offsetof(BwdParams, dout), kDout}, {offsetof(BwdParams, lse), kLse}, {offsetof(BwdParams, delta), kDelta}};
  }
  virtual void rows_to_check(const attn::Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const = 0;
  virtual void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
                    const std::vector<std::int64_t>& k_rows, const attn::Shape& s) const = 0;
};

class AttnBwdDkdv final : public AttnBwdGrad {
  static constexpr std::int64_t kMaxSinkSplit = 64;
  static std::int64_t sink_rows(const attn::Shape& s) { return s.has_sink_tiles() ? std::min(s.sink_tokens, s.seq_k) : 0; }
  static std::int64_t active_split(const attn::BwdConfig& c, const attn::Shape& s) {
    return s.has_sink_tiles() ? c.sink_split : 1;
  }
 public:
  std::string name() const override { return "attn_bwd_dkdv"; }
  std::string stage() const override { return "backward_dkdv"; }
  std::string description() const override {
    return "attention backward dK, dV: one block per key tile over the query tiles and GQA heads that see it, no atomics; "
           "sink-token tiles split over sink_split extra blocks, reduced in fixed order";
  }
  // mma 80: each warp owns one or two 16-key MMA tiles. mma 90: a warpgroup (4 warps) owns 64 keys, the
  // query tile is the N (64 or 128) of S^T = K Q^T, rows of 128-byte slabs, no sink-token split.
  std::vector<std::string> constraints() const override {
    return {"block_n % (16 * num_warps) == 0", "block_n / (16 * num_warps) <= 2", "mma == 80 || mma == 90",
            "mma == 80 || (block_n == 16 * num_warps && num_warps % 4 == 0 && (block_m == 64 || block_m == 128) && "
            "head_dim % 64 == 0 && sink_split == 1)"};
  }
  std::vector<TunableSpec> tunables() const override {
    auto t = AttnBwdGrad::tunables();
    t[0].values.push_back(128);  // block_m 128: mma 90 at head_dim 64
    t.push_back({"sink_split", {1, 4, 16, 64},
                 "extra blocks per key tile holding sink tokens (window only), each over a chunk of its far queries"});
    t.push_back({"mma", {80, 90},
                 "tensor-core instructions: 80 = mma.sync (sm_80+), 90 = warpgroup wgmma (sm_90a; a warpgroup of 4 "
                 "warps per 64 keys, block_m 64 or 128, head_dim a multiple of 64, sink_split 1)"});
    t.push_back(min_blocks_tunable());
    return t;
  }
  std::optional<std::string> can_run(const core::Config& config, const core::Problem& p, const core::DeviceLimits& d) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    const std::int64_t split = c.sink_split;
    if (split < 1 || split > kMaxSinkSplit) return "sink_split must be in 1.." + n(kMaxSinkSplit);
    if (split > 1 && !s.has_sink_tiles()) return "sink_split > 1 needs sink tokens and a window (no key tile sees every query)";
    const std::int64_t mma = c.mma;
    if (s.dtype == core::DType::f32 && (mma != 80 || active_split(c, s) != 1))
      return "fp32 runs mma 80 (FFMA or TF32 mma.sync) without the sink-token split: mma 80, sink_split 1";
    if (mma == 90) {
      if (c.min_blocks != 1) return "min_blocks is an mma 80 option; mma 90 takes 1";
      return wgmma_can_run(c, s, d);
    }
    if (mma != 80) return "mma must be 80 (mma.sync) or 90 (wgmma), not " + n(mma);
    if (auto why = AttnBwdGrad::can_run(config, p, d)) return why;
    // dK and dV (head_dim / 2 each), S and dP (block_m / 2 each) per 16-key tile of a warp
    return min_blocks_problem(c, s, d, c.block_n / (16 * c.num_warps) * (s.head_dim + c.block_m));
  }
  Specialization specialize(const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    if (c.mma != 90 || s.dtype == core::DType::f32) return with_min_blocks(AttnBwdGrad::specialize(config, p), c, s);
    return {"attn_bwd_dkdv_wgmma_kernel<" + type_arg(s) + ", " + n(s.head_dim) + ", " + n(c.block_m) + ", " +
                n(c.warpgroups()) + ", " + n(c.num_stages) + ", " + bool_arg(s.causal) + ", " +
                bool_arg(s.has_window()) + ">",
            {}};
  }
  std::vector<KernelArg> arguments(const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    return {bwd_params(s, bindings(c, s)).set(offsetof(BwdParams, sink_split), std::int32_t(active_split(c, s)))};
  }
  bool launches_itself() const override { return true; }
  // The wgmma kernel: a warpgroup per 64 keys (block_n = 16 num_warps), sm_90a only.
  std::optional<std::string> wgmma_can_run(const attn::BwdConfig& c, const attn::Shape& s, const core::DeviceLimits& d) const {
    if (active_split(c, s) != 1) return "mma 90 has no sink-token split: sink_split must be 1";
    if (auto why = wgmma_shape_problem(c, s, d, smem_bytes(c, s), registers(c, s))) return "mma 90: " + *why;
    return std::nullopt;
  }
  // The main launch, then (split sink tiles only) the reduction of their partials: the same kernel with
  // reduce = 1, one thread per element of the sink rows of a (kv head, batch).
  void launch(const LaunchEnv& env, const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    if (env.buffers.size() != std::size_t(kWorkspace + 1))
      throw core::Error("attn_bwd_dkdv.launch: expects " + n(kWorkspace + 1) + " buffers, got " + n(std::int64_t(env.buffers.size())));
    auto args = arguments(config, p);
    auto stream = static_cast<CUstream>(env.stream);
    cuda::launch(static_cast<CUfunction>(env.function), env.shape.grid, env.shape.block, env.shape.dynamic_smem_bytes,
                 stream, pack_kernel_args(args, env.buffers).pointers.data());
    if (active_split(c, s) == 1) return;
    const std::int64_t elems = sink_rows(s) * s.head_dim, threads = env.shape.threads_per_block();
    std::get<ParamsArg>(args[0]).set(offsetof(BwdParams, reduce), std::int32_t(1));
    auto reduce = pack_kernel_args(args, env.buffers);
    const unsigned grid[3] = {unsigned((elems + threads - 1) / threads), env.shape.grid[1], env.shape.grid[2]};
    cuda::launch(static_cast<CUfunction>(env.function), grid, env.shape.block, 0, stream, reduce.pointers.data());
  }
  /// S^T, dP^T, dK and dV recomputed or accumulated: 8 * head_dim per visible pair and query head.
  double flops(const core::Problem& p) const override {
    const attn::Shape s(p);
    return 8.0 * double(s.head_dim) * reference::attention_visible_pairs(s);
  }

 protected:
  attn_bwd_f32::Stage f32_stage() const override { return attn_bwd_f32::Stage::dkdv; }
  std::string kernel() const override { return "attn_bwd_dkdv_kernel"; }
  const char* owned() const override { return "block_n"; }
  std::int64_t warp_rows(const attn::BwdConfig& c) const override { return c.block_n; }
  // One block per key tile, plus sink_split per key tile holding sink tokens when the split is on.
  std::int64_t grid_x(const attn::BwdConfig& c, const attn::Shape& s) const override {
    const std::int64_t bn = c.block_n, split = active_split(c, s);
    const std::int64_t extra = split > 1 ? (sink_rows(s) + bn - 1) / bn * split : 0;
    return (s.seq_k + bn - 1) / bn + extra;
  }
  // The split's partial sums of the sink rows: (batch, heads_kv, slots, sink rows, head_dim) fp32 for dK
  // and again for dV, with kMaxSinkSplit + 1 slots, whatever the config's sink_split (buffers() does not
  // see the config); empty without sink tokens and a window.
  void add_workspace(const attn::Shape& s, std::vector<BufferSpec>& b) const override {
    const std::int64_t slots = s.has_sink_tiles() ? kMaxSinkSplit + 1 : 0;
    b.push_back({"sink_partials", core::DType::f32,
                 2 * s.batch * s.heads_kv * slots * sink_rows(s) * s.head_dim, BufferRole::workspace, 0, 0});
  }
  std::int64_t grid_y(const attn::BwdConfig&, const attn::Shape& s) const override { return s.heads_kv; }
  // K and V tiles, then num_stages x (Q tile, dO tile, LSE and D of block_m rows); mma 90: each stage
  // rounded up to 1 KiB, plus 1 KiB to align the tiles to the 1024-byte swizzle atoms wgmma reads.
  std::int64_t smem_bytes(const attn::BwdConfig& c, const attn::Shape& s) const override {
    if (s.dtype == core::DType::f32) return attn_bwd_f32::smem_bytes(f32_stage(), c, s);
    const std::int64_t d = s.head_dim, bm = c.block_m;
    if (c.mma == 90) return 4 * c.block_n * d + c.num_stages * ((4 * bm * d + 8 * bm + 1023) / 1024 * 1024) + 1024;
    return 4 * c.block_n * d + c.num_stages * (4 * bm * d + 8 * bm);
  }
  // Per warp tile of 16 keys: dK and dV accumulators (head_dim / 2 each), S^T and dP^T (block_m / 2 each),
  // P^T fragments (block_m / 4), plus addresses, loop and pipeline state.
  // mma 90, per thread: dK and dV (head_dim / 2 each), S^T and dP^T (block_m / 2 each), the A fragments
  // (block_m / 4), ~24 others.
  std::int64_t registers(const attn::BwdConfig& c, const attn::Shape& s) const override {
    if (c.mma == 90) return s.head_dim + c.block_m + c.block_m / 4 + 24;
    const std::int64_t tiles = c.block_n / (16 * c.num_warps);
    return tiles * (s.head_dim + c.block_m + c.block_m / 4) + 48 + 8 * c.num_stages;
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs(const attn::Shape& s) const override {
    return {{"dk", s.elements_kv()}, {"dv", s.elements_kv()}};
  }
  std::vector<Binding> bindings(const attn::BwdConfig&, const attn::Shape&) const override {
    auto b = grad_inputs();
    b.insert(b.end(), {{offsetof(BwdParams, dk), kGradOut}, {offsetof(BwdParams, dv), kGradOut2},
                       {offsetof(BwdParams, ws), kWorkspace}});
    return b;
  }
  void rows_to_check(const attn::Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const override {
    // a key row costs batch * heads_q * seq_q * head_dim, as a query row with the seqs swapped
    k_rows = attn::reference_rows(s.transposed(), attn::kReferenceBudget);
    if (k_rows.empty()) k_rows.reserve(std::size_t(s.seq_k));
    if (k_rows.empty())
      for (std::int64_t j = 0; j < s.seq_k; ++j) k_rows.push_back(j);
    q_rows = {0};  // dQ is not this stage's: one row keeps the reference from computing it whole
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>&,
            const std::vector<std::int64_t>& k_rows, const attn::Shape& s) const override {
    const bool all = std::int64_t(k_rows.size()) == s.seq_k;
    out[0].values = std::move(g.dk);
    out[1].values = std::move(g.dv);
    const auto c = checked_rows(all ? std::vector<std::int64_t>{} : k_rows, s.batch * s.heads_kv,
                                s.seq_k, s.head_dim);
    out[0].checked = c, out[1].checked = c;
  }
};

class AttnBwdDq : public AttnBwdGrad {
 public:
  std::string name() const override { return "attn_bwd_dq"; }
  std::string stage() const override { return "backward_dq"; }
  std::string description() const override {
    return "attention backward dQ: one block per query tile over the key tiles it sees, no atomics";
  }
  std::vector<std::string> constraints() const override {
    return {"block_m % (16 * num_warps) == 0", "block_m / (16 * num_warps) <= 2"};
  }
  std::vector<TunableSpec> tunables() const override {
    auto t = AttnBwdGrad::tunables();
    t.push_back(min_blocks_tunable());
    t.push_back({"pack_heads", {1},
                 "query heads of one GQA group per block (a divisor of heads_q / heads_kv; fp16 / bf16): the block's "
                 "block_m rows are block_m / pack_heads queries of each head, so each K/V tile serves pack_heads heads "
                 "and a windowed band stays narrow (list 2..8 in the space to try it)"});
    return t;
  }
  std::optional<std::string> can_run(const core::Config& config, const core::Problem& p, const core::DeviceLimits& d) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    if (auto why = AttnBwdGrad::can_run(config, p, d)) return why;
    const std::int64_t pack = c.pack_heads, group = s.heads_q / s.heads_kv;
    if (pack != 1 && s.dtype == core::DType::f32) return "pack_heads > 1 is an fp16 / bf16 option; fp32 takes 1";
    if (pack < 1 || group % pack != 0)
      return "pack_heads " + n(pack) + " must divide the GQA group (heads_q / heads_kv = " + n(group) + ")";
    if (c.block_m % pack != 0) return "pack_heads " + n(pack) + " must divide block_m " + n(c.block_m);
    // One warp at head_dim 128 and 64-key tiles spills at 255 registers (ptxas 13.0, sm_80 and sm_90a, every
    // mask variant; 32-key tiles do not): the GPT-OSS winners' 1 warp is a head_dim 64 choice.
    if (c.num_warps == 1 && s.head_dim > 64 && c.block_n > 32 && s.dtype != core::DType::f32)
      return "1 warp at head_dim " + n(s.head_dim) + " holds too much with block_n " + n(c.block_n) +
             " (spills): block_n 32 or 2+ warps";
    // dQ (head_dim / 2), S and dP (block_n / 2 each) per 16-row tile of a warp
    return min_blocks_problem(c, s, d, c.block_m / (16 * c.num_warps) * (s.head_dim / 2 + c.block_n));
  }
  Specialization specialize(const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    auto spec = with_min_blocks(AttnBwdGrad::specialize(config, p), c, s);
    if (c.pack_heads > 1) spec.name_expression.insert(spec.name_expression.size() - 1, ", " + n(c.pack_heads));
    return spec;
  }
  /// S, dP and dQ: 6 * head_dim per visible pair and query head.
  double flops(const core::Problem& p) const override {
    const attn::Shape s(p);
    return 6.0 * double(s.head_dim) * reference::attention_visible_pairs(s);
  }

 protected:
  attn_bwd_f32::Stage f32_stage() const override { return attn_bwd_f32::Stage::dq; }
  std::string kernel() const override { return "attn_bwd_dq_kernel"; }
  const char* owned() const override { return "block_m"; }
  std::int64_t warp_rows(const attn::BwdConfig& c) const override { return c.block_m; }
  // pack_heads (fp16 / bf16): a block holds block_m / pack_heads queries of pack_heads heads.
  std::int64_t grid_x(const attn::BwdConfig& c, const attn::Shape& s) const override {
    const std::int64_t rows = c.block_m / c.pack_heads;
    return (s.seq_q + rows - 1) / rows;
  }
  std::int64_t grid_y(const attn::BwdConfig& c, const attn::Shape& s) const override { return s.heads_q / c.pack_heads; }
  // Q and dO tiles, then num_stages x (K tile, V tile).
  std::int64_t smem_bytes(const attn::BwdConfig& c, const attn::Shape& s) const override {
    if (s.dtype == core::DType::f32) return attn_bwd_f32::smem_bytes(f32_stage(), c, s);
    const std::int64_t d = s.head_dim;
    return 4 * c.block_m * d + c.num_stages * 4 * c.block_n * d;
  }
  // Per warp tile of 16 rows: dQ accumulators (head_dim / 2), S and dP (block_n / 2 each), dS fragments
  // (block_n / 4), LSE and D, plus addresses and loop state.
  std::int64_t registers(const attn::BwdConfig& c, const attn::Shape& s) const override {
    const std::int64_t tiles = c.block_m / (16 * c.num_warps);
    return tiles * (s.head_dim / 2 + c.block_n + c.block_n / 4 + 4) + 48 + 8 * c.num_stages;
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs(const attn::Shape& s) const override {
    return {{"dq", s.elements_q()}};
  }
  std::vector<Binding> bindings(const attn::BwdConfig&, const attn::Shape&) const override {
    auto b = grad_inputs();
    b.push_back({offsetof(BwdParams, dq), kGradOut});
    return b;
  }
  void rows_to_check(const attn::Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const override {
    q_rows = attn::reference_rows(s, attn::kReferenceBudget);
    if (q_rows.empty())
      for (std::int64_t i = 0; i < s.seq_q; ++i) q_rows.push_back(i);
    k_rows = {0};  // dK, dV are not this stage's
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
            const std::vector<std::int64_t>&, const attn::Shape& s) const override {
    const bool all = std::int64_t(q_rows.size()) == s.seq_q;
    out[0].values = std::move(g.dq);
    out[0].checked = checked_rows(all ? std::vector<std::int64_t>{} : q_rows, s.batch * s.heads_q,
                                  s.seq_q, s.head_dim);
  }
};


// dQ with the preprocess fused in (attn_bwd_dq_delta_kernel): each block copies its O tile into shared memory
// with Q and dO, sums D = rowsum(dO * O) of its rows there, uses it, and writes it out for attn_bwd_dkdv and
// attn_bwd_dsink, which run after it. Replaces attn_bwd_preprocess + attn_bwd_dq (one launch and one pass over O and dO
// fewer); `flashtune query backward` takes it where dq_delta + dkdv beats the other ways. fp16 / bf16.
class AttnBwdDqDelta final : public AttnBwdDq {
 public:
  std::string name() const override { return "attn_bwd_dq_delta"; }
  std::string stage() const override { return "backward_dq_delta"; }
  std::string description() const override {
    return "attention backward dQ and D = rowsum(dO * O) in one pass (the preprocess fused in; run before attn_bwd_dkdv, "
           "which reads its D)";
  }
  std::vector<core::DType> dtypes() const override { return {core::DType::f16, core::DType::bf16}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (p.dtype == core::DType::f32)
      return "attn_bwd_dq_delta supports f16 and bf16 only (fp32: attn_bwd_preprocess + attn_bwd_dq)";
    return AttnBwdDq::check_problem(p);
  }
  // dq's buffers with O (input) in D's place and D appended as an output: q, k, v, dout, lse, o in; dq, delta out.
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const attn::Shape s(p);
    auto b = AttnBwdDq::buffers(p);
    b[kDqdO] = {"o", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0};
    b.push_back({"delta", core::DType::f32, s.rows(), BufferRole::output, 0, 0});
    return b;
  }
  // dq's inputs with O in D's place; dQ and D (written) out.
  std::vector<Binding> bindings(const attn::BwdConfig&, const attn::Shape&) const override {
    auto b = grad_inputs();
    b[kDelta] = {offsetof(BwdParams, delta), kDqdDelta};
    b.push_back({offsetof(BwdParams, o), kDqdO});
    b.push_back({offsetof(BwdParams, dq), kDqdDq});
    return b;
  }
  std::string kernel() const override { return "attn_bwd_dq_delta_kernel"; }
  // dq's tiles and the O tile (D is summed from shared memory).
  std::int64_t smem_bytes(const attn::BwdConfig& c, const attn::Shape& s) const override {
    return AttnBwdDq::smem_bytes(c, s) + 2 * c.block_m * s.head_dim;
  }
  /// dQ's 6 * head_dim per visible pair and query head, and 2 per element of O for D.
  double flops(const core::Problem& p) const override {
    return AttnBwdDq::flops(p) + 2.0 * double(attn::Shape(p).elements_q());
  }
  /// dQ from the naive backward given this O (its D = rowsum(dO * O)), sampled rows when large; D whole.
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    const attn::Shape s(p);
    if (in.size() != 6 || out.size() != 2) throw core::Error(name() + ".reference: expects q, k, v, dout, lse, o -> dq, delta");
    naive_gradients(s, in, precision, &in[kDqdO].values, out);
    out[1].values = delta_of(s, in[kDqdO].values, in[kDout].values, precision);
    out[1].checked.clear();
  }
};

// dK, dV and dQ in one pass (kernel_templates/attn_bwd_sm90.cuh, sm_90a): the wgmma dkdv loop, which also adds
// each item's dS K into an fp32 dQ accumulator (the workspace) with atomics; prepare() zeroes it before
// every launch, outside the timed region; launch() runs the pass, then the same kernel with convert = 1
// (dq = scale * accumulator in the dtype, timed with it). Not deterministic in dQ (the atomics' order);
// dK and dV are. The tuner's alternative to attn_bwd_dkdv + attn_bwd_dq: `flashtune query backward` takes
// whichever of the two sums is faster.
class AttnBwdFused final : public AttnBwdGrad {
 public:
  std::string name() const override { return "attn_bwd_fused"; }
  std::string stage() const override { return "backward_fused"; }
  std::string description() const override {
    return "attention backward dK, dV and dQ in one pass (sm_90a wgmma): attn_bwd_dkdv's key-tile loop, dQ added "
           "into an fp32 accumulator with atomics (zeroed before every launch, untimed), then converted";
  }
  std::vector<TunableSpec> tunables() const override {
    return {
        {"block_m", {64, 128}, "query rows per item (the N of S^T = K Q^T)"},
        {"block_n", {64, 128}, "keys per block: 64 per warpgroup"},
        {"num_warps", {4, 8}, "warps per block (a warpgroup = 4 warps)"},
        {"num_stages", {1, 2}, "items in flight (cp.async pipeline depth)"},
    };
  }
  std::vector<std::string> constraints() const override {
    return {"block_n == 16 * num_warps", "num_warps % 4 == 0", "block_m == 64 || block_m == 128", "head_dim % 64 == 0"};
  }
  std::vector<core::DType> dtypes() const override { return {core::DType::f16, core::DType::bf16}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (p.dtype == core::DType::f32) return "attn_bwd_fused supports f16 and bf16 only (fp32: attn_bwd_dkdv + attn_bwd_dq)";
    return AttnBwdGrad::check_problem(p);
  }
  std::optional<std::string> can_run(const core::Config& config, const core::Problem& p, const core::DeviceLimits& d) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    if (auto why = wgmma_shape_problem(c, s, d, smem_bytes(c, s), registers(c, s))) return "attn_bwd_fused: " + *why;
    return std::nullopt;
  }
  Specialization specialize(const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    return {"attn_bwd_fused_wgmma_kernel<" + type_arg(s) + ", " + n(s.head_dim) + ", " + n(c.block_m) + ", " +
                n(c.warpgroups()) + ", " + n(c.num_stages) + ", " + bool_arg(s.causal) + ", " +
                bool_arg(s.has_window()) + ">",
            {}};
  }
  std::vector<Binding> bindings(const attn::BwdConfig&, const attn::Shape&) const override {
    auto b = grad_inputs();
    b.insert(b.end(), {{offsetof(BwdParams, dq), kFusedDq}, {offsetof(BwdParams, dk), kFusedDk},
                       {offsetof(BwdParams, dv), kFusedDv}, {offsetof(BwdParams, ws), kFusedAcc}});
    return b;
  }
  bool launches_itself() const override { return true; }
  void prepare(const LaunchEnv& env, const core::Config&, const core::Problem& p) const override {
    const attn::Shape s(p);
    cuda::fill_u32(env.buffers.at(kFusedAcc), std::size_t(s.elements_q()), 0u, static_cast<CUstream>(env.stream));
  }
  void launch(const LaunchEnv& env, const core::Config& config, const core::Problem& p) const override {
    const attn::BwdConfig c(config);
    const attn::Shape s(p);
    if (env.buffers.size() != std::size_t(kFusedAcc + 1))
      throw core::Error("attn_bwd_fused.launch: expects " + n(kFusedAcc + 1) + " buffers, got " + n(std::int64_t(env.buffers.size())));
    auto args = arguments(config, p);
    auto stream = static_cast<CUstream>(env.stream);
    cuda::launch(static_cast<CUfunction>(env.function), env.shape.grid, env.shape.block, env.shape.dynamic_smem_bytes,
                 stream, pack_kernel_args(args, env.buffers).pointers.data());
    std::get<ParamsArg>(args[0]).set(offsetof(BwdParams, convert), std::int32_t(1));
    auto convert = pack_kernel_args(args, env.buffers);
    const std::int64_t quads = s.seq_q * s.head_dim / 4, threads = env.shape.threads_per_block();
    const unsigned grid[3] = {unsigned((quads + threads - 1) / threads), unsigned(s.heads_q), unsigned(s.batch)};
    cuda::launch(static_cast<CUfunction>(env.function), grid, env.shape.block, 0, stream, convert.pointers.data());
  }
  /// S^T, dP^T, dV, dK and dQ: 10 * head_dim per visible pair and query head (the whole backward's count).
  double flops(const core::Problem& p) const override {
    const attn::Shape s(p);
    return 10.0 * double(s.head_dim) * reference::attention_visible_pairs(s);
  }

 protected:
  std::string kernel() const override { return "attn_bwd_fused_wgmma_kernel"; }
  attn_bwd_f32::Stage f32_stage() const override {  // unreachable: can_run turns fp32 away (wgmma_shape_problem)
    throw core::Error("attn_bwd_fused has no fp32 kernel");
  }
  const char* owned() const override { return "block_n"; }
  std::int64_t warp_rows(const attn::BwdConfig& c) const override { return c.block_n; }
  std::int64_t grid_x(const attn::BwdConfig& c, const attn::Shape& s) const override {
    return (s.seq_k + c.block_n - 1) / c.block_n;
  }
  std::int64_t grid_y(const attn::BwdConfig&, const attn::Shape& s) const override { return s.heads_kv; }
  void add_workspace(const attn::Shape& s, std::vector<BufferSpec>& b) const override {
    b.push_back({"dq_accum", core::DType::f32, s.elements_q(), BufferRole::workspace, 0, 0});
  }
  // K and V tiles, the dS^T tile (block_n x block_m), num_stages x (Q, dO, LSE, D) rounded up to 1 KiB,
  // and 1 KiB to align to the swizzle atoms (as the wgmma dkdv).
  std::int64_t smem_bytes(const attn::BwdConfig& c, const attn::Shape& s) const override {
    const std::int64_t d = s.head_dim, bm = c.block_m, bn = c.block_n;
    return 4 * bn * d + 2 * bn * bm + c.num_stages * ((4 * bm * d + 8 * bm + 1023) / 1024 * 1024) + 1024;
  }
  // Per thread: dK and dV (head_dim / 2 each), dP^T (block_m / 2), S^T or the dQ piece (whichever is larger;
  // dQ lives after S^T is spent), the A fragments (block_m / 4), ~28 others. The dQ piece has head_dim /
  // split columns, split = warpgroups per query row block (at most head_dim / 64).
  std::int64_t registers(const attn::BwdConfig& c, const attn::Shape& s) const override {
    const std::int64_t hd = s.head_dim, bm = c.block_m, wg = c.warpgroups();
    const std::int64_t split = std::clamp<std::int64_t>(wg / std::max<std::int64_t>(bm / 64, 1), 1, std::max<std::int64_t>(hd / 64, 1));
    return hd + bm / 2 + std::max(bm / 2, hd / split / 2) + bm / 4 + 28;
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs(const attn::Shape& s) const override {
    return {{"dq", s.elements_q()}, {"dk", s.elements_kv()}, {"dv", s.elements_kv()}};
  }
  void rows_to_check(const attn::Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const override {
    q_rows = attn::reference_rows(s, attn::kReferenceBudget);
    if (q_rows.empty())
      for (std::int64_t i = 0; i < s.seq_q; ++i) q_rows.push_back(i);
    k_rows = attn::reference_rows(s.transposed(), attn::kReferenceBudget);
    if (k_rows.empty())
      for (std::int64_t j = 0; j < s.seq_k; ++j) k_rows.push_back(j);
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
            const std::vector<std::int64_t>& k_rows, const attn::Shape& s) const override {
    const bool all_q = std::int64_t(q_rows.size()) == s.seq_q, all_k = std::int64_t(k_rows.size()) == s.seq_k;
    out[0].values = std::move(g.dq);
    out[0].checked = checked_rows(all_q ? std::vector<std::int64_t>{} : q_rows, s.batch * s.heads_q,
                                  s.seq_q, s.head_dim);
    out[1].values = std::move(g.dk);
    out[2].values = std::move(g.dv);
    const auto c = checked_rows(all_k ? std::vector<std::int64_t>{} : k_rows, s.batch * s.heads_kv,
                                s.seq_k, s.head_dim);
    out[1].checked = c, out[2].checked = c;
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_bwd_preprocess_family() { return std::make_unique<AttnBwdPreprocess>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_dkdv_family() { return std::make_unique<AttnBwdDkdv>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_dq_family() { return std::make_unique<AttnBwdDq>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_dq_delta_family() { return std::make_unique<AttnBwdDqDelta>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_fused_family() { return std::make_unique<AttnBwdFused>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_dsink_family() { return std::make_unique<AttnBwdDsink>(); }

}  // namespace flashtune::kernels
