// harness/kernels/attn_eager.cpp: the attn_eager family, the seeds' "PyTorch (Naive)" attention replayed op
// for op, so that flashtune reports the speedup and memory ratio the GStar grader prints. attn_naive is a
// lean baseline (S in place, one fused softmax); this one materializes every tensor eager PyTorch does, in
// the order it does, in one workspace laid out as its caching allocator would reuse freed blocks:
//
//   K, V = repeat_kv(K), repeat_kv(V)          (GQA only; the caller's K, V stay alive)
//   S = (Q @ K^T) * scale                      (cuBLAS GEMM into a fresh buffer, then a scaling op)
//   mask = create_mask_bool(...)               (causal / window / sink tokens: bool seq_q x seq_k)
//   S.masked_fill_(~mask, -inf)
//   S = cat([S, sinks], -1)                    (learned sinks, GPT-OSS style: f32, as cat promotes)
//   P = softmax(S, -1, dtype=float32).to(dtype)
//   O = P[..., :seq_k] @ V                     (cuBLAS)
//   L = logsumexp(S.to(float32), -1)           (amax, masked_fill_(|max| == inf, 0), (S - max).exp_(),
//                                               sum, log_, add_)
// Element-wise and row ops are kernel_templates/attn_eager.cuh, one launch per PyTorch op.
//
// Memory, checked against the seeds' table (B1 H16 L4096 D16 fp16, non-causal: "PyTorch (Naive) 3.0162
// GB, Triton 0.0157 GB, 191.54x less memory"): with n = batch * heads_q * seq_q * seq_k, the peak is in
// logsumexp, where S (2n bytes), P (2n), S.to(float32) (4n) and S - max (4n) are live: 12n = 3 GiB. Beside
// them: Q, K, V, O (8 MiB), L and the row maxima (256 KiB each) and PyTorch's cuBLAS workspace (8.125 MiB,
// kCublasWorkspaceBytes): 3072 + 16.625 MiB = 3.016235 GiB, printed 3.0162; the Triton kernel's Q, K, V,
// O and the same cuBLAS workspace (kept from the naive run) make 16.125 MiB = 0.0157 GiB, and
// 3088.625 / 16.125 = 191.54. Both numbers match, so "GB" is GiB (2^30 bytes). The causal variant adds
// the bool mask (seq_q * seq_k bytes, alive to the end): 3.0319 GiB. f32 holds S, P (the softmax output
// itself) and S - max, 12n again; bf16 converts S to f32 inside the softmax (10n there), 12n at the end.
#include "harness/kernels/attn_eager.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>

#include "harness/cuda/module.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {

namespace eager {

namespace {
constexpr int kLastStep = 19;  // every tensor still held at the end lives to here
}  // namespace

std::vector<attn::LiveTensor> tensors(const core::Problem& p) {
  const attn::Shape s(p);
  const std::int64_t b = s.batch, hq = s.heads_q, sq = s.seq_q, sk = s.seq_k, d = s.head_dim;
  const std::int64_t es = std::int64_t(core::dtype_size(s.dtype)), rows = s.rows(), n = rows * sk;
  const bool gqa = hq != s.heads_kv, masked = s.causal || s.has_window();
  const bool sinks = s.learned_sinks, f32 = s.dtype == core::DType::f32;
  const std::int64_t n_soft = sinks ? rows * (sk + 1) : n;  // the softmax's elements
  const std::int64_t soft_es = sinks ? 4 : es;               // its input's element size
  std::vector<attn::LiveTensor> t(kNumTensors);
  auto set = [&](Tensor i, const char* name, std::int64_t bytes, int born, int dies) { t[i] = {name, bytes, born, dies}; };
  set(kCublas, "cublas_workspace", kCublasWorkspaceBytes, 2, kLastStep);
  set(kKRep, "k_rep", gqa ? b * hq * sk * d * es : 0, 0, kLastStep);
  set(kVRep, "v_rep", gqa ? b * hq * sk * d * es : 0, 1, kLastStep);
  set(kQk, "qk", n * es, 2, 3);
  set(kS, "s", n * es, 3, sinks ? 7 : kLastStep);
  set(kMask, "mask", masked ? sq * sk : 0, 4, kLastStep);
  set(kNotMask, "not_mask", masked ? sq * sk : 0, 5, 6);
  set(kSCat, "s_cat", sinks ? n_soft * 4 : 0, 7, kLastStep);
  // softmax(x, dtype=float32): fp16 on CUDA runs half_to_float in one kernel; other dtypes are converted.
  set(kSoftmaxIn, "softmax_in", soft_es == 2 && s.dtype == core::DType::bf16 ? n_soft * 4 : 0, 8, 9);
  set(kP32, "p32", n_soft * 4, 9, f32 ? kLastStep : 10);
  set(kP, "p", f32 ? 0 : n_soft * es, 10, kLastStep);
  set(kS32, "s32", soft_es == 4 ? 0 : n_soft * 4, 12, kLastStep);
  set(kMaxes, "maxes", rows * 4, 13, kLastStep);
  set(kDiff, "diff", n_soft * 4, 15, kLastStep);
  return t;
}

attn::WorkspacePlan plan(const core::Problem& p) { return attn::plan_workspace(tensors(p), kAllocGranule); }

}  // namespace eager

