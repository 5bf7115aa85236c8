// reference/attention_bwd.cpp: Eigen implementations of the attention backward oracles (naive by the
// definition, whole or on a subset of rows, and the FlashAttention-2 tiling of the kernels), instantiated
// for double and float. Work is split over (batch, kv head), so the GQA sums of dK/dV need no locks.
#include "reference/attention_bwd.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "reference/attention_detail.hpp"

namespace flashtune::reference {
namespace {
using namespace detail;  // NOLINT: the private helpers of attention_detail.hpp

void check_backward_inputs(const char* fn, const AttnShape& s, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<double>& sinks, const std::vector<double>& o,
                           const std::vector<double>& lse, const std::vector<double>& dout) {
  check_inputs(fn, s, q, k, v, sinks);
  check_size(fn, "o", o.size(), s.batch * s.heads_q * s.seq_q * s.head_dim);
  check_size(fn, "lse", lse.size(), s.batch * s.heads_q * s.seq_q);
  check_size(fn, "dout", dout.size(), s.batch * s.heads_q * s.seq_q * s.head_dim);
}

void zero_grads(const AttnShape& s, AttnGrads& g) {
  g.dq.assign(static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim), 0.0);
  g.dk.assign(static_cast<std::size_t>(s.batch * s.heads_kv * s.seq_k * s.head_dim), 0.0);
  g.dv.assign(g.dk.size(), 0.0);
  if (s.learned_sinks)
    g.dsinks.assign(static_cast<std::size_t>(s.heads_q), 0.0);
  else
    g.dsinks.clear();
}

// D_i = rowsum(dO_i * O_i) for every (batch, query head, row), indexed like LSE, in Acc.
template <typename Acc>
std::vector<Acc> row_dots(const AttnShape& s, const std::vector<double>& o, const std::vector<double>& dout) {
  const std::int64_t rows = s.batch * s.heads_q * s.seq_q;
  std::vector<Acc> d(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    Acc sum = 0;
    for (std::int64_t c = 0; c < s.head_dim; ++c) {
      const auto n = static_cast<std::size_t>(r * s.head_dim + c);
      sum += static_cast<Acc>(dout[n]) * static_cast<Acc>(o[n]);
    }
    d[static_cast<std::size_t>(r)] = sum;
  }
  return d;
}

// dsinks[h] = - sum over batch, then rows, of exp(sinks[h] - LSE_i) * D_i, skipping rows with
// LSE = -inf; a fixed order, so the result is deterministic.
template <typename Acc>
void sink_grads(const AttnShape& s, const std::vector<double>& sinks, const std::vector<double>& lse,
                const std::vector<Acc>& d, AttnGrads& g) {
  if (!s.learned_sinks) return;
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  for (std::int64_t h = 0; h < s.heads_q; ++h) {
    const Acc sink = static_cast<Acc>(sinks[static_cast<std::size_t>(h)]);
    Acc sum = 0;
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t i = 0; i < s.seq_q; ++i) {
        const auto n = static_cast<std::size_t>((b * s.heads_q + h) * s.seq_q + i);
        const Acc lse_i = static_cast<Acc>(lse[n]);
        if (lse_i == neg_inf) continue;
        sum += std::exp(sink - lse_i) * d[n];
      }
    g.dsinks[static_cast<std::size_t>(h)] = static_cast<double>(-sum);
  }
}

// Where one (batch, query head) lives: Q, O, dO and dQ share q_off; LSE and D share lse_off.
struct HeadSlice {
  std::int64_t q_off;
  std::int64_t lse_off;
};

// Calls f(kv_off, heads) for every (batch, kv head), in parallel, with the slices of the query heads of
// its GQA group; each call owns dK/dV of its kv head and dQ of those query heads.
template <typename F>
void for_each_kv_head(const AttnShape& s, F&& f) {
  const std::int64_t group = s.heads_q / s.heads_kv;
  parallel_for(s.batch * s.heads_kv, [&](std::int64_t bk) {
    const std::int64_t b = bk / s.heads_kv, hkv = bk % s.heads_kv;
    std::vector<HeadSlice> heads;
    for (std::int64_t h = hkv * group; h < (hkv + 1) * group; ++h)
      heads.push_back({((b * s.heads_q + h) * s.seq_q) * s.head_dim, (b * s.heads_q + h) * s.seq_q});
    f(bk * s.seq_k * s.head_dim, heads);
  });
}

