// reference/attention.cpp: Eigen implementations of the attention oracles (naive, FlashAttention-2
// tiled, softmax @ V) and the mask arithmetic they share, instantiated for double and float.
#include "reference/attention.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "reference/attention_detail.hpp"

namespace flashtune::reference {
using namespace detail;  // NOLINT: the private helpers of attention_detail.hpp

bool attn_visible(const AttnShape& s, std::int64_t i, std::int64_t j) {
  const std::int64_t diag = i + (s.seq_k - s.seq_q);
  const bool in_window = s.window == 0 || j > diag - s.window;
  const bool is_sink = j < s.sink_tokens;
  return (in_window || is_sink) && (!s.causal || j <= diag);
}

double attention_visible_pairs(const AttnShape& s) {
  double per_head = 0;
  for (std::int64_t i = 0; i < s.seq_q; ++i) {
    const RowRange r = row_range(s, i);
    per_head += static_cast<double>((r.hi - r.lo) + std::min(r.sink, r.lo));
  }
  return per_head * static_cast<double>(s.batch) * static_cast<double>(s.heads_q);
}

template <typename Acc>
void attention_naive(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, const std::vector<double>& sinks, std::vector<double>& o,
                     std::vector<double>& lse) {
  attention_naive_rows<Acc>(s, q, k, v, sinks, {}, o, lse);
}

template <typename Acc>
void attention_naive_rows(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& sinks,
                          const std::vector<std::int64_t>& rows, std::vector<double>& o, std::vector<double>& lse) {
  check_inputs("attention_naive", s, q, k, v, sinks);
  for (std::int64_t i : rows)
    if (i < 0 || i >= s.seq_q)
      fail("attention_naive_rows: row " + std::to_string(i) + " outside [0, " + std::to_string(s.seq_q) + ")");
  std::vector<std::int64_t> all;
  if (rows.empty()) {
    all.resize(static_cast<std::size_t>(s.seq_q));
    for (std::int64_t i = 0; i < s.seq_q; ++i) all[static_cast<std::size_t>(i)] = i;
  }
  const std::vector<std::int64_t>& which = rows.empty() ? all : rows;
  const Acc scale = score_scale<Acc>(s);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  o.assign(static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim), 0.0);
  lse.assign(static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q), kMinusInf);
  for_each_head(s, [&](std::int64_t h, std::int64_t q_off, std::int64_t kv_off, std::int64_t lse_off) {
    const RowMajor<Acc> qm = load<Acc>(q, q_off, s.seq_q, s.head_dim);
    const RowMajor<Acc> km = load<Acc>(k, kv_off, s.seq_k, s.head_dim);
    const RowMajor<Acc> vm = load<Acc>(v, kv_off, s.seq_k, s.head_dim);
    const Acc sink = s.learned_sinks ? static_cast<Acc>(sinks[static_cast<std::size_t>(h)]) : neg_inf;
    RowVec<Acc> scores(s.seq_k);
    for (const std::int64_t i : which) {
      scores = scale * (qm.row(i) * km.transpose());
      const RowRange r = row_range(s, i);
      for (std::int64_t j = 0; j < s.seq_k; ++j)
        if (!range_visible(r, j)) scores(j) = neg_inf;
      const Acc row_max = std::max(scores.maxCoeff(), sink);
      if (row_max == neg_inf) continue;  // no visible key, no learned sink: O = 0, LSE = -inf
      const RowVec<Acc> p = masked_exp<Acc>(scores, row_max);
      const Acc sum = p.sum() + std::exp(sink - row_max);
      const RowVec<Acc> out = (p * vm) / sum;
      for (std::int64_t d = 0; d < s.head_dim; ++d)
        o[static_cast<std::size_t>(q_off + i * s.head_dim + d)] = static_cast<double>(out(d));
      lse[static_cast<std::size_t>(lse_off + i)] = static_cast<double>(row_max + std::log(sum));
    }
  });
}