namespace {

constexpr int kWorkspace = attn::kLse + 1;  // the workspace's buffer index, after the shared attention buffers

// The ops of attn_eager.cuh (AttnEagerOp); the values must match.
enum class EagerOp : std::int32_t {
  repeat_kv = 0, scale = 1, mask = 2, logical_not = 3, masked_fill = 4, cat_sink = 5, to_float = 6,
  softmax = 7, to_dtype = 8, row_max = 9, zero_inf = 10, sub_row = 11, exp = 12, row_sum = 13, log = 14, add = 15,
};

// The op kernel of attn_eager.cuh, one launch per PyTorch op; launch_shape() gives the block of every op, each
// launch picks its own grid (AttnEager::launch()).
class EagerOps final : public attn::BaselineKernel {
 public:
  EagerOps()
      : BaselineKernel({"ops", "attn_eager.cuh", {core::DType::f16, core::DType::bf16, core::DType::f32}, 0, "", {}, {}}) {}
  std::optional<std::string> can_run(const attn::BaselineConfig& c, const attn::Shape& s,
                                     const core::DeviceLimits& d) const override {
    if (auto why = BaselineKernel::can_run(c, s, d)) return why;
    // torch.softmax of a row that is all -inf is NaN (and so is that row of O): eager PyTorch fails the
    // pass rule there by construction, so such problems are not run.
    if (s.has_rows_without_keys() && !s.learned_sinks)
      return "causal with seq_q > seq_k leaves rows with no visible key, where eager PyTorch's softmax gives NaN";
    return std::nullopt;
  }
  std::string name_expression(const attn::BaselineConfig& c, const attn::Shape& s) const override {
    using attn::bool_arg;
    return std::string("attn_eager_kernel<") + attn::storage_type(s.dtype) + ", " + std::to_string(c.block_threads) +
           ", " + bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ">";
  }
};

class AttnEager final : public attn::AttentionOperation<attn::BaselineConfig> {
 public:
  AttnEager() { add_variant(std::make_unique<EagerOps>()); }
  std::string name() const override { return "attn_eager"; }
  std::string stage() const override { return "forward"; }
  std::string template_file() const override { return "attn_eager.cuh"; }
  std::string description() const override {
    return "eager PyTorch attention replayed op for op (the seeds' \"PyTorch (Naive)\"): every intermediate "
           "materialized, cuBLAS matmuls, peak memory as PyTorch's allocator counts it";
  }

  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = AttentionOperation::check_problem(p)) return why;
    // K and V repeated per query head: one GEMM per (batch, query head) of seq_q rows.
    const attn::Shape s(p);
    if (auto why = attn::check_gemm_sizes(s.seq_q, s.batch * s.heads_q)) return why;
    if (double(s.seq_k) + 1 > INT_MAX) return "seq_k + 1 must fit an int";
    return std::nullopt;
  }

  /// The shared attention buffers, then "workspace": every intermediate, eager::plan(p).bytes long.
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    auto b = AttentionOperation::buffers(p);
    b.push_back({"workspace", core::DType::f32, eager::plan(p).bytes / 4, BufferRole::workspace, 0, 0});
    return b;
  }

  // The first op's arguments (K's repetition, or the scaling of Q K^T): (op, a, b, out, n, cols, a_f32,
  // heads_q, group, seq_q, seq_k, head_dim, window, sink_tokens, scale); launch() makes the others.
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    return op_args(attn::Shape(p), EagerOp::scale, 0, 0, 0, 0, 0);
  }

  bool launches_itself() const override { return true; }

  void launch(const LaunchEnv& env, const core::Config&, const core::Problem& p) const override {
    attn::expect_buffers(env, std::size_t(kWorkspace + 1), name());
    const attn::Shape s(p);
    const std::int64_t b = s.batch, hq = s.heads_q, hkv = s.heads_kv, sq = s.seq_q, sk = s.seq_k, d = s.head_dim;
    const std::int64_t rows = s.rows(), n = rows * sk;
    const bool sinks = s.learned_sinks, f32 = s.dtype == core::DType::f32;
    const bool masked = s.causal || s.has_window();
    const std::int64_t cols = sinks ? sk + 1 : sk;  // the softmax's row
    const auto plan = eager::plan(p);
    const auto at = [&](eager::Tensor t) { return env.buffers[kWorkspace] + std::uint64_t(plan.offsets[t]); };

    // Local buffer table: env's buffers, then one entry per tensor, so that ops name operands by index.
    LaunchEnv e = env;
    const int base = int(e.buffers.size());
    for (int t = 0; t < eager::kNumTensors; ++t) e.buffers.push_back(at(eager::Tensor(t)));
    auto ws = [&](eager::Tensor t) { return base + int(t); };
    auto run = [&](EagerOp op, int a, int bb, int out, std::int64_t count, std::int64_t row_len, bool a_f32 = false) {
      const bool row_op = op == EagerOp::softmax || op == EagerOp::row_max || op == EagerOp::row_sum ||
                          op == EagerOp::masked_fill || op == EagerOp::sub_row;
      const std::int64_t threads = env.shape.block[0];
      const bool wide = op == EagerOp::scale || op == EagerOp::to_float || op == EagerOp::to_dtype || op == EagerOp::exp;
      const std::int64_t per_block = threads * (wide ? 4 : 1);  // wide ops: four elements per thread
      const std::int64_t blocks = row_op ? count : (count + per_block - 1) / per_block;
      const unsigned grid[3] = {unsigned(std::clamp<std::int64_t>(blocks, 1, INT_MAX)), 1, 1};
      auto args = pack_kernel_args(op_args(s, op, a, bb, out, count, row_len, a_f32), e.buffers);
      cuda::launch(static_cast<CUfunction>(env.function), grid, env.shape.block, 0, static_cast<CUstream>(env.stream),
                   args.pointers.data());
    };

    attn::ScoreGemms g;
    g.q = env.buffers[attn::kQ], g.k = env.buffers[attn::kK], g.v = env.buffers[attn::kV], g.o = env.buffers[attn::kO];
    if (hq != hkv) {
      const std::int64_t kv = b * hq * sk * d;
      run(EagerOp::repeat_kv, attn::kK, attn::kK, ws(eager::kKRep), kv, 0);
      run(EagerOp::repeat_kv, attn::kV, attn::kV, ws(eager::kVRep), kv, 0);
      g.k = at(eager::kKRep), g.v = at(eager::kVRep);
    }
    g.dtype = g.s_dtype = g.p_dtype = s.dtype;
    g.groups = b * hq, g.rows = sq, g.seq_k = sk, g.head_dim = d;
    g.tf32 = s.tf32;
    g.workspace = at(eager::kCublas), g.workspace_bytes = eager::kCublasWorkspaceBytes;
    g.s = at(eager::kQk);
    attn::gemm_scores(g, env.stream);  // Q @ K^T, unscaled
    run(EagerOp::scale, ws(eager::kQk), ws(eager::kQk), ws(eager::kS), n, 0);

    if (masked) {
      run(EagerOp::mask, ws(eager::kMask), ws(eager::kMask), ws(eager::kMask), sq * sk, 0);
      run(EagerOp::logical_not, ws(eager::kMask), ws(eager::kMask), ws(eager::kNotMask), sq * sk, 0);
      run(EagerOp::masked_fill, ws(eager::kS), ws(eager::kNotMask), ws(eager::kS), rows, sk);
    }
    int scores = ws(eager::kS);  // the softmax's input and logsumexp's
    bool scores_f32 = f32;
    if (sinks) {
      run(EagerOp::cat_sink, ws(eager::kS), attn::kSinks, ws(eager::kSCat), rows * cols, sk);
      scores = ws(eager::kSCat), scores_f32 = true;
    }

    int soft_in = scores;
    if (!scores_f32 && s.dtype == core::DType::bf16) {
      run(EagerOp::to_float, scores, scores, ws(eager::kSoftmaxIn), rows * cols, 0);
      soft_in = ws(eager::kSoftmaxIn);
    }
    run(EagerOp::softmax, soft_in, soft_in, ws(eager::kP32), rows, cols, scores_f32 || soft_in != scores);
    int probs = ws(eager::kP32);
    if (!f32) {
      run(EagerOp::to_dtype, ws(eager::kP32), ws(eager::kP32), ws(eager::kP), rows * cols, 0);
      probs = ws(eager::kP);
    }
    g.p = e.buffers[std::size_t(probs)], g.ld_p = cols;
    attn::gemm_output(g, env.stream);

    int s32 = scores;
    if (!scores_f32) {
      run(EagerOp::to_float, scores, scores, ws(eager::kS32), rows * cols, 0);
      s32 = ws(eager::kS32);
    }
    run(EagerOp::row_max, s32, s32, ws(eager::kMaxes), rows, cols, true);
    run(EagerOp::zero_inf, ws(eager::kMaxes), ws(eager::kMaxes), ws(eager::kMaxes), rows, 0);
    run(EagerOp::sub_row, s32, ws(eager::kMaxes), ws(eager::kDiff), rows, cols);
    run(EagerOp::exp, ws(eager::kDiff), ws(eager::kDiff), ws(eager::kDiff), rows * cols, 0);
    run(EagerOp::row_sum, ws(eager::kDiff), ws(eager::kDiff), attn::kLse, rows, cols, true);
    run(EagerOp::log, attn::kLse, attn::kLse, attn::kLse, rows, 0);
    run(EagerOp::add, ws(eager::kMaxes), ws(eager::kMaxes), attn::kLse, rows, 0);
  }

  // S rounded to the dtype twice before the softmax: by the Q K^T GEMM and by the scaling.
  double default_atol(const core::Problem& p) const override {
    return attn::rounded_scores_atol(attn::Shape(p), AttentionOperation::default_atol(p), 2);
  }

 protected:
  std::vector<TunableSpec> shared_tunables() const override {
    return {{"block_threads", {128, 256, 512, 1024}, "threads per block of every element-wise and row op"}};
  }
  std::vector<std::string> shared_constraints() const override { return {"block_threads % 32 == 0"}; }

 private:
  // One op's kernel argument, the parameter struct; buffers by index into the launch's buffer table.
  static std::vector<KernelArg> op_args(const attn::Shape& s, EagerOp op, int a, int b, int out, std::int64_t n,
                                        std::int64_t cols, bool a_f32 = false) {
    const std::int64_t d = s.head_dim;
    FtAttnEagerParams e{};
    e.n = n;
    e.op = std::int32_t(op);
    e.cols = std::int32_t(cols);
    e.a_f32 = a_f32 ? 1 : 0;
    e.heads_q = std::int32_t(s.heads_q);
    e.group = std::int32_t(s.group());
    e.seq_q = std::int32_t(s.seq_q);
    e.seq_k = std::int32_t(s.seq_k);
    e.head_dim = std::int32_t(d);
    e.window = std::int32_t(s.window);
    e.sink_tokens = std::int32_t(s.sink_tokens);
    e.scale = float(1.0 / std::sqrt(double(d)));
    return {ParamsArg::of(e)
                .bind(offsetof(FtAttnEagerParams, a), a)
                .bind(offsetof(FtAttnEagerParams, b), b)
                .bind(offsetof(FtAttnEagerParams, out), out)};
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_eager_family() { return std::make_unique<AttnEager>(); }

}  // namespace flashtune::kernels
