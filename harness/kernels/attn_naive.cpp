// harness/kernels/attn_naive.cpp: the attn_naive family, the GPU baseline that the fused kernels are
// compared with ("PyTorch (Naive)" of the seeds): the score matrix is materialized. Three steps on one
// stream: S = scale * Q K^T (cuBLAS), a softmax kernel that masks, adds the learned sink and writes P in
// place and LSE (kernel_templates/attn_naive.cuh), O = P V (cuBLAS). S / P is a workspace buffer of
// batch * heads_q * seq_q * seq_k elements, so the trial's device_bytes shows the quadratic memory.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <variant>

#include "harness/cuda/cublas.hpp"
#include "harness/cuda/module.hpp"
#include "harness/kernels/attention.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

constexpr int kS = attn::kLse + 1;  // the workspace's buffer index, after the shared attention buffers

const char* bool_arg(std::int64_t v) { return v ? "true" : "false"; }

// S / P storage: the problem dtype, as the naive algorithm rounds its matmul output (f32 stays f32).
core::DType score_dtype(const core::Problem& p) { return p.dtype; }

class AttnNaive final : public attn::AttentionFamily {
 public:
  std::string name() const override { return "attn_naive"; }
  std::string stage() const override { return "forward"; }
  std::string template_file() const override { return "attn_naive.cuh"; }
  std::string description() const override {
    return "naive attention baseline: S = Q K^T (cuBLAS), masked softmax in place, O = P V (cuBLAS); "
           "S materialized (quadratic memory)";
  }

