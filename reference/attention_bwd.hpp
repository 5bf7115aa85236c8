// reference/attention_bwd.hpp: CPU oracles of attention backward (Eigen, no CUDA): a naive version by the
// definition (whole or for a subset of rows, to check long sequences on the host) and the FlashAttention-2
// tiling the backward kernels implement (D = rowsum(dO * O) first, dK/dV per key block, dQ in its own
// pass), under the mask, GQA and sink conventions of DESIGN.md "Attention conventions".
#pragma once

#include <cstdint>
#include <vector>

#include "reference/attention.hpp"

namespace flashtune::reference {

/// Gradients of one attention problem, row-major like the forward's tensors: dq like Q
/// (batch, heads_q, seq_q, head_dim), dk and dv like K and V (batch, heads_kv, seq_k, head_dim), dsinks
/// (heads_q) when learned_sinks, empty otherwise.
struct AttnGrads {
  std::vector<double> dq, dk, dv, dsinks;
};

/// Attention backward by the definition, from the forward's O and LSE as given (they need not be
/// consistent with Q, K, V: the formulas use them as they are). With S = scale * Q K^T and, per query
/// head h and row i:
///   P_ij = exp(S_ij - LSE_i) on visible pairs, 0 elsewhere;  D_i = rowsum(dO_i * O_i);
///   dP_ij = dO_i . V_j;  dS_ij = P_ij (dP_ij - D_i);
///   dQ_i = scale * sum_j dS_ij K_j;  dK_j += scale * sum_i dS_ij Q_i;  dV_j += sum_i P_ij dO_i;
///   dsinks[h] = - sum_{batch, i} exp(sinks[h] - LSE_i) * D_i   (learned_sinks only).
/// GQA: dK and dV of a kv head sum over all query heads of its group. Rows with LSE = -inf (no visible
/// key, no learned sink) contribute nothing (their dQ is 0). Computed in Acc (double: the oracle; float:
/// the naive same-precision result of the pass rule); inputs are converted to Acc first. `sinks` is read
/// only when learned_sinks. g's vectors are resized and overwritten.
/// Throws core::Error on a bad shape (as attention_naive()) or a vector whose size does not match it
/// (o and dout like q, lse (batch, heads_q, seq_q)).
template <typename Acc>
void attention_backward_naive(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, AttnGrads& g);

/// attention_backward_naive() for a subset: dQ only for the query rows in q_rows, dK and dV only for the
/// key rows in k_rows (each list in every batch and head; empty = all rows; duplicates allowed); the
/// other rows of dq, dk, dv hold 0. dsinks is always computed in full. Cost ~ (|q_rows| * seq_k +
/// seq_q * |k_rows|) * head_dim per query head, for problems too large to check whole on the host.
/// Throws core::Error also for a row outside [0, seq_q) or [0, seq_k).
template <typename Acc>
void attention_backward_naive_rows(const AttnShape& s, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<double>& sinks, const std::vector<double>& o,
                                   const std::vector<double>& lse, const std::vector<double>& dout,
                                   const std::vector<std::int64_t>& q_rows, const std::vector<std::int64_t>& k_rows,
                                   AttnGrads& g);

/// The same result by the tiling of the backward kernels (FlashAttention-2, course attention_backward_impl):
/// D_i = rowsum(dO_i * O_i) first; then for each key block of block_n rows, dK and dV accumulate over
/// every query head of its GQA group and every query block of block_m rows that can see it, P recomputed
/// from LSE tile by tile (no atomics); dQ in a separate pass per query block over the key blocks it can
/// see; dsinks as a per-head reduction. Tiles with no visible pair are skipped; the last tiles may be short
/// (any seq). Same contract and errors as attention_backward_naive(); block_m, block_n >= 1.
template <typename Acc>
void attention_backward_tiled(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, std::int64_t block_m, std::int64_t block_n,
                              AttnGrads& g);

/// What the sweep schedule costs, in tile products (one product = one block_m x block_n x head_dim matrix
/// product: S = Q K^T, dP = dO V^T, dV += P^T dO, dK += dS^T Q, dQ += dS K), summed over query heads.
struct SweepCost {
  std::int64_t visible_tiles = 0;   ///< (query tile, key tile) pairs with a visible pair of rows
  std::int64_t split_products = 0;  ///< the two-pass kernels (dkdv: S, dP, dV, dK; dq: S, dP, dQ): 7 per tile
  std::int64_t sweep_products = 0;  ///< the sweep: 5 per tile inside a chunk, 4 + 3 for a tile on a seam
  std::int64_t seam_tiles = 0;      ///< tiles whose query and key tiles belong to different chunks
};

/// The same result by the one-pass *sweep* schedule planned for windowed shapes (docs/NOTES.md, session
/// 13): per (batch, kv head) the query tiles are cut into chunks of chunk_tiles tiles; a chunk owns dQ of
/// its query tiles and dK, dV of the key tiles on its diagonal (key row j belongs with query row
/// j - (seq_k - seq_q), clamped), and visits every tile where it owns one side, adding only the side it owns;
/// a tile whose sides belong to two chunks (a seam) is visited by both. No atomics, D = rowsum(dO * O)
/// per query tile where it is used (no preprocess pass), dsinks as in attention_backward_tiled(). `cost`
/// (optional) counts the tile products of this schedule against the two-pass kernels'. Same contract and
/// errors as attention_backward_tiled(); chunk_tiles >= 1.
template <typename Acc>
void attention_backward_sweep(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, std::int64_t block_m, std::int64_t block_n,
                              std::int64_t chunk_tiles, AttnGrads& g, SweepCost* cost = nullptr);

extern template void attention_backward_naive<double>(const AttnShape&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      AttnGrads&);
extern template void attention_backward_naive<float>(const AttnShape&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     AttnGrads&);
extern template void attention_backward_naive_rows<double>(
    const AttnShape&, const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,
    const std::vector<double>&, const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,
    const std::vector<std::int64_t>&, const std::vector<std::int64_t>&, AttnGrads&);
extern template void attention_backward_naive_rows<float>(
    const AttnShape&, const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,
    const std::vector<double>&, const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,
    const std::vector<std::int64_t>&, const std::vector<std::int64_t>&, AttnGrads&);
extern template void attention_backward_tiled<double>(const AttnShape&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      std::int64_t, std::int64_t, AttnGrads&);
extern template void attention_backward_tiled<float>(const AttnShape&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     std::int64_t, std::int64_t, AttnGrads&);

extern template void attention_backward_sweep<double>(const AttnShape&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      const std::vector<double>&, const std::vector<double>&,
                                                      std::int64_t, std::int64_t, std::int64_t, AttnGrads&, SweepCost*);
extern template void attention_backward_sweep<float>(const AttnShape&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     const std::vector<double>&, const std::vector<double>&,
                                                     std::int64_t, std::int64_t, std::int64_t, AttnGrads&, SweepCost*);

}  // namespace flashtune::reference
