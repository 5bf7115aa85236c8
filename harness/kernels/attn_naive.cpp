// harness/kernels/attn_naive.cpp: the attn_naive family, the GPU baseline that the fused kernels are
// compared with ("PyTorch (Naive)" of the seeds): the score matrix is materialized. Three steps on one
// stream: S = scale * Q K^T (cuBLAS), a softmax kernel that masks, adds the learned sink and writes P in
// place and LSE (kernel_templates/attn_naive.cuh), O = P V (cuBLAS). S / P is a workspace buffer of
// batch * heads_q * seq_q * seq_k elements, so the trial's device_bytes shows the quadratic memory.
#include <cmath>
#include <cstddef>

#include "harness/cuda/module.hpp"
#include "harness/kernels/attention.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

constexpr int kS = attn::kLse + 1;  // the workspace's buffer index, after the shared attention buffers

// S / P storage: the problem dtype, as the naive algorithm rounds its matmul output (f32 stays f32).
core::DType score_dtype(const attn::Shape& s) { return s.dtype; }

// The softmax kernel: masks, adds the learned sink, writes P in place and LSE.
class NaiveSoftmax final : public attn::BaselineKernel {
 public:
  NaiveSoftmax()
      : BaselineKernel({"softmax", "attn_naive.cuh", {core::DType::f16, core::DType::bf16, core::DType::f32}, 0, "", {}, {}}) {}
  std::string name_expression(const attn::BaselineConfig& c, const attn::Shape& s) const override {
    using attn::bool_arg;
    return std::string("attn_naive_softmax_kernel<") + attn::storage_type(score_dtype(s)) + ", " +
           std::to_string(c.block_threads) + ", " + bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ", " +
           bool_arg(s.learned_sinks) + ">";
  }
};

class AttnNaive final : public attn::AttentionOperation<attn::BaselineConfig> {
 public:
  AttnNaive() { add_variant(std::make_unique<NaiveSoftmax>()); }
  std::string name() const override { return "attn_naive"; }
  std::string stage() const override { return "forward"; }
  std::string template_file() const override { return "attn_naive.cuh"; }
  std::string description() const override {
    return "naive attention baseline: S = Q K^T (cuBLAS), masked softmax in place, O = P V (cuBLAS); "
           "S materialized (quadratic memory)";
  }

  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = AttentionOperation::check_problem(p)) return why;
    // A GQA group's query rows are one GEMM operand, (batch, kv head) the batch.
    const attn::Shape s(p);
    return attn::check_gemm_sizes(s.group() * s.seq_q, s.batch * s.heads_kv);
  }

  /// The shared attention buffers, then the workspace "s" (S, overwritten by P).
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const attn::Shape s(p);
    auto b = AttentionOperation::buffers(p);
    b.push_back({"s", score_dtype(s), s.rows() * s.seq_k, BufferRole::workspace, 0, 0});
    return b;
  }

  // The softmax kernel's parameter struct, S, LSE and the sinks bound to their buffers.
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    using P = FtAttnNaiveParams<void>;
    const attn::Shape s(p);
    P n{};
    n.rows = s.rows();
    n.heads_q = std::int32_t(s.heads_q);
    n.seq_q = std::int32_t(s.seq_q);
    n.seq_k = std::int32_t(s.seq_k);
    n.window = std::int32_t(s.window);
    n.sink_tokens = std::int32_t(s.sink_tokens);
    return {ParamsArg::of(n).bind(offsetof(P, s), kS).bind(offsetof(P, lse), attn::kLse).bind(offsetof(P, sinks), attn::kSinks)};
  }

  bool launches_itself() const override { return true; }

  void launch(const LaunchEnv& env, const core::Config& c, const core::Problem& p) const override {
    attn::expect_buffers(env, std::size_t(kS + 1), name());
    const attn::Shape s(p);
    attn::ScoreGemms g;
    g.q = env.buffers[attn::kQ], g.k = env.buffers[attn::kK], g.v = env.buffers[attn::kV];
    g.s = g.p = env.buffers[kS], g.o = env.buffers[attn::kO];
    g.dtype = s.dtype, g.s_dtype = g.p_dtype = score_dtype(s);
    g.groups = s.batch * s.heads_kv, g.rows = s.group() * s.seq_q;  // a GQA group's rows, contiguous
    g.seq_k = s.seq_k, g.head_dim = s.head_dim;
    g.scale = float(1.0 / std::sqrt(double(s.head_dim)));
    g.tf32 = s.tf32;
    attn::gemm_scores(g, env.stream);

    cuda::launch(static_cast<CUfunction>(env.function), env.shape.grid, env.shape.block, env.shape.dynamic_smem_bytes,
                 static_cast<CUstream>(env.stream), pack_kernel_args(arguments(c, p), env.buffers).pointers.data());

    attn::gemm_output(g, env.stream);
  }

  // S rounded once to fp16 / bf16 before the softmax (which the fp32 naive reference does not do): see
  // attn::rounded_scores_atol. A host emulation of this pipeline (tests/kernels/attn_naive_test.cpp) sees
  // about a third of that bound at r = 4 (bf16: LSE 0.06, O 0.03).
  double default_atol(const core::Problem& p) const override {
    return attn::rounded_scores_atol(attn::Shape(p), AttentionOperation::default_atol(p), 1);
  }

 protected:
  std::vector<TunableSpec> shared_tunables() const override {
    return {{"block_threads", {128, 256, 512, 1024}, "threads of the softmax kernel, one block per row of S"}};
  }
  std::vector<std::string> shared_constraints() const override { return {"block_threads % 32 == 0"}; }
};
}  // namespace

std::unique_ptr<KernelFamily> make_attn_naive_family() { return std::make_unique<AttnNaive>(); }

}  // namespace flashtune::kernels
