// harness/kernels/attn_bwd_fused.cpp: the attn_bwd_fused operation, dK, dV and dQ in one pass, and its one variant
// (kernel_templates/attn_bwd_sm90.cuh, sm_90a): the wgmma dkdv loop, which also adds each item's dS K into an fp32
// dQ accumulator (the workspace) with atomics; prepare() zeroes it before every launch, outside the timed region;
// launch() runs the pass, then the same kernel with convert = 1 (dq = scale * accumulator in the dtype, timed with
// it). Not deterministic in dQ (the atomics' order); dK and dV are. The tuner's alternative to attn_bwd_dkdv +
// attn_bwd_dq: `flashtune query backward` takes whichever of the two sums is faster.
#include <algorithm>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/module.hpp"
#include "harness/kernels/attn_bwd_stage.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

using namespace attn_bwd;

std::string n(std::int64_t v) { return std::to_string(v); }

class FusedWgmma final : public GradVariant {
 public:
  FusedWgmma()
      : GradVariant({"sm90_wgmma", "attn_bwd_sm90.cuh", {core::DType::f16, core::DType::bf16}, 0, "", {},
                     {"block_n == 16 * num_warps", "num_warps % 4 == 0", "block_m == 64 || block_m == 128",
                      "head_dim % 64 == 0"}}) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (auto why = wgmma_problem(c, s, d, smem_bytes(c, s), registers(c, s))) return "attn_bwd_fused: " + *why;
    return std::nullopt;
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    return "attn_bwd_fused_wgmma_kernel<" + std::string(attn::storage_type(s.dtype)) + ", " + n(s.head_dim) + ", " +
           n(c.block_m) + ", " + n(c.warpgroups()) + ", " + n(c.num_stages) + ", " + attn::bool_arg(s.causal) + ", " +
           attn::bool_arg(s.has_window()) + ">";
  }
  // One block per key tile, per kv head.
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return grad_launch((s.seq_k + c.block_n - 1) / c.block_n, s.heads_kv, c, s, smem_bytes(c, s));
  }

 private:
  // K and V tiles, the dS^T tile (block_n x block_m), the stages, and 1 KiB to align to the swizzle atoms (as the
  // wgmma dkdv).
  static std::int64_t smem_bytes(const BwdConfig& c, const Shape& s) {
    return 4 * c.block_n * s.head_dim + 2 * c.block_n * c.block_m + wgmma_stage_bytes(c, s) + 1024;
  }
  // Per thread: dK and dV (head_dim / 2 each), dP^T (block_m / 2), S^T or the dQ piece (whichever is larger;
  // dQ lives after S^T is spent), the A fragments (block_m / 4), ~28 others. The dQ piece has head_dim /
  // split columns, split = warpgroups per query row block (at most head_dim / 64).
  static std::int64_t registers(const BwdConfig& c, const Shape& s) {
    const std::int64_t hd = s.head_dim, bm = c.block_m, wg = c.warpgroups();
    const std::int64_t split = std::clamp<std::int64_t>(wg / std::max<std::int64_t>(bm / 64, 1), 1, std::max<std::int64_t>(hd / 64, 1));
    return hd + bm / 2 + std::max(bm / 2, hd / split / 2) + bm / 4 + 28;
  }
};

class AttnBwdFused final : public GradStage {
 public:
  AttnBwdFused() { add_variant(std::make_unique<FusedWgmma>()); }
  std::string name() const override { return "attn_bwd_fused"; }
  std::string stage() const override { return "backward_fused"; }
  std::string description() const override {
    return "attention backward dK, dV and dQ in one pass (sm_90a wgmma): attn_bwd_dkdv's key-tile loop, dQ added "
           "into an fp32 accumulator with atomics (zeroed before every launch, untimed), then converted";
  }
  std::vector<core::DType> dtypes() const override { return {core::DType::f16, core::DType::bf16}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (p.dtype == core::DType::f32) return "attn_bwd_fused supports f16 and bf16 only (fp32: attn_bwd_dkdv + attn_bwd_dq)";
    return GradStage::check_problem(p);
  }
  bool launches_itself() const override { return true; }
  void prepare(const LaunchEnv& env, const core::Config&, const core::Problem& p) const override {
    cuda::fill_u32(env.buffers.at(kFusedAcc), std::size_t(Shape(p).elements_q()), 0u, static_cast<CUstream>(env.stream));
  }
  void launch(const LaunchEnv& env, const core::Config& config, const core::Problem& p) const override {
    const Shape s(p);
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
    const Shape s(p);
    return 10.0 * double(s.head_dim) * reference::attention_visible_pairs(s);
  }

 protected:
  std::vector<TunableSpec> shared_tunables() const override {
    return {
        {"block_m", {64, 128}, "query rows per item (the N of S^T = K Q^T)"},
        {"block_n", {64, 128}, "keys per block: 64 per warpgroup"},
        {"num_warps", {4, 8}, "warps per block (a warpgroup = 4 warps)"},
        {"num_stages", {1, 2}, "items in flight (cp.async pipeline depth)"},
    };
  }
  std::vector<Binding> bindings(const BwdConfig&, const Shape&) const override {
    auto b = grad_inputs();
    b.insert(b.end(), {{offsetof(BwdParams, dq), kFusedDq}, {offsetof(BwdParams, dk), kFusedDk},
                       {offsetof(BwdParams, dv), kFusedDv}, {offsetof(BwdParams, ws), kFusedAcc}});
    return b;
  }
  void add_workspace(const Shape& s, std::vector<BufferSpec>& b) const override {
    b.push_back({"dq_accum", core::DType::f32, s.elements_q(), BufferRole::workspace, 0, 0});
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs(const Shape& s) const override {
    return {{"dq", s.elements_q()}, {"dk", s.elements_kv()}, {"dv", s.elements_kv()}};
  }
  void rows_to_check(const Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const override {
    q_rows = every_row_if_empty(attn::reference_rows(s, attn::kReferenceBudget), s.seq_q);
    k_rows = every_row_if_empty(attn::reference_rows(s.transposed(), attn::kReferenceBudget), s.seq_k);
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
            const std::vector<std::int64_t>& k_rows, const Shape& s) const override {
    out[0].values = std::move(g.dq);
    out[0].checked = checked_rows(q_rows, s.batch * s.heads_q, s.seq_q, s.head_dim);
    out[1].values = std::move(g.dk);
    out[2].values = std::move(g.dv);
    const auto c = checked_rows(k_rows, s.batch * s.heads_kv, s.seq_k, s.head_dim);
    out[1].checked = c, out[2].checked = c;
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_bwd_fused_family() { return std::make_unique<AttnBwdFused>(); }

}  // namespace flashtune::kernels
