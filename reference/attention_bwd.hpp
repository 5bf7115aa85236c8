// reference/attention_bwd.hpp: CPU oracle of attention backward (naive, by the formulas of DESIGN.md
// "Attention conventions"): dQ, dK, dV and the learned-sink gradient from Q, K, V, sinks, O, LSE, dO.
// PLACEHOLDER from branch h-bwd so that the kernel families build: branch h-bwdref's version (same
// declarations, tested with a finite-difference check) replaces both files at merge.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/attention.hpp"

namespace flashtune::reference {

/// Gradients in the layouts of their inputs; dsinks (heads_q) only when learned_sinks, else empty.
struct AttnGrads {
  std::vector<double> dq, dk, dv, dsinks;
};

/// P_ij = exp(S_ij - LSE_i) on visible pairs, D_i = rowsum(dO_i * O_i), dV = P^T dO, dP = dO V^T,
/// dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q (GQA: summed over a kv head's query heads),
/// dsinks[h] = -sum_i exp(s_h - LSE_i) D_i. O and LSE are used as given. Computed in Acc.
template <typename Acc>
void attention_backward_naive(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, AttnGrads& g);

/// The same for the listed query rows (dQ) and key rows (dK, dV) only (empty = all); other entries are
/// 0. dsinks always in full.
template <typename Acc>
void attention_backward_naive_rows(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const std::vector<double>& sinks,
                                   const std::vector<double>& o, const std::vector<double>& lse,
                                   const std::vector<double>& dout, const std::vector<std::int64_t>& q_rows,
                                   const std::vector<std::int64_t>& k_rows, AttnGrads& g);

}  // namespace flashtune::reference
