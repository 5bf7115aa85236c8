// harness/kernels/attn_bwd_fused.cpp: the attn_bwd_fused operation, dK, dV and dQ in one pass, and its one variant
// (kernel_templates/attn_bwd_sm90.cuh, sm_90a): the wgmma dkdv loop, which also adds each item's dS K into an fp32
// dQ accumulator (the workspace) with atomics; prepare() zeroes it before every launch, outside the timed region;
// launch() runs the pass, then the same kernel with convert = 1 (dq = scale * accumulator in the dtype, timed with
// it). Not deterministic in dQ (the atomics' order); dK and dV are. The tuner's alternative to attn_bwd_dkdv +
// attn_bwd_dq: `flashtune query backward` takes whichever of the two sums is faster.
#include <algorithm>

#include "harness/cuda/buffer.hpp"
#include "harness/kernels/attn_bwd_stage.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

using namespace attn_bwd;

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
    return wgmma_name("attn_bwd_fused_wgmma_kernel", c, s);
  }
  // One block per key tile, per kv head.
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return grad_launch((s.seq_k + c.block_n - 1) / c.block_n, s.heads_kv, c, s, smem_bytes(c, s));
  }

 private:
  // K and V tiles, the dS^T tile (block_n x block_m), the stages, and 1 KiB to align to the swizzle atoms (as the
  // wgmma dkdv).
  static std::int64_t smem_bytes(const BwdConfig& c, const Shape& s) {
    return FtAttnSmem::bwd_wgmma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages), true);
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
  std::string template_file() const override { return "attn_bwd_sm90.cuh"; }
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
    attn::expect_buffers(env, std::size_t(kFusedAcc + 1), name());
    auto args = arguments(config, p);
    launch_pass(env, args);
    const std::int64_t quads = s.seq_q * s.head_dim / 4, threads = env.shape.threads_per_block();
    launch_second_pass(env, args, offsetof(BwdParams, convert),
                       {unsigned((quads + threads - 1) / threads), unsigned(s.heads_q), unsigned(s.batch)});
  }
  /// S^T, dP^T, dV, dK and dQ: 10 * head_dim per visible pair and query head (the whole backward's count).
  double flops(const core::Problem& p) const override { return visible_pair_flops(Shape(p), 10.0); }

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
    q_rows = query_rows_to_check(s);
    k_rows = key_rows_to_check(s);
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
            const std::vector<std::int64_t>& k_rows, const Shape& s) const override {
    take_dq(g, out[0], q_rows, s);
    take_dkdv(g, out[1], out[2], k_rows, s);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_bwd_fused_family() { return std::make_unique<AttnBwdFused>(); }

}  // namespace flashtune::kernels
