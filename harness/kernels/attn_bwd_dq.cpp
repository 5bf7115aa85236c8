// harness/kernels/attn_bwd_dq.cpp: the attn_bwd_dq operation (dQ: one block per query tile over the key tiles it
// sees, no atomics) and attn_bwd_dq_delta (the same with the preprocess fused in), and their variants: mma.sync
// for fp16 / bf16 (kernel_templates/attn_bwd.cuh), the fp32 kernel (exact or TF32, attn_bwd_f32.cuh) for dq's
// fp32 problems.
#include "harness/kernels/attn_bwd_f32.hpp"
#include "harness/kernels/attn_bwd_stage.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

using namespace attn_bwd;

std::string n(std::int64_t v) { return std::to_string(v); }

// pack_heads (fp16 / bf16): a block holds block_m / pack_heads queries of pack_heads heads.
LaunchShape dq_launch(const BwdConfig& c, const Shape& s, std::int64_t smem) {
  const std::int64_t rows = c.block_m / c.pack_heads;
  return grad_launch((s.seq_q + rows - 1) / rows, s.heads_q / c.pack_heads, c, s, smem);
}

// The mma.sync kernel of dq (`kernel` attn_bwd_dq_kernel) or dq_delta (attn_bwd_dq_delta_kernel, which also keeps
// the O tile in shared memory to sum D from): each warp owns one or two 16-row MMA tiles of the query block.
class DqMma final : public GradVariant {
 public:
  DqMma(std::string kernel, bool o_tile)
      : GradVariant({"sm80_mma", "attn_bwd.cuh", {core::DType::f16, core::DType::bf16}, 80, "",
                     {min_blocks_tunable(),
                      {"pack_heads", {1},
                       "query heads of one GQA group per block (a divisor of heads_q / heads_kv; fp16 / bf16): the block's "
                       "block_m rows are block_m / pack_heads queries of each head, so each K/V tile serves pack_heads "
                       "heads and a windowed band stays narrow (list 2..8 in the space to try it)"}},
                     {}}),
        m_kernel(std::move(kernel)),
        m_o_tile(o_tile) {}

  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    const std::int64_t smem = smem_bytes(c, s);
    if (auto why = mma_sync_problem(c, d, c.block_m, "block_m", smem, registers(c, s))) return why;
    const std::int64_t pack = c.pack_heads, group = s.group();
    if (pack < 1 || group % pack != 0)
      return "pack_heads " + n(pack) + " must divide the GQA group (heads_q / heads_kv = " + n(group) + ")";
    if (c.block_m % pack != 0) return "pack_heads " + n(pack) + " must divide block_m " + n(c.block_m);
    // One warp at head_dim 128 and 64-key tiles spills at 255 registers (ptxas 13.0, sm_80 and sm_90a, every
    // mask variant; 32-key tiles do not): the GPT-OSS winners' 1 warp is a head_dim 64 choice.
    if (c.num_warps == 1 && s.head_dim > 64 && c.block_n > 32)
      return "1 warp at head_dim " + n(s.head_dim) + " holds too much with block_n " + n(c.block_n) +
             " (spills): block_n 32 or 2+ warps";
    // dQ (head_dim / 2), S and dP (block_n / 2 each) per 16-row tile of a warp
    return min_blocks_problem(c, s, d, smem, c.block_m / (16 * c.num_warps) * (s.head_dim / 2 + c.block_n));
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    std::string name = mma_sync_name(m_kernel, c, s);
    if (c.pack_heads > 1) name.insert(name.size() - 1, ", " + n(c.pack_heads));
    return name;
  }
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return dq_launch(c, s, smem_bytes(c, s));
  }

 private:
  // Q and dO tiles, then num_stages x (K tile, V tile); dq_delta adds the O tile (D is summed from shared memory).
  std::int64_t smem_bytes(const BwdConfig& c, const Shape& s) const {
    return FtAttnSmem::dq_mma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages), m_o_tile);
  }
  static std::int64_t registers(const BwdConfig& c, const Shape& s) {
    return attn::Registers::dq_mma(s.head_dim, c.block_m, c.block_n, c.num_warps, c.num_stages);
  }

  std::string m_kernel;
  bool m_o_tile;
};

