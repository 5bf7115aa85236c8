// reference/attention_bwd.cpp: the naive attention backward (PLACEHOLDER from branch h-bwd; branch
// h-bwdref's version replaces it at merge). Plain loops over visible pairs, in Acc.
#include "reference/attention_bwd.hpp"

#include <cmath>
#include <string>

#include "harness/core/types.hpp"

namespace flashtune::reference {

template <typename Acc>
void attention_backward_naive_rows(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const std::vector<double>& sinks,
                                   const std::vector<double>& o, const std::vector<double>& lse,
                                   const std::vector<double>& dout, const std::vector<std::int64_t>& q_rows,
                                   const std::vector<std::int64_t>& k_rows, AttnGrads& g) {
  const std::int64_t B = s.batch, HQ = s.heads_q, HK = s.heads_kv, SQ = s.seq_q, SK = s.seq_k, D = s.head_dim;
  if (B < 1 || HQ < 1 || HK < 1 || SQ < 1 || SK < 1 || D < 1 || HQ % HK != 0)
    throw core::Error("attention_backward_naive: bad shape");
  const std::size_t nq = std::size_t(B * HQ * SQ * D), nk = std::size_t(B * HK * SK * D);
  if (q.size() != nq || o.size() != nq || dout.size() != nq || k.size() != nk || v.size() != nk ||
      lse.size() != std::size_t(B * HQ * SQ) || (s.learned_sinks && sinks.size() != std::size_t(HQ)))
    throw core::Error("attention_backward_naive: a tensor's size does not match the shape");
  const Acc scale = Acc(s.scale > 0 ? s.scale : 1.0 / std::sqrt(double(D)));
  std::vector<char> want_q(std::size_t(SQ), q_rows.empty()), want_k(std::size_t(SK), k_rows.empty());
  for (auto i : q_rows) {
    if (i < 0 || i >= SQ) throw core::Error("attention_backward_naive_rows: query row out of range");
    want_q[std::size_t(i)] = 1;
  }
  for (auto j : k_rows) {
    if (j < 0 || j >= SK) throw core::Error("attention_backward_naive_rows: key row out of range");
    want_k[std::size_t(j)] = 1;
  }
  g.dq.assign(nq, 0.0), g.dk.assign(nk, 0.0), g.dv.assign(nk, 0.0);
  g.dsinks.assign(s.learned_sinks ? std::size_t(HQ) : 0, 0.0);
  std::vector<Acc> dk_acc(nk, Acc(0)), dv_acc(nk, Acc(0)), dq_row(static_cast<std::size_t>(D));
  std::vector<Acc> dsink_acc(std::size_t(HQ), Acc(0));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < HQ; ++h) {
      const std::int64_t hk = h / (HQ / HK);
      const std::size_t qo = std::size_t((b * HQ + h) * SQ * D), ko = std::size_t((b * HK + hk) * SK * D);
      for (std::int64_t i = 0; i < SQ; ++i) {
        const std::size_t r = qo + std::size_t(i * D);
        const Acc l = Acc(lse[std::size_t((b * HQ + h) * SQ + i)]);
        Acc di = 0;
        for (std::int64_t d = 0; d < D; ++d) di += Acc(dout[r + std::size_t(d)]) * Acc(o[r + std::size_t(d)]);
        if (s.learned_sinks) dsink_acc[std::size_t(h)] -= std::exp(Acc(sinks[std::size_t(h)]) - l) * di;
        std::fill(dq_row.begin(), dq_row.end(), Acc(0));
        // Every key for a wanted query row, else only the listed keys (cost ~ rows * seq_k + seq_q * keys).
        const bool all_keys = want_q[std::size_t(i)] || k_rows.empty();
        const std::int64_t n_keys = all_keys ? SK : std::int64_t(k_rows.size());
        for (std::int64_t jj = 0; jj < n_keys; ++jj) {
          const std::int64_t j = all_keys ? jj : k_rows[std::size_t(jj)];
          if (!attn_visible(s, i, j)) continue;
          const std::size_t c = ko + std::size_t(j * D);
          Acc sij = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            sij += Acc(q[r + std::size_t(d)]) * Acc(k[c + std::size_t(d)]);
            dp += Acc(dout[r + std::size_t(d)]) * Acc(v[c + std::size_t(d)]);
          }
          const Acc p = std::exp(sij * scale - l);
          const Acc ds = p * (dp - di);
          if (want_q[std::size_t(i)])
            for (std::int64_t d = 0; d < D; ++d) dq_row[std::size_t(d)] += ds * Acc(k[c + std::size_t(d)]);
          if (want_k[std::size_t(j)])
            for (std::int64_t d = 0; d < D; ++d) {
              dv_acc[c + std::size_t(d)] += p * Acc(dout[r + std::size_t(d)]);
              dk_acc[c + std::size_t(d)] += ds * Acc(q[r + std::size_t(d)]);
            }
        }
        if (want_q[std::size_t(i)])
          for (std::int64_t d = 0; d < D; ++d) g.dq[r + std::size_t(d)] = double(dq_row[std::size_t(d)] * scale);
      }
    }
  for (std::size_t x = 0; x < nk; ++x) g.dk[x] = double(dk_acc[x] * scale), g.dv[x] = double(dv_acc[x]);
  for (std::size_t h = 0; h < g.dsinks.size(); ++h) g.dsinks[h] = double(dsink_acc[h]);
}

template <typename Acc>
void attention_backward_naive(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, AttnGrads& g) {
  attention_backward_naive_rows<Acc>(s, q, k, v, sinks, o, lse, dout, {}, {}, g);
}

#define FT_INSTANTIATE(Acc)                                                                                   \
  template void attention_backward_naive<Acc>(const AttnShape&, const std::vector<double>&,                   \
                                              const std::vector<double>&, const std::vector<double>&,         \
                                              const std::vector<double>&, const std::vector<double>&,         \
                                              const std::vector<double>&, const std::vector<double>&,         \
                                              AttnGrads&);                                                    \
  template void attention_backward_naive_rows<Acc>(                                                           \
      const AttnShape&, const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,    \
      const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,                     \
      const std::vector<double>&, const std::vector<std::int64_t>&, const std::vector<std::int64_t>&, AttnGrads&);
FT_INSTANTIATE(double)
FT_INSTANTIATE(float)
#undef FT_INSTANTIATE

}  // namespace flashtune::reference
