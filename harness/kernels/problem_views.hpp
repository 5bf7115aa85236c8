// harness/kernels/problem_views.hpp: typed views of a core::Problem, one per kind of operation (attention, row-wise,
// softmax @ V). Each is built once from a Problem at the top of a descriptor's method; its constructor and the
// problem checks beside it are the only places that look a dimension up by name (problem_views.cpp), so the
// descriptors read `s.head_dim`, not `p.at("head_dim")`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "reference/attention.hpp"

namespace flashtune::kernels {

namespace attn {

/// An attention problem (DESIGN.md "Attention conventions"): the reference's AttnShape (sizes and mask; scale 0
/// = 1 / sqrt(head_dim)) and what the buffers and kernels add. Built from a problem check_problem() accepted (a
/// missing dim throws core::Error); the optional dims take their documented defaults when absent.
struct Shape : reference::AttnShape {
  core::DType dtype = core::DType::f32;
  bool tf32 = false;           ///< f32 only: TF32 tensor cores instead of exact FFMA
  std::int64_t qk_range = 1;   ///< Q and K drawn uniform in [-qk_range, qk_range]
  std::int64_t sink_bias = 0;  ///< learned sink logits drawn uniform in [sink_bias - 1, sink_bias + 1]

  Shape() = default;
  explicit Shape(const core::Problem& p);

  std::int64_t group() const { return heads_q / heads_kv; }          ///< query heads per kv head (GQA)
  bool has_window() const { return window > 0; }
  bool has_sink_tiles() const { return window > 0 && sink_tokens > 0; }  ///< sink tokens seen through a window
  bool has_rows_without_keys() const { return causal && seq_q > seq_k; }  ///< rows i < seq_q - seq_k see no key
  std::int64_t rows() const { return batch * heads_q * seq_q; }       ///< query rows: elements of LSE and D
  std::int64_t elements_q() const { return rows() * head_dim; }       ///< elements of Q, O, dO, dQ
  std::int64_t elements_kv() const { return batch * heads_kv * seq_k * head_dim; }  ///< of K, V, dK, dV
  /// seq_q and seq_k swapped: a key row of the backward costs what a query row costs with the sequences swapped.
  Shape transposed() const;
};

/// nullopt when p is a well-formed attention problem whose head_dim is one of `head_dims`, else why not (a user
/// error): every dim present and >= 1, heads_q a multiple of heads_kv, switches 0 or 1, tf32 with f32 only,
/// sink tokens with a window, 32-bit offsets per (batch, head) slice.
std::optional<std::string> check_problem(const core::Problem& p, const std::vector<std::int64_t>& head_dims);

/// Fills the dims that default to others: heads_kv = heads_q and seq_k = seq_q when left at -1.
void complete_problem(core::Problem& p);

}  // namespace attn

namespace row {

/// A rows x cols problem of the row-wise operations (weighted_row_sum, softmax).
struct Shape {
  std::int64_t rows = 1, cols = 1;
  core::DType dtype = core::DType::f32;

  explicit Shape(const core::Problem& p);
  std::int64_t elements() const { return rows * cols; }
};

/// rows >= 1, cols >= 1, rows * cols without overflow.
std::optional<std::string> check_problem(const core::Problem& p);

}  // namespace row

namespace smm {

/// softmax_matmul's problem: X (batch, d1, d2), V (batch, d2, d3), out (batch, d1, d3).
struct Shape {
  std::int64_t batch = 1, d1 = 1, d2 = 1, d3 = 1;
  std::int64_t x_range = 8;  ///< X drawn uniform in [-x_range, x_range]
  core::DType dtype = core::DType::f32;

  explicit Shape(const core::Problem& p);
};

/// nullopt when batch, d1, d2 and d3 are present, >= 1 and < 2^31; else why not.
std::optional<std::string> check_dims(const core::Problem& p);

}  // namespace smm

}  // namespace flashtune::kernels