// dq's fp32 problems, FFMA or TF32 (pack_heads and min_blocks 1 only).
class DqF32 final : public GradVariant {
 public:
  DqF32() : GradVariant({"f32", "attn_bwd_f32.cuh", {core::DType::f32}, 80, "", {}, {}}) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (auto why = attn_bwd_f32::can_run(attn_bwd_f32::Stage::dq, c, s, d)) return why;
    if (c.pack_heads != 1) return "pack_heads > 1 is an fp16 / bf16 option; fp32 takes 1";
    return min_blocks_problem(c, s, d, 0, 0);  // fp32 takes min_blocks 1
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    return attn_bwd_f32::name_expression(attn_bwd_f32::Stage::dq, c, s);
  }
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return dq_launch(c, s, attn_bwd_f32::smem_bytes(attn_bwd_f32::Stage::dq, c, s));
  }
};

class AttnBwdDq : public GradStage {
 public:
  AttnBwdDq() {
    add_variant(std::make_unique<DqMma>("attn_bwd_dq_kernel", false));
    add_variant(std::make_unique<DqF32>());
  }
  std::string name() const override { return "attn_bwd_dq"; }
  std::string stage() const override { return "backward_dq"; }
  std::string description() const override {
    return "attention backward dQ: one block per query tile over the key tiles it sees, no atomics";
  }
  /// S, dP and dQ: 6 * head_dim per visible pair and query head.
  double flops(const core::Problem& p) const override { return visible_pair_flops(Shape(p), 6.0); }

 protected:
  struct NoVariants {};
  explicit AttnBwdDq(NoVariants) {}  // a subclass registers its own variants

  std::vector<std::string> shared_constraints() const override {
    return {"block_m % (16 * num_warps) == 0", "block_m / (16 * num_warps) <= 2"};
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs(const Shape& s) const override { return {{"dq", s.elements_q()}}; }
  std::vector<Binding> bindings(const BwdConfig&, const Shape&) const override {
    auto b = grad_inputs();
    b.push_back({offsetof(BwdParams, dq), kGradOut});
    return b;
  }
  void rows_to_check(const Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const override {
    q_rows = query_rows_to_check(s);
    k_rows = {0};  // dK, dV are not this stage's
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
            const std::vector<std::int64_t>&, const Shape& s) const override {
    take_dq(g, out[0], q_rows, s);
  }
};

// dQ with the preprocess fused in (attn_bwd_dq_delta_kernel): each block copies its O tile into shared memory
// with Q and dO, sums D = rowsum(dO * O) of its rows there, uses it, and writes it out for attn_bwd_dkdv and
// attn_bwd_dsink, which run after it. Replaces attn_bwd_preprocess + attn_bwd_dq (one launch and one pass over O and dO
// fewer); `flashtune query backward` takes it where dq_delta + dkdv beats the other ways. fp16 / bf16.
class AttnBwdDqDelta final : public AttnBwdDq {
 public:
  AttnBwdDqDelta() : AttnBwdDq(NoVariants{}) { add_variant(std::make_unique<DqMma>("attn_bwd_dq_delta_kernel", true)); }
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
    const Shape s(p);
    auto b = AttnBwdDq::buffers(p);
    b[kDqdO] = {"o", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0};
    b.push_back({"delta", core::DType::f32, s.rows(), BufferRole::output, 0, 0});
    return b;
  }
  /// dQ's 6 * head_dim per visible pair and query head, and 2 per element of O for D.
  double flops(const core::Problem& p) const override { return AttnBwdDq::flops(p) + 2.0 * double(Shape(p).elements_q()); }
  /// dQ from the naive backward given this O (its D = rowsum(dO * O)), sampled rows when large; D whole.
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    const Shape s(p);
    if (in.size() != 6 || out.size() != 2) throw core::Error(name() + ".reference: expects q, k, v, dout, lse, o -> dq, delta");
    naive_gradients(s, in, precision, &in[kDqdO].values, out);
    out[1].values = delta_of(s, in[kDqdO].values, in[kDout].values, precision);
    out[1].checked.clear();
  }

 protected:
  // dq's inputs with O in D's place; dQ and D (written) out.
  std::vector<Binding> bindings(const BwdConfig&, const Shape&) const override {
    auto b = grad_inputs();
    b[kDelta] = {offsetof(BwdParams, delta), kDqdDelta};
    b.push_back({offsetof(BwdParams, o), kDqdO});
    b.push_back({offsetof(BwdParams, dq), kDqdDq});
    return b;
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_bwd_dq_family() { return std::make_unique<AttnBwdDq>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_dq_delta_family() { return std::make_unique<AttnBwdDqDelta>(); }

}  // namespace flashtune::kernels
