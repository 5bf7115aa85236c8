// reference/attention.hpp: CPU oracles of attention forward (Eigen, no CUDA): a naive version that
// materializes each score row, and the FlashAttention-2 online-softmax tiling the kernels implement,
// both under the mask, GQA and sink conventions of DESIGN.md "Attention conventions". Also the
// softmax(X) @ V oracle of course part 1 and the visible-pair count that FLOPs are reported from.
#pragma once

#include <cstdint>
#include <vector>

namespace flashtune::reference {

/// One attention problem. Tensors are row-major and contiguous:
///   Q (batch, heads_q, seq_q, head_dim), K and V (batch, heads_kv, seq_k, head_dim),
///   O (batch, heads_q, seq_q, head_dim), LSE (batch, heads_q, seq_q), sinks (heads_q).
/// Query head h reads kv head h / (heads_q / heads_kv); heads_q must be a multiple of heads_kv.
struct AttnShape {
  std::int64_t batch = 1;
  std::int64_t heads_q = 1;
  std::int64_t heads_kv = 1;
  std::int64_t seq_q = 1;
  std::int64_t seq_k = 1;
  std::int64_t head_dim = 1;
  bool causal = false;             ///< j <= i + (seq_k - seq_q): bottom-right aligned
  std::int64_t window = 0;         ///< [keys] sliding window W: j > i + (seq_k - seq_q) - W; 0 = none
  std::int64_t sink_tokens = 0;    ///< [keys] the first keys stay visible through the window (not causal)
  bool learned_sinks = false;      ///< one extra logit per query head in the softmax denominator, no value
  double scale = 0;                ///< S = scale * Q K^T; 0 means 1 / sqrt(head_dim)
};

/// The mask of DESIGN.md: key j is visible to query i when
///   ((window == 0 || j > i + (seq_k - seq_q) - window) || j < sink_tokens) && (!causal || j <= i + (seq_k - seq_q)).
/// No bounds check on i, j.
bool attn_visible(const AttnShape& s, std::int64_t i, std::int64_t j);

/// Number of visible (i, j) pairs, i < seq_q and j < seq_k, per (batch, query head), times batch * heads_q.
/// O(seq_q). Forward FLOPs are 4 * head_dim * this.
double attention_visible_pairs(const AttnShape& s);

/// Attention forward by the definition: for each query row, the whole score row S_i = scale * q_i K^T is
/// materialized, masked keys dropped, and a stable softmax (max subtracted) taken:
///   LSE_i = log(sum_visible exp(S_ij) [+ exp(sinks[h]) when learned_sinks]),  O_i = sum_j exp(S_ij - LSE_i) v_j.
/// Scores, sums and products are accumulated in Acc (double: the oracle; float: the naive same-precision
/// result of the pass rule); inputs are converted to Acc first. `sinks` is read only when learned_sinks
/// (heads_q logits), otherwise it may be empty. o and lse are resized and overwritten.
/// A row with no visible key and no learned sink has O = 0 and LSE = -inf (a kernel must write the
/// same; with a learned sink such a row has O = 0 and LSE = sinks[h]).
/// Throws core::Error on a bad shape (non-positive sizes, heads_q % heads_kv != 0, negative window or
/// sink_tokens, negative scale) or a vector whose size does not match it.
template <typename Acc>
void attention_naive(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, const std::vector<double>& sinks, std::vector<double>& o,
                     std::vector<double>& lse);

/// attention_naive() for the query rows listed in `rows` only (each in [0, seq_q), in every batch and
/// head; empty = all rows). o and lse are sized in full; rows not listed hold O = 0 and LSE = -inf.
/// For problems too large to check whole on the host (cost ~ rows * seq_k * head_dim per head).
template <typename Acc>
void attention_naive_rows(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& sinks,
                          const std::vector<std::int64_t>& rows, std::vector<double>& o, std::vector<double>& lse);

/// The same result by FlashAttention-2 tiling: per block of block_m query rows, key/value blocks of
/// block_n rows are visited in order with a running max m, running sum l and an accumulator rescaled by
/// exp(m_old - m_new); O = acc / l and LSE = m + log(l) at the end. A learned sink starts the row at
/// m = s_h, l = 1. Tiles with no visible pair are skipped; the last tiles may be short (any seq).
/// Same contract, empty-row rule and errors as attention_naive(); block_m, block_n >= 1.
template <typename Acc>
void attention_tiled(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, const std::vector<double>& sinks, std::int64_t block_m,
                     std::int64_t block_n, std::vector<double>& o, std::vector<double>& lse);

/// out[b] = softmax_rows(x[b]) @ v[b] in Acc, with x (batch, d1, d2), v (batch, d2, d3), out (batch, d1, d3),
/// all row-major contiguous; the softmax is the stable one over each row of d2 values. out is resized.
/// Throws core::Error on non-positive sizes or mismatched vector sizes.
template <typename Acc>
void softmax_matmul(std::int64_t batch, std::int64_t d1, std::int64_t d2, std::int64_t d3,
                    const std::vector<double>& x, const std::vector<double>& v, std::vector<double>& out);

extern template void attention_naive<double>(const AttnShape&, const std::vector<double>&,
                                             const std::vector<double>&, const std::vector<double>&,
                                             const std::vector<double>&, std::vector<double>&,
                                             std::vector<double>&);
extern template void attention_naive<float>(const AttnShape&, const std::vector<double>&,
                                            const std::vector<double>&, const std::vector<double>&,
                                            const std::vector<double>&, std::vector<double>&, std::vector<double>&);
extern template void attention_naive_rows<double>(const AttnShape&, const std::vector<double>&,
                                                  const std::vector<double>&, const std::vector<double>&,
                                                  const std::vector<double>&, const std::vector<std::int64_t>&,
                                                  std::vector<double>&, std::vector<double>&);
extern template void attention_naive_rows<float>(const AttnShape&, const std::vector<double>&,
                                                 const std::vector<double>&, const std::vector<double>&,
                                                 const std::vector<double>&, const std::vector<std::int64_t>&,
                                                 std::vector<double>&, std::vector<double>&);
extern template void attention_tiled<double>(const AttnShape&, const std::vector<double>&,
                                             const std::vector<double>&, const std::vector<double>&,
                                             const std::vector<double>&, std::int64_t, std::int64_t,
                                             std::vector<double>&, std::vector<double>&);
extern template void attention_tiled<float>(const AttnShape&, const std::vector<double>&,
                                            const std::vector<double>&, const std::vector<double>&,
                                            const std::vector<double>&, std::int64_t, std::int64_t,
                                            std::vector<double>&, std::vector<double>&);
extern template void softmax_matmul<double>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                            const std::vector<double>&, const std::vector<double>&,
                                            std::vector<double>&);
extern template void softmax_matmul<float>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                           const std::vector<double>&, const std::vector<double>&,
                                           std::vector<double>&);

}  // namespace flashtune::reference
