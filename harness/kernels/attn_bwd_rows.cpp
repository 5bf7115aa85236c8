// harness/kernels/attn_bwd_rows.cpp: the row-wise attention backward operations, one kernel each
// (kernel_templates/attn_bwd_rows.cuh): attn_bwd_preprocess (D = rowsum(dO * O) in fp32, before dkdv and dq) and
// attn_bwd_dsink (the learned-sink gradient, one block per head, deterministic).
#include <cmath>

#include "harness/kernels/attn_bwd_stage.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

using namespace attn_bwd;
using attn::DsinkConfig;
using attn::PreprocessConfig;

std::string n(std::int64_t v) { return std::to_string(v); }

constexpr const char* kRowsTemplate = "attn_bwd_rows.cuh";
const std::vector<core::DType> kAllDtypes{core::DType::f16, core::DType::bf16, core::DType::f32};

// Why `warps` warps per block cannot launch on device d (nullopt: they can).
std::optional<std::string> warps_problem(std::int64_t warps, const core::DeviceLimits& d) {
  if (warps < 1 || 32 * warps > d.max_threads_per_block) return "num_warps " + n(warps) + " out of range";
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
class PreprocessKernel final : public Variant<Shape, PreprocessConfig> {
 public:
  PreprocessKernel() : Variant({"rowsum", kRowsTemplate, kAllDtypes, 0, "", {}, {}}) {}
  std::optional<std::string> can_run(const PreprocessConfig& c, const Shape&, const core::DeviceLimits& d) const override {
    if (c.block_m < 1) return "block_m must be >= 1";
    return warps_problem(c.num_warps, d);
  }
  std::string name_expression(const PreprocessConfig& c, const Shape& s) const override {
    return "attn_bwd_preprocess_kernel<" + std::string(attn::storage_type(s.dtype)) + ", " + n(s.head_dim) + ", " +
           n(c.block_m) + ", " + n(c.num_warps) + ">";
  }
  LaunchShape launch_shape(const PreprocessConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    LaunchShape l;
    l.grid[0] = unsigned((s.seq_q + c.block_m - 1) / c.block_m);
    l.grid[1] = unsigned(s.heads_q);
    l.grid[2] = unsigned(s.batch);
    l.block[0] = unsigned(32 * c.num_warps);
    return l;
  }
};

class AttnBwdPreprocess final : public BwdOperation<PreprocessConfig> {
 public:
  AttnBwdPreprocess() { add_variant(std::make_unique<PreprocessKernel>()); }
  std::string name() const override { return "attn_bwd_preprocess"; }
  std::string stage() const override { return "backward_preprocess"; }
  std::string template_file() const override { return kRowsTemplate; }
  std::string description() const override { return "attention backward stage 1: D = rowsum(dO * O) in fp32"; }
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const Shape s(p);
    return {{"o", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0},
            {"dout", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0},
            {"delta", core::DType::f32, s.rows(), BufferRole::output, 0, 0}};
  }
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    return {bwd_params(Shape(p), {{offsetof(BwdParams, o), kPreO}, {offsetof(BwdParams, dout), kPreDout},
                                  {offsetof(BwdParams, delta), kPreDelta}})};
  }
  double flops(const core::Problem& p) const override { return 2.0 * double(Shape(p).elements_q()); }
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    if (in.size() != 2 || out.size() != 1) throw core::Error(name() + ".reference: expects o, dout -> delta");
    out[0].values = delta_of(Shape(p), in[0].values, in[1].values, precision);
    out[0].checked.clear();
  }
  // A sum of head_dim products of values in [-1, 1]: a few fp32 ulps of head_dim.
  double default_atol(const core::Problem& p) const override { return 1e-6 * double(Shape(p).head_dim); }

 protected:
  std::vector<TunableSpec> shared_tunables() const override {
    return {{"block_m", {32, 64, 128}, "query rows per block"}, {"num_warps", {2, 4, 8}, "warps per block"}};
  }
};

// ---------------------------------------------------------------------------------------------
class DsinkKernel final : public Variant<Shape, DsinkConfig> {
 public:
  DsinkKernel() : Variant({"head_sum", kRowsTemplate, kAllDtypes, 0, "", {}, {}}) {}
  std::optional<std::string> can_run(const DsinkConfig& c, const Shape&, const core::DeviceLimits& d) const override {
    return warps_problem(c.num_warps, d);
  }
  std::string name_expression(const DsinkConfig& c, const Shape&) const override {
    return "attn_bwd_dsink_kernel<" + n(c.num_warps) + ">";
  }
  LaunchShape launch_shape(const DsinkConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    LaunchShape l;
    l.grid[0] = unsigned(s.heads_q);
    l.block[0] = unsigned(32 * c.num_warps);
    return l;
  }
};

class AttnBwdDsink final : public BwdOperation<DsinkConfig> {
 public:
  AttnBwdDsink() { add_variant(std::make_unique<DsinkKernel>()); }
  std::string name() const override { return "attn_bwd_dsink"; }
  std::string stage() const override { return "backward_dsink"; }
  std::string template_file() const override { return kRowsTemplate; }
  std::string description() const override {
    return "attention backward: learned-sink gradient -sum_i exp(s_h - LSE_i) D_i, one block per head, deterministic";
  }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = BwdOperation::check_problem(p)) return why;
    if (!Shape(p).learned_sinks) return "attn_bwd_dsink needs learned_sinks = 1";
    return std::nullopt;
  }
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const Shape s(p);
    const double bias = double(s.sink_bias);
    const auto [lo, hi] = lse_range(s, true);
    return {{"sinks", core::DType::f32, s.heads_q, BufferRole::input, bias - 1.0, bias + 1.0},
            {"lse", core::DType::f32, s.rows(), BufferRole::input, lo, hi},
            {"delta", core::DType::f32, s.rows(), BufferRole::input, -1.0, 1.0},
            {"dsinks", core::DType::f32, s.heads_q, BufferRole::output, 0, 0}};
  }
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    return {bwd_params(Shape(p), {{offsetof(BwdParams, sinks), kSinkSinks}, {offsetof(BwdParams, lse), kSinkLse},
                                  {offsetof(BwdParams, delta), kSinkDelta}, {offsetof(BwdParams, dsinks), kSinkDsinks}})};
  }
  double flops(const core::Problem& p) const override { return 3.0 * double(Shape(p).rows()); }
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    const Shape s(p);
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
    const Shape s(p);
    return 1e-6 * std::sqrt(double(s.batch * s.seq_q));
  }

 protected:
  std::vector<TunableSpec> shared_tunables() const override { return {{"num_warps", {4, 8, 16, 32}, "warps per head"}}; }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_bwd_preprocess_family() { return std::make_unique<AttnBwdPreprocess>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_dsink_family() { return std::make_unique<AttnBwdDsink>(); }

}  // namespace flashtune::kernels
