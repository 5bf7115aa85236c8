// harness/kernels/attention.hpp: what every attention forward family shares (DESIGN.md "Attention
// conventions"): the problem (dims, optional switches and their defaults), the buffers Q, K, V, sinks ->
// O, LSE, the visible-pair FLOP count, the byte count, the tolerance and the reference, which checks a
// sample of query rows when the whole problem is too large for the host.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/kernels/family.hpp"
#include "reference/attention.hpp"

namespace flashtune::kernels::attn {

/// Buffer indices in buffers() order.
enum Buffer : int { kQ = 0, kK = 1, kV = 2, kSinks = 3, kO = 4, kLse = 5 };

/// The problem as the reference sees it (scale 1/sqrt(head_dim)).
reference::AttnShape shape_of(const core::Problem& p);

/// Query rows the reference computes: all of them when batch * heads_q * seq_q * seq_k * head_dim is at
/// most `budget`, else the first and last four rows plus evenly spread rows (offset by a varying amount so
/// that they land at every position inside a tile), as many as the budget allows (at least 16).
std::vector<std::int64_t> reference_rows(const core::Problem& p, double budget);

inline constexpr double kReferenceBudget = 4e8;  ///< multiply-adds per reference precision

/// The shared part of an attention forward family. Required dims: batch, heads_q, seq_q, head_dim;
/// optional: heads_kv (= heads_q), seq_k (= seq_q), causal, window, sink_tokens, learned_sinks, tf32
/// (f32 only: TF32 tensor cores instead of exact FFMA), qk_range (Q and K drawn from [-r, r]: large
/// logits), sink_bias (learned sink logits drawn from [b - 1, b + 1]).
class AttentionFamily : public KernelFamily {
 public:
  std::vector<std::string> problem_dims() const override;
  std::vector<OptionalDim> optional_problem_dims() const override;
  void complete_problem(core::Problem& p) const override;
  std::vector<core::DType> dtypes() const override { return {core::DType::f16, core::DType::bf16, core::DType::f32}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override;

  /// q, k, v (problem dtype), sinks (heads_q, f32; read only with learned_sinks) -> o (problem dtype),
  /// lse (batch, heads_q, seq_q, f32, natural log).
  std::vector<BufferSpec> buffers(const core::Problem& p) const override;
  /// Q, K, V and sinks read once, O and LSE written once.
  double bytes_moved(const core::Problem& p) const override;
  /// 4 * head_dim per visible (query, key) pair per query head.
  double flops(const core::Problem& p) const override;
  void reference(const core::Problem& p, const std::vector<HostTensor>& inputs, std::vector<HostTensor>& outputs,
                 RefPrecision precision) const override;
  double default_atol(const core::Problem& p) const override;

 protected:
  /// Head dims the kernels are built for.
  virtual std::vector<std::int64_t> head_dims() const { return {16, 32, 64, 128, 256}; }
};

}  // namespace flashtune::kernels::attn