  std::vector<TunableSpec> tunables() const override {
    return {{"block_threads", {128, 256, 512, 1024}, "threads of the softmax kernel, one block per row of S"}};
  }
  std::vector<std::string> constraints() const override { return {"block_threads % 32 == 0"}; }

  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = AttentionFamily::check_problem(p)) return why;
    // cuBLAS takes int sizes: a GQA group's query rows are one GEMM operand, (batch, kv head) the batch.
    const double group_rows = double(p.at("heads_q") / p.at("heads_kv")) * double(p.at("seq_q"));
    if (group_rows > INT_MAX) return "heads_q / heads_kv * seq_q must fit cuBLAS's int (< 2^31)";
    if (double(p.at("batch")) * double(p.at("heads_kv")) > INT_MAX) return "batch * heads_kv must be < 2^31";
    return std::nullopt;
  }

  std::optional<std::string> can_run(const core::Config& c, const core::Problem&,
                                     const core::DeviceLimits& d) const override {
    const std::int64_t t = c.at("block_threads");
    if (t < 32 || t % 32 != 0) return "block_threads " + std::to_string(t) + " must be a positive multiple of 32";
    if (t > d.max_threads_per_block)
      return "block_threads " + std::to_string(t) + " > " + std::to_string(d.max_threads_per_block) + " per block";
    return std::nullopt;
  }

  Specialization specialize(const core::Config& c, const core::Problem& p) const override {
    const core::DType s = score_dtype(p);
    const std::string t = s == core::DType::f32 ? "float" : s == core::DType::f16 ? "ft_half" : "ft_bf16";
    return {"attn_naive_softmax_kernel<" + t + ", " + std::to_string(c.at("block_threads")) + ", " +
                bool_arg(p.get("causal", 0)) + ", " + bool_arg(p.get("window", 0) > 0) + ", " +
                bool_arg(p.get("learned_sinks", 0)) + ">",
            {}};
  }

  // The softmax kernel's launch: one block per row of S (blocks stride over rows past grid.x's limit).
  LaunchShape launch_shape(const core::Config& c, const core::Problem& p, const core::DeviceLimits&) const override {
    LaunchShape s;
    s.grid[0] = unsigned(std::min<std::int64_t>(rows(p), INT_MAX));
    s.block[0] = unsigned(c.at("block_threads"));
    return s;
  }

  /// The shared attention buffers, then the workspace "s" (S, overwritten by P).
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    auto b = AttentionFamily::buffers(p);
    b.push_back({"s", score_dtype(p), rows(p) * p.at("seq_k"), BufferRole::workspace, 0, 0});
    return b;
  }

  // The softmax kernel's: (s, lse, sinks, rows, heads_q, seq_q, seq_k, window, sink_tokens).
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    return {BufferArg{kS},
            BufferArg{attn::kLse},
            BufferArg{attn::kSinks},
            std::int64_t(rows(p)),
            std::int32_t(p.at("heads_q")),
            std::int32_t(p.at("seq_q")),
            std::int32_t(p.at("seq_k")),
            std::int32_t(p.get("window", 0)),
            std::int32_t(p.get("sink_tokens", 0))};
  }

  bool launches_itself() const override { return true; }

  void launch(const LaunchEnv& env, const core::Config& c, const core::Problem& p) const override {
    if (env.buffers.size() != std::size_t(kS + 1))
      throw core::Error("attn_naive.launch: expects " + std::to_string(kS + 1) + " buffers, got " +
                        std::to_string(env.buffers.size()));
    const std::int64_t b = p.at("batch"), hq = p.at("heads_q"), hkv = p.at("heads_kv");
    const std::int64_t sq = p.at("seq_q"), sk = p.at("seq_k"), d = p.at("head_dim");
    const std::int64_t group_rows = hq / hkv * sq;  // a GQA group's query rows, contiguous in Q, S and O
    const bool tf32 = p.get("tf32", 0) != 0;
    auto stream = static_cast<CUstream>(env.stream);

    // Row-major X (r x c) is column-major X^T with the same leading dimension, so per (batch, kv head):
    // S^T (sk x group_rows) = K (sk x d, i.e. col-major d x sk transposed) * Q^T (d x group_rows).
    cuda::StridedBatchedGemm qk;
    qk.op_a = cuda::GemmOp::t, qk.op_b = cuda::GemmOp::n;
    qk.m = sk, qk.n = group_rows, qk.k = d, qk.batch = b * hkv;
    qk.alpha = float(1.0 / std::sqrt(double(d)));  // the scale, applied in fp32 before S is rounded
    qk.a = env.buffers[attn::kK], qk.a_type = p.dtype, qk.lda = d, qk.stride_a = sk * d;
    qk.b = env.buffers[attn::kQ], qk.b_type = p.dtype, qk.ldb = d, qk.stride_b = group_rows * d;
    qk.c = env.buffers[kS], qk.c_type = score_dtype(p), qk.ldc = sk, qk.stride_c = group_rows * sk;
    qk.tf32 = tf32;
    cuda::gemm(qk, stream);

    std::vector<std::uint64_t> slots;
    std::vector<void*> pointers;
    pack_launch_args(arguments(c, p), env, slots, pointers);
    cuda::launch(static_cast<CUfunction>(env.function), env.shape.grid, env.shape.block, env.shape.dynamic_smem_bytes,
                 stream, pointers.data());

    // O^T (d x group_rows) = V^T (d x sk) * P^T (sk x group_rows).
    cuda::StridedBatchedGemm pv;
    pv.op_a = cuda::GemmOp::n, pv.op_b = cuda::GemmOp::n;
    pv.m = d, pv.n = group_rows, pv.k = sk, pv.batch = b * hkv;
    pv.a = env.buffers[attn::kV], pv.a_type = p.dtype, pv.lda = d, pv.stride_a = sk * d;
    pv.b = env.buffers[kS], pv.b_type = score_dtype(p), pv.ldb = sk, pv.stride_b = group_rows * sk;
    pv.c = env.buffers[attn::kO], pv.c_type = p.dtype, pv.ldc = d, pv.stride_c = group_rows * d;
    pv.tf32 = tf32;
    cuda::gemm(pv, stream);
  }

  // S rounded to fp16 / bf16 before the softmax (which the fp32 naive reference does not do) moves each
  // logit by up to u |S| (u: the unit roundoff, 2^-11 fp16, 2^-8 bf16): LSE by up to u max|S|, O by up to
  // 2 u max|S| (O is a convex combination of V in [-1, 1]). With Q, K in [-r, r] the scaled logits have
  // standard deviation r^2 / 3, so max|S| ~ 1.5 r^2 (4.5 sigma). A host emulation of this pipeline
  // (tests/kernels/attn_naive_test.cpp) sees about a third of this bound at r = 4 (bf16: LSE 0.06, O 0.03).
  double default_atol(const core::Problem& p) const override {
    const double base = AttentionFamily::default_atol(p);
    if (p.dtype == core::DType::f32) return base;
    const double u = p.dtype == core::DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double r = double(p.get("qk_range", 1));
    return base + 2.0 * u * 1.5 * r * r;
  }

  /// Q, K, V, sinks read once, O and LSE written once, as for the fused kernels (the S / P traffic is
  /// the baseline's cost, not part of the work), so GB/s compare across families.
  double bytes_moved(const core::Problem& p) const override {
    double n = 0;
    for (const auto& b : AttentionFamily::buffers(p)) n += double(b.elements) * double(core::dtype_size(b.dtype));
    return n;
  }

 private:
  static std::int64_t rows(const core::Problem& p) { return p.at("batch") * p.at("heads_q") * p.at("seq_q"); }

};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_naive_family() { return std::make_unique<AttnNaive>(); }

}  // namespace flashtune::kernels
