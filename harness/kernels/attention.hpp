// harness/kernels/attention.hpp: what every attention operation shares (DESIGN.md "Attention
// conventions"): the problem (dims, optional switches and their defaults), the buffers Q, K, V, sinks ->
// O, LSE, the visible-pair FLOP count, the byte count, the tolerance and the reference, which checks a
// sample of query rows when the whole problem is too large for the host; and what the materialized-score
// baselines (attn_naive, attn_eager) share: their cuBLAS GEMMs, size checks, tolerance and workspace plan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/kernels/config_views.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/operation.hpp"
#include "harness/kernels/problem_views.hpp"
#include "kernel_templates/attn_params.cuh"
#include "reference/attention.hpp"

namespace flashtune::kernels::attn {

/// Buffer indices in buffers() order.
enum Buffer : int { kQ = 0, kK = 1, kV = 2, kSinks = 3, kO = 4, kLse = 5 };

/// The forward's parameter struct of problem s (shape, mask, scale, contiguous strides), as one kernel
/// argument with Q, K, V, sinks, O and LSE bound to their buffers.
KernelArg fwd_params(const Shape& s);

/// The TMA kernels' tensor map at `offset` of `params` over buffer `buffer`: a (head_dim, seq, heads, batch) tensor
/// of s.dtype (16-bit, 128-byte swizzle; kernel_templates/attn_params.cuh) with strides ss, sh, sb [elements] per
/// row, head and batch, each copy a box of 64 columns x `rows` rows x `box_heads` heads of one batch.
void map_heads_tensor(ParamsArg& params, std::size_t offset, int buffer, const Shape& s, std::int64_t seq,
                      std::int64_t heads, long long ss, long long sh, long long sb, std::int64_t rows,
                      std::int64_t box_heads = 1);

/// Why `blocks` blocks (min_blocks) of `threads` threads and `smem` bytes of dynamic shared memory each (plus the
/// 1 KiB the driver reserves per block) cannot share one SM: 2048 threads on every sm_80 .. sm_90 GPU,
/// d.max_shared_per_sm; nullopt when they can.
std::optional<std::string> blocks_per_sm_problem(std::int64_t blocks, std::int64_t threads, std::int64_t smem,
                                                 const core::DeviceLimits& d);

/// Registers per thread the attention kernels need, roughly (their accumulators and fragments plus addresses and loop
/// state): what can_run checks against the limits and the cold-start cost model (cost_model.cpp) counts residency by.
struct Registers {
  /// attn_fwd mma 80: per warp (bm / warps rows) O (rows hd / 32), S (rows bn / 32), Q fragments (rows hd / 64), ~24.
  static std::int64_t fwd_mma(std::int64_t hd, std::int64_t bm, std::int64_t bn, std::int64_t warps) {
    const std::int64_t rows = bm / warps;
    return rows * hd / 32 + rows * bn / 32 + rows * hd / 64 + 24;
  }
  /// attn_fwd mma 90: O (hd / 2), S (bn / 2), P fragments (bn / 8; mma_pipe 2 keeps them across the next S: bn / 4),
  /// ~30 others.
  static std::int64_t fwd_wgmma(std::int64_t hd, std::int64_t bn, std::int64_t pipe) {
    return hd / 2 + bn / 2 + bn / (pipe == 2 ? 4 : 8) + 30;
  }
  /// attn_bwd_dkdv mma 80: per warp tile of 16 keys (bn / (16 warps) of them) dK and dV (hd / 2 each), S^T and dP^T
  /// (bm / 2 each), the fragments (bm / 4); ~48 others and 8 per stage.
  static std::int64_t dkdv_mma(std::int64_t hd, std::int64_t bm, std::int64_t bn, std::int64_t warps, std::int64_t stages) {
    return bn / (16 * warps) * (hd + bm + bm / 4) + 48 + 8 * stages;
  }
  /// attn_bwd_dkdv mma 90: dK and dV (hd / 2 each), S^T and dP^T (bm / 2 each), the A fragments (bm / 4), ~24 others.
  static std::int64_t dkdv_wgmma(std::int64_t hd, std::int64_t bm) { return hd + bm + bm / 4 + 24; }
  /// attn_bwd_dq (and dq_delta) mma 80: per warp tile of 16 rows (bm / (16 warps) of them) dQ (hd / 2), S and dP
  /// (bn / 2 each), dS fragments (bn / 4), LSE and D; ~48 others and 8 per stage.
  static std::int64_t dq_mma(std::int64_t hd, std::int64_t bm, std::int64_t bn, std::int64_t warps, std::int64_t stages) {
    return bm / (16 * warps) * (hd / 2 + bn + bn / 4 + 4) + 48 + 8 * stages;
  }
};

/// Query rows the reference computes: all of them when batch * heads_q * seq_q * seq_k * head_dim is at
/// most `budget`, else the first and last four rows plus evenly spread rows (offset by a varying amount so
/// that they land at every position inside a tile), as many as the budget allows (at least 16).
std::vector<std::int64_t> reference_rows(const Shape& s, double budget);

inline constexpr double kReferenceBudget = 4e8;  ///< multiply-adds per reference precision

using kernels::bool_arg;
using kernels::storage_type;

/// nullopt when cuBLAS's int arguments hold a baseline's GEMMs: `rows` query rows per GEMM (a GQA group's
/// rows, or one head's), `batch` GEMMs per call; else why not.
std::optional<std::string> check_gemm_sizes(std::int64_t rows, std::int64_t batch);

/// The kernel of a materialized-score baseline (attn_naive, attn_eager): it runs when its `block_threads` are whole
/// warps within the device's block limit, one block per row of S (blocks stride over rows past grid.x's limit);
/// a subclass names its instantiation.
class BaselineKernel : public Variant<Shape, BaselineConfig> {
 public:
  using Variant::Variant;
  std::optional<std::string> can_run(const BaselineConfig& c, const Shape& s, const core::DeviceLimits& d) const override;
  LaunchShape launch_shape(const BaselineConfig& c, const Shape& s, const core::DeviceLimits& d) const override;
};

/// The tolerance of a baseline that rounds S to the problem dtype `roundings` times before the softmax
/// (f32: none): each rounding moves a logit by up to u |S| (u: the unit roundoff, 2^-11 fp16, 2^-8 bf16),
/// LSE by up to u max|S| and O by up to 2 u max|S| (O is a convex combination of V in [-1, 1]). With Q, K
/// in [-r, r] the scaled logits have standard deviation r^2 / 3, so max|S| ~ 1.5 r^2 (4.5 sigma).
double rounded_scores_atol(const Shape& s, double base, int roundings);

/// The two GEMMs of a materialized-score baseline, batched over `groups` (batch, kv head) pairs whose
/// `rows` query rows are contiguous in Q, S, P and O (GQA: a group's query heads one after another; with
/// K and V repeated per query head, groups = batch * heads_q and rows = seq_q). Device addresses.
struct ScoreGemms {
  std::uint64_t q = 0, k = 0, v = 0, s = 0, p = 0, o = 0;
  core::DType dtype = core::DType::f32;    ///< Q, K, V, O
  core::DType s_dtype = core::DType::f32;  ///< S as the QK^T GEMM writes it
  core::DType p_dtype = core::DType::f32;  ///< P as the PV GEMM reads it
  std::int64_t groups = 1, rows = 1, seq_k = 1, head_dim = 1;
  std::int64_t ld_p = 0;  ///< [elements] between rows of P; 0: seq_k
  float scale = 1.0f;     ///< S = scale * Q K^T, applied in fp32 before S is rounded
  bool tf32 = false;
  std::uint64_t workspace = 0;       ///< cuBLAS workspace (0: cuBLAS's own pool)
  std::int64_t workspace_bytes = 0;  ///< [bytes]
};
/// Enqueue S = scale * Q K^T (cuBLAS strided batched GEMM) on `stream` (a CUstream); may throw CublasError.
void gemm_scores(const ScoreGemms& g, void* stream);
/// Enqueue O = P V on `stream`.
void gemm_output(const ScoreGemms& g, void* stream);

/// Throws core::Error naming `who` unless env holds `n` buffers.
void expect_buffers(const LaunchEnv& env, std::size_t n, const std::string& who);

/// One intermediate tensor of an eager computation: its size and the steps in which it is live
/// (allocated at step `born`, freed after step `dies`).
struct LiveTensor {
  std::string name;
  std::int64_t bytes = 0;  ///< [bytes]
  int born = 0, dies = 0;
};
/// Where each tensor lies in one workspace allocation, as a caching allocator reuses freed blocks: sizes
/// are rounded up to `granule` bytes, and tensors whose lives overlap never share bytes.
struct WorkspacePlan {
  std::vector<std::int64_t> offsets;  ///< [bytes] per tensor, in the given order
  std::int64_t bytes = 0;             ///< [bytes] the allocation: the end of the highest tensor
  std::int64_t peak = 0;              ///< [bytes] the most bytes live at one step (a lower bound on `bytes`)
};
/// Places the largest tensors first, each at the lowest offset free during its life (greedy by size); on
/// the baselines' plans this meets the peak (tests/kernels/attn_eager_test.cpp).
WorkspacePlan plan_workspace(const std::vector<LiveTensor>& tensors, std::int64_t granule);

/// The attention problem's required dims (batch, heads_q, seq_q, head_dim) and optional ones with their defaults:
/// heads_kv (= heads_q), seq_k (= seq_q), causal, window, sink_tokens, learned_sinks, tf32 (f32 only: TF32 tensor
/// cores instead of exact FFMA), qk_range (Q and K drawn from [-r, r]: large logits), sink_bias (learned sink
/// logits drawn from [b - 1, b + 1]).
std::vector<std::string> problem_dims();
std::vector<OptionalDim> optional_problem_dims();

/// The forward's buffers: q, k, v (problem dtype), sinks (heads_q, f32; read only with learned_sinks) -> o (problem
/// dtype), lse (batch, heads_q, seq_q, f32, natural log).
std::vector<BufferSpec> fwd_buffers(const Shape& s);
/// [bytes] Q, K, V and sinks read once, O and LSE written once (a baseline's workspace traffic is its cost, not
/// part of the work, so GB/s compare across operations).
double fwd_bytes(const Shape& s);
/// [FLOP] 4 * head_dim per visible (query, key) pair per query head.
double fwd_flops(const Shape& s);
/// The forward's reference (O, LSE) of the rows reference_rows() picks; `who` names the operation in errors.
void fwd_reference(const std::string& who, const Shape& s, const std::vector<HostTensor>& inputs,
                   std::vector<HostTensor>& outputs, RefPrecision precision);
/// The forward kernels' atol beside twice the naive error.
double fwd_atol(const Shape& s);

/// The shared part of an attention operation (forward, its baselines, the backward stages), whose configs read
/// as `Tunables`: the problem (dims, defaults, checks) and, for the forward, buffers, counts, reference and
/// tolerance; a backward stage overrides the latter.
template <typename Tunables>
class AttentionOperation : public Operation<Shape, Tunables> {
 public:
  using Operation<Shape, Tunables>::Operation;

  std::vector<std::string> problem_dims() const override { return attn::problem_dims(); }
  std::vector<OptionalDim> optional_problem_dims() const override { return attn::optional_problem_dims(); }
  void complete_problem(core::Problem& p) const override { attn::complete_problem(p); }
  std::vector<core::DType> dtypes() const override { return {core::DType::f16, core::DType::bf16, core::DType::f32}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    return attn::check_problem(p, head_dims());
  }

  std::vector<BufferSpec> buffers(const core::Problem& p) const override { return fwd_buffers(Shape(p)); }
  double bytes_moved(const core::Problem& p) const override { return fwd_bytes(Shape(p)); }
  double flops(const core::Problem& p) const override { return fwd_flops(Shape(p)); }
  void reference(const core::Problem& p, const std::vector<HostTensor>& inputs, std::vector<HostTensor>& outputs,
                 RefPrecision precision) const override {
    fwd_reference(this->name(), Shape(p), inputs, outputs, precision);
  }
  double default_atol(const core::Problem& p) const override { return fwd_atol(Shape(p)); }

 protected:
  /// Head dims the kernels are built for.
  virtual std::vector<std::int64_t> head_dims() const { return {16, 32, 64, 128, 256}; }
};

}  // namespace flashtune::kernels::attn