// The listed rows sorted without duplicates, each checked to lie in [0, n); empty = all of [0, n).
std::vector<std::int64_t> row_set(const char* what, const std::vector<std::int64_t>& rows, std::int64_t n) {
  std::vector<std::int64_t> out;
  if (rows.empty()) {
    for (std::int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  for (std::int64_t i : rows)
    if (i < 0 || i >= n)
      fail(std::string("attention_backward_naive_rows: ") + what + " row " + std::to_string(i) + " outside [0, " +
           std::to_string(n) + ")");
  out = rows;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The definition, one query row at a time over the key rows `keys`: for each query row of `queries`,
// the score row against those keys, P, dP and dS; dQ_i written when want_dq (complete only when `keys`
// is every key), dK/dV of `keys` accumulated over every query row of `queries` and every query head of
// the group and written when want_dkdv (complete only when `queries` is every row).
template <typename Acc>
void naive_pass(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                const std::vector<double>& v, const std::vector<double>& lse, const std::vector<double>& dout,
                const std::vector<Acc>& d, const std::vector<std::int64_t>& queries,
                const std::vector<std::int64_t>& keys, bool want_dq, bool want_dkdv, AttnGrads& g) {
  const Acc scale = score_scale<Acc>(s);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const auto nk = static_cast<std::int64_t>(keys.size());
  for_each_kv_head(s, [&](std::int64_t kv_off, const std::vector<HeadSlice>& heads) {
    RowMajor<Acc> km(nk, s.head_dim), vm(nk, s.head_dim);
    for (std::int64_t n = 0; n < nk; ++n) {
      km.row(n) = load<Acc>(k, kv_off + keys[static_cast<std::size_t>(n)] * s.head_dim, 1, s.head_dim);
      vm.row(n) = load<Acc>(v, kv_off + keys[static_cast<std::size_t>(n)] * s.head_dim, 1, s.head_dim);
    }
    RowMajor<Acc> dk = RowMajor<Acc>::Zero(nk, s.head_dim), dv = RowMajor<Acc>::Zero(nk, s.head_dim);
    RowVec<Acc> p(nk);
    for (const HeadSlice& head : heads) {
      const RowMajor<Acc> qm = load<Acc>(q, head.q_off, s.seq_q, s.head_dim);
      const RowMajor<Acc> dom = load<Acc>(dout, head.q_off, s.seq_q, s.head_dim);
      for (const std::int64_t i : queries) {
        const Acc lse_i = static_cast<Acc>(lse[static_cast<std::size_t>(head.lse_off + i)]);
        if (lse_i == neg_inf) continue;  // no visible key, no learned sink: contributes nothing
        const Acc d_i = d[static_cast<std::size_t>(head.lse_off + i)];
        const RowRange range = row_range(s, i);
        const RowVec<Acc> scores = scale * (qm.row(i) * km.transpose());
        for (std::int64_t n = 0; n < nk; ++n)
          p(n) = range_visible(range, keys[static_cast<std::size_t>(n)]) ? std::exp(scores(n) - lse_i) : Acc(0);
        const RowVec<Acc> dp = dom.row(i) * vm.transpose();
        const RowVec<Acc> ds = (p.array() * (dp.array() - d_i)).matrix();
        if (want_dq) {
          const RowVec<Acc> dq = scale * (ds * km);
          for (std::int64_t c = 0; c < s.head_dim; ++c)
            g.dq[static_cast<std::size_t>(head.q_off + i * s.head_dim + c)] = static_cast<double>(dq(c));
        }
        if (want_dkdv) {
          dk.noalias() += scale * (ds.transpose() * qm.row(i));
          dv.noalias() += p.transpose() * dom.row(i);
        }
      }
    }
    if (!want_dkdv) return;
    for (std::int64_t n = 0; n < nk; ++n)
      for (std::int64_t c = 0; c < s.head_dim; ++c) {
        const auto at = static_cast<std::size_t>(kv_off + keys[static_cast<std::size_t>(n)] * s.head_dim + c);
        g.dk[at] = static_cast<double>(dk(n, c));
        g.dv[at] = static_cast<double>(dv(n, c));
      }
  });
}

// One (query block, key block) tile of the tiled backward: P recomputed from LSE (0 on masked pairs and
// on rows with LSE = -inf) and dS = P * (dO V^T - D).
template <typename Acc>
void tile_p_ds(Acc scale, const RowMajor<Acc>& q_tile, const RowMajor<Acc>& do_tile,
               const ColVec<Acc>& lse_tile, const ColVec<Acc>& d_tile, const std::vector<RowRange>& ranges,
               const RowMajor<Acc>& k_tile, const RowMajor<Acc>& v_tile, std::int64_t j0, RowMajor<Acc>& p,
               RowMajor<Acc>& ds) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const RowMajor<Acc> scores = scale * (q_tile * k_tile.transpose());
  p.resize(scores.rows(), scores.cols());
  for (Eigen::Index r = 0; r < scores.rows(); ++r)
    for (Eigen::Index c = 0; c < scores.cols(); ++c)
      p(r, c) = lse_tile(r) != neg_inf && range_visible(ranges[static_cast<std::size_t>(r)], j0 + c)
                    ? std::exp(scores(r, c) - lse_tile(r))
                    : Acc(0);
  RowMajor<Acc> dp = do_tile * v_tile.transpose();
  dp.colwise() -= d_tile;
  ds = p.cwiseProduct(dp);
}

}  // namespace

template <typename Acc>
void attention_backward_naive(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, AttnGrads& g) {
  check_backward_inputs("attention_backward_naive", s, q, k, v, sinks, o, lse, dout);
  zero_grads(s, g);
  const std::vector<Acc> d = row_dots<Acc>(s, o, dout);
  const std::vector<std::int64_t> queries = row_set("query", {}, s.seq_q), keys = row_set("key", {}, s.seq_k);
  naive_pass<Acc>(s, q, k, v, lse, dout, d, queries, keys, true, true, g);
  sink_grads<Acc>(s, sinks, lse, d, g);
}

template <typename Acc>
void attention_backward_naive_rows(const AttnShape& s, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v,
                                   const std::vector<double>& sinks, const std::vector<double>& o,
                                   const std::vector<double>& lse, const std::vector<double>& dout,
                                   const std::vector<std::int64_t>& q_rows, const std::vector<std::int64_t>& k_rows,
                                   AttnGrads& g) {
  check_backward_inputs("attention_backward_naive_rows", s, q, k, v, sinks, o, lse, dout);
  const std::vector<std::int64_t> queries = row_set("query", q_rows, s.seq_q);
  const std::vector<std::int64_t> keys = row_set("key", k_rows, s.seq_k);
  zero_grads(s, g);
  const std::vector<Acc> d = row_dots<Acc>(s, o, dout);
  if (q_rows.empty() && k_rows.empty()) {
    naive_pass<Acc>(s, q, k, v, lse, dout, d, queries, keys, true, true, g);
  } else {  // dQ of the listed rows needs every key; dK/dV of the listed keys need every query row
    naive_pass<Acc>(s, q, k, v, lse, dout, d, queries, row_set("key", {}, s.seq_k), true, false, g);
    naive_pass<Acc>(s, q, k, v, lse, dout, d, row_set("query", {}, s.seq_q), keys, false, true, g);
  }
  sink_grads<Acc>(s, sinks, lse, d, g);
}

template <typename Acc>
void attention_backward_tiled(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, std::int64_t block_m, std::int64_t block_n,
                              AttnGrads& g) {
  check_backward_inputs("attention_backward_tiled", s, q, k, v, sinks, o, lse, dout);
  if (block_m < 1 || block_n < 1)
    fail("attention_backward_tiled: block_m and block_n must be >= 1, got " + std::to_string(block_m) + " and " +
         std::to_string(block_n));
  zero_grads(s, g);
  const Acc scale = score_scale<Acc>(s);
  const std::int64_t dim = s.head_dim;
  // Stage 1 (preprocess): D = rowsum(dO * O).
  const std::vector<Acc> d = row_dots<Acc>(s, o, dout);

  for_each_kv_head(s, [&](std::int64_t kv_off, const std::vector<HeadSlice>& heads) {
    // The query-side tiles of one query block of one head, with each row's visible key intervals.
    struct QueryTile {
      RowMajor<Acc> q, dout;
      ColVec<Acc> lse, d;
      std::vector<RowRange> ranges;
    };
    auto load_query_tile = [&](const HeadSlice& head, std::int64_t i0, std::int64_t rows) {
      QueryTile t;
      t.ranges.resize(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) t.ranges[static_cast<std::size_t>(r)] = row_range(s, i0 + r);
      t.q = load<Acc>(q, head.q_off + i0 * dim, rows, dim);
      t.dout = load<Acc>(dout, head.q_off + i0 * dim, rows, dim);
      t.lse.resize(rows);
      t.d.resize(rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        t.lse(r) = static_cast<Acc>(lse[static_cast<std::size_t>(head.lse_off + i0 + r)]);
        t.d(r) = d[static_cast<std::size_t>(head.lse_off + i0 + r)];
      }
      return t;
    };
    auto tile_visible = [&](std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols) {
      for (std::int64_t r = 0; r < rows; ++r)
        if (range_touches(row_range(s, i0 + r), j0, j0 + cols)) return true;
      return false;
    };
    RowMajor<Acc> p, ds;

    // Stage 2: per key block, dK and dV over every query head of the group and every query block that
    // sees the key block.
    for (std::int64_t j0 = 0; j0 < s.seq_k; j0 += block_n) {
      const std::int64_t cols = std::min(block_n, s.seq_k - j0);
      const RowMajor<Acc> k_tile = load<Acc>(k, kv_off + j0 * dim, cols, dim);
      const RowMajor<Acc> v_tile = load<Acc>(v, kv_off + j0 * dim, cols, dim);
      RowMajor<Acc> dk = RowMajor<Acc>::Zero(cols, dim), dv = RowMajor<Acc>::Zero(cols, dim);
      for (const HeadSlice& head : heads)
        for (std::int64_t i0 = 0; i0 < s.seq_q; i0 += block_m) {
          const std::int64_t rows = std::min(block_m, s.seq_q - i0);
          if (!tile_visible(i0, rows, j0, cols)) continue;  // tile fully outside the mask
          const QueryTile t = load_query_tile(head, i0, rows);
          tile_p_ds<Acc>(scale, t.q, t.dout, t.lse, t.d, t.ranges, k_tile, v_tile, j0, p, ds);
          dv.noalias() += p.transpose() * t.dout;
          dk.noalias() += scale * (ds.transpose() * t.q);
        }
      Eigen::Map<RowMajor<double>>(g.dk.data() + kv_off + j0 * dim, cols, dim) = dk.template cast<double>();
      Eigen::Map<RowMajor<double>>(g.dv.data() + kv_off + j0 * dim, cols, dim) = dv.template cast<double>();
    }

    // Stage 3: per query block, dQ over the key blocks it sees.
    for (const HeadSlice& head : heads)
      for (std::int64_t i0 = 0; i0 < s.seq_q; i0 += block_m) {
        const std::int64_t rows = std::min(block_m, s.seq_q - i0);
        const QueryTile t = load_query_tile(head, i0, rows);
        RowMajor<Acc> dq = RowMajor<Acc>::Zero(rows, dim);
        for (std::int64_t j0 = 0; j0 < s.seq_k; j0 += block_n) {
          const std::int64_t cols = std::min(block_n, s.seq_k - j0);
          if (!tile_visible(i0, rows, j0, cols)) continue;
          const RowMajor<Acc> k_tile = load<Acc>(k, kv_off + j0 * dim, cols, dim);
          const RowMajor<Acc> v_tile = load<Acc>(v, kv_off + j0 * dim, cols, dim);
          tile_p_ds<Acc>(scale, t.q, t.dout, t.lse, t.d, t.ranges, k_tile, v_tile, j0, p, ds);
          dq.noalias() += scale * (ds * k_tile);
        }
        Eigen::Map<RowMajor<double>>(g.dq.data() + head.q_off + i0 * dim, rows, dim) = dq.template cast<double>();
      }
  });
  // Stage 4: the learned-sink gradient, a per-head reduction.
  sink_grads<Acc>(s, sinks, lse, d, g);
}

template <typename Acc>
void attention_backward_sweep(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, const std::vector<double>& sinks,
                              const std::vector<double>& o, const std::vector<double>& lse,
                              const std::vector<double>& dout, std::int64_t block_m, std::int64_t block_n,
                              std::int64_t chunk_tiles, AttnGrads& g, SweepCost* cost) {
  check_backward_inputs("attention_backward_sweep", s, q, k, v, sinks, o, lse, dout);
  if (block_m < 1 || block_n < 1 || chunk_tiles < 1)
    fail("attention_backward_sweep: block_m, block_n and chunk_tiles must be >= 1, got " + std::to_string(block_m) +
         ", " + std::to_string(block_n) + " and " + std::to_string(chunk_tiles));
  zero_grads(s, g);
  const Acc scale = score_scale<Acc>(s);
  const std::int64_t dim = s.head_dim;
  const std::int64_t q_tiles = (s.seq_q + block_m - 1) / block_m, k_tiles = (s.seq_k + block_n - 1) / block_n;
  const std::int64_t chunks = std::max<std::int64_t>(1, (q_tiles + chunk_tiles - 1) / chunk_tiles);
  auto q_owner = [&](std::int64_t t) { return t / chunk_tiles; };
  auto k_owner = [&](std::int64_t u) {  // the chunk of the query row on the key tile's first row's diagonal
    const std::int64_t i = std::clamp<std::int64_t>(u * block_n - (s.seq_k - s.seq_q), 0, std::max<std::int64_t>(s.seq_q - 1, 0));
    return std::min(q_owner(i / block_m), chunks - 1);
  };
  auto visible = [&](std::int64_t t, std::int64_t u) {
    for (std::int64_t i = t * block_m; i < std::min(s.seq_q, (t + 1) * block_m); ++i)
      if (range_touches(row_range(s, i), u * block_n, std::min(s.seq_k, (u + 1) * block_n))) return true;
    return false;
  };
  std::vector<SweepCost> costs(static_cast<std::size_t>(s.batch * s.heads_kv));

  for_each_kv_head(s, [&](std::int64_t kv_off, const std::vector<HeadSlice>& heads) {
    SweepCost& c_kv = costs[static_cast<std::size_t>(kv_off / (s.seq_k * dim))];
    RowMajor<Acc> p, ds;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      // The chunk's accumulators: dK, dV of the key tiles it owns (summed over the group's heads), dQ of
      // one query tile at a time (complete once its key tiles are visited).
      std::vector<RowMajor<Acc>> dk(static_cast<std::size_t>(k_tiles)), dv(static_cast<std::size_t>(k_tiles));
      for (std::int64_t u = 0; u < k_tiles; ++u)
        if (k_owner(u) == chunk) {
          const std::int64_t cols = std::min(block_n, s.seq_k - u * block_n);
          dk[static_cast<std::size_t>(u)] = RowMajor<Acc>::Zero(cols, dim);
          dv[static_cast<std::size_t>(u)] = RowMajor<Acc>::Zero(cols, dim);
        }
      for (const HeadSlice& head : heads)
        for (std::int64_t t = 0; t < q_tiles; ++t) {
          const std::int64_t i0 = t * block_m, rows = std::min(block_m, s.seq_q - i0);
          const bool own_q = q_owner(t) == chunk;
          bool loaded = false;
          RowMajor<Acc> q_tile, do_tile, dq;
          ColVec<Acc> lse_tile, d_tile;
          std::vector<RowRange> ranges;
          for (std::int64_t u = 0; u < k_tiles; ++u) {
            const bool own_k = k_owner(u) == chunk;
            if ((!own_q && !own_k) || !visible(t, u)) continue;
            if (!loaded) {  // Q, dO, LSE of the tile, and D = rowsum(dO * O) computed here
              loaded = true;
              q_tile = load<Acc>(q, head.q_off + i0 * dim, rows, dim);
              do_tile = load<Acc>(dout, head.q_off + i0 * dim, rows, dim);
              const RowMajor<Acc> o_tile = load<Acc>(o, head.q_off + i0 * dim, rows, dim);
              lse_tile.resize(rows);
              d_tile.resize(rows);
              ranges.resize(static_cast<std::size_t>(rows));
              for (std::int64_t r = 0; r < rows; ++r) {
                lse_tile(r) = static_cast<Acc>(lse[static_cast<std::size_t>(head.lse_off + i0 + r)]);
                Acc sum = 0;
                for (std::int64_t c = 0; c < dim; ++c) sum += do_tile(r, c) * o_tile(r, c);
                d_tile(r) = sum;
                ranges[static_cast<std::size_t>(r)] = row_range(s, i0 + r);
              }
              dq = RowMajor<Acc>::Zero(rows, dim);
            }
            const std::int64_t j0 = u * block_n, cols = std::min(block_n, s.seq_k - j0);
            const RowMajor<Acc> k_tile = load<Acc>(k, kv_off + j0 * dim, cols, dim);
            const RowMajor<Acc> v_tile = load<Acc>(v, kv_off + j0 * dim, cols, dim);
            tile_p_ds<Acc>(scale, q_tile, do_tile, lse_tile, d_tile, ranges, k_tile, v_tile, j0, p, ds);
            if (own_k) {
              dv[static_cast<std::size_t>(u)].noalias() += p.transpose() * do_tile;
              dk[static_cast<std::size_t>(u)].noalias() += scale * (ds.transpose() * q_tile);
            }
            if (own_q) dq.noalias() += scale * (ds * k_tile);
            c_kv.sweep_products += 2 + (own_k ? 2 : 0) + (own_q ? 1 : 0);
            if (own_q) {  // counted once per tile, by the chunk that owns its query side
              c_kv.visible_tiles += 1;
              c_kv.split_products += 7;
              if (!own_k) c_kv.seam_tiles += 1;  // visited again by the chunk of its key side
            }
          }
          if (own_q && loaded)
            Eigen::Map<RowMajor<double>>(g.dq.data() + head.q_off + i0 * dim, rows, dim) = dq.template cast<double>();
        }
      for (std::int64_t u = 0; u < k_tiles; ++u)
        if (k_owner(u) == chunk) {
          const std::int64_t j0 = u * block_n, cols = std::min(block_n, s.seq_k - j0);
          Eigen::Map<RowMajor<double>>(g.dk.data() + kv_off + j0 * dim, cols, dim) = dk[static_cast<std::size_t>(u)].template cast<double>();
          Eigen::Map<RowMajor<double>>(g.dv.data() + kv_off + j0 * dim, cols, dim) = dv[static_cast<std::size_t>(u)].template cast<double>();
        }
    }
  });
  if (cost) {
    *cost = SweepCost{};
    for (const auto& c : costs) {
      cost->visible_tiles += c.visible_tiles;
      cost->split_products += c.split_products;
      cost->sweep_products += c.sweep_products;
      cost->seam_tiles += c.seam_tiles;
    }
  }
  const std::vector<Acc> d = row_dots<Acc>(s, o, dout);
  sink_grads<Acc>(s, sinks, lse, d, g);
}

#define FT_INSTANTIATE_BACKWARD(Acc)                                                                             \
  template void attention_backward_naive<Acc>(const AttnShape&, const std::vector<double>&,                      \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              const std::vector<double>&, const std::vector<double>&, AttnGrads&); \
  template void attention_backward_naive_rows<Acc>(                                                              \
      const AttnShape&, const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,      \
      const std::vector<double>&, const std::vector<double>&, const std::vector<double>&,                        \
      const std::vector<double>&, const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,            \
      AttnGrads&);                                                                                               \
  template void attention_backward_tiled<Acc>(const AttnShape&, const std::vector<double>&,                      \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              std::int64_t, std::int64_t, AttnGrads&);               \
  template void attention_backward_sweep<Acc>(const AttnShape&, const std::vector<double>&,                      \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              const std::vector<double>&, const std::vector<double>&,            \
                                              std::int64_t, std::int64_t, std::int64_t, AttnGrads&, SweepCost*);
FT_INSTANTIATE_BACKWARD(double)
FT_INSTANTIATE_BACKWARD(float)
#undef FT_INSTANTIATE_BACKWARD

}  // namespace flashtune::reference