template <typename Acc>
void attention_tiled(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, const std::vector<double>& sinks, std::int64_t block_m,
                     std::int64_t block_n, std::vector<double>& o, std::vector<double>& lse) {
  check_inputs("attention_tiled", s, q, k, v, sinks);
  if (block_m < 1 || block_n < 1)
    fail("attention_tiled: block_m and block_n must be >= 1, got " + std::to_string(block_m) + " and " +
         std::to_string(block_n));
  const Acc scale = score_scale<Acc>(s);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  o.assign(static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim), 0.0);
  lse.assign(static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q), kMinusInf);
  for_each_head(s, [&](std::int64_t h, std::int64_t q_off, std::int64_t kv_off, std::int64_t lse_off) {
    const Acc sink = s.learned_sinks ? static_cast<Acc>(sinks[static_cast<std::size_t>(h)]) : neg_inf;
    for (std::int64_t i0 = 0; i0 < s.seq_q; i0 += block_m) {
      const std::int64_t rows = std::min(block_m, s.seq_q - i0);
      const RowMajor<Acc> q_tile = load<Acc>(q, q_off + i0 * s.head_dim, rows, s.head_dim);
      std::vector<RowRange> ranges(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) ranges[static_cast<std::size_t>(r)] = row_range(s, i0 + r);
      // Running state per row: max m, sum l of exp(S - m), accumulator sum exp(S - m) v. A learned sink
      // enters as a score with no value: m = s_h, l = exp(s_h - s_h) = 1.
      Eigen::Matrix<Acc, Eigen::Dynamic, 1> m = Eigen::Matrix<Acc, Eigen::Dynamic, 1>::Constant(rows, sink);
      Eigen::Matrix<Acc, Eigen::Dynamic, 1> l =
          Eigen::Matrix<Acc, Eigen::Dynamic, 1>::Constant(rows, s.learned_sinks ? Acc(1) : Acc(0));
      RowMajor<Acc> acc = RowMajor<Acc>::Zero(rows, s.head_dim);
      for (std::int64_t j0 = 0; j0 < s.seq_k; j0 += block_n) {
        const std::int64_t cols = std::min(block_n, s.seq_k - j0);
        const bool any = std::any_of(ranges.begin(), ranges.end(),
                                     [&](const RowRange& r) { return range_touches(r, j0, j0 + cols); });
        if (!any) continue;  // tile fully outside the mask
        const RowMajor<Acc> k_tile = load<Acc>(k, kv_off + j0 * s.head_dim, cols, s.head_dim);
        const RowMajor<Acc> v_tile = load<Acc>(v, kv_off + j0 * s.head_dim, cols, s.head_dim);
        RowMajor<Acc> scores = scale * (q_tile * k_tile.transpose());
        for (std::int64_t r = 0; r < rows; ++r) {
          const RowRange& range = ranges[static_cast<std::size_t>(r)];
          if (!range_touches(range, j0, j0 + cols)) continue;
          auto row = scores.row(r);
          for (std::int64_t c = 0; c < cols; ++c)
            if (!range_visible(range, j0 + c)) row(c) = neg_inf;
          const Acc m_new = std::max(m(r), row.maxCoeff());
          const Acc alpha = std::exp(m(r) - m_new);  // 0 when m was -inf, m_new is finite here
          const RowVec<Acc> p = masked_exp<Acc>(row, m_new);
          l(r) = l(r) * alpha + p.sum();
          acc.row(r) = acc.row(r) * alpha + p * v_tile;
          m(r) = m_new;
        }
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        if (m(r) == neg_inf) continue;  // no visible key, no learned sink: O = 0, LSE = -inf
        for (std::int64_t d = 0; d < s.head_dim; ++d)
          o[static_cast<std::size_t>(q_off + (i0 + r) * s.head_dim + d)] = static_cast<double>(acc(r, d) / l(r));
        lse[static_cast<std::size_t>(lse_off + i0 + r)] = static_cast<double>(m(r) + std::log(l(r)));
      }
    }
  });
}

template <typename Acc>
void softmax_matmul(std::int64_t batch, std::int64_t d1, std::int64_t d2, std::int64_t d3,
                    const std::vector<double>& x, const std::vector<double>& v, std::vector<double>& out) {
  if (batch < 1 || d1 < 1 || d2 < 1 || d3 < 1) fail("softmax_matmul: batch, d1, d2 and d3 must all be >= 1");
  check_size("softmax_matmul", "x", x.size(), batch * d1 * d2);
  check_size("softmax_matmul", "v", v.size(), batch * d2 * d3);
  out.assign(static_cast<std::size_t>(batch * d1 * d3), 0.0);
  for (std::int64_t b = 0; b < batch; ++b) {
    RowMajor<Acc> p = load<Acc>(x, b * d1 * d2, d1, d2);
    for (Eigen::Index i = 0; i < p.rows(); ++i) {
      auto row = p.row(i);
      row = (row.array() - row.maxCoeff()).exp().matrix();
      row /= row.sum();
    }
    const RowMajor<Acc> y = p * load<Acc>(v, b * d2 * d3, d2, d3);
    Eigen::Map<RowMajor<double>>(out.data() + b * d1 * d3, d1, d3) = y.template cast<double>();
  }
}

template void attention_naive<double>(const AttnShape&, const std::vector<double>&, const std::vector<double>&,
                                      const std::vector<double>&, const std::vector<double>&, std::vector<double>&,
                                      std::vector<double>&);
template void attention_naive<float>(const AttnShape&, const std::vector<double>&, const std::vector<double>&,
                                     const std::vector<double>&, const std::vector<double>&, std::vector<double>&,
                                     std::vector<double>&);
template void attention_naive_rows<double>(const AttnShape&, const std::vector<double>&,
                                           const std::vector<double>&, const std::vector<double>&,
                                           const std::vector<double>&, const std::vector<std::int64_t>&,
                                           std::vector<double>&, std::vector<double>&);
template void attention_naive_rows<float>(const AttnShape&, const std::vector<double>&, const std::vector<double>&,
                                          const std::vector<double>&, const std::vector<double>&,
                                          const std::vector<std::int64_t>&, std::vector<double>&,
                                          std::vector<double>&);
template void attention_tiled<double>(const AttnShape&, const std::vector<double>&, const std::vector<double>&,
                                      const std::vector<double>&, const std::vector<double>&, std::int64_t,
                                      std::int64_t, std::vector<double>&, std::vector<double>&);
template void attention_tiled<float>(const AttnShape&, const std::vector<double>&, const std::vector<double>&,
                                     const std::vector<double>&, const std::vector<double>&, std::int64_t,
                                     std::int64_t, std::vector<double>&, std::vector<double>&);
template void softmax_matmul<double>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                     const std::vector<double>&, const std::vector<double>&, std::vector<double>&);
template void softmax_matmul<float>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                    const std::vector<double>&, const std::vector<double>&, std::vector<double>&);

}  // namespace flashtune::reference
