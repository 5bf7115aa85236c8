// tests/reference/attention_bwd_test.cpp: the attention backward oracles. The naive backward against
// central finite differences of L = sum(dO * O) through the forward oracle (as torch.autograd.gradcheck)
// for every mask / GQA / sink variant, and against plain loops for O and LSE given as they are; the tiled
// backward == naive for every variant, tile size and ragged length; the row subset == the whole; errors.
#include "reference/attention_bwd.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "reference/attention.hpp"
#include "reference/dtype.hpp"

namespace flashtune::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One small ragged problem of one variant.
struct Variant {
  std::string name;
  std::int64_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim;
  bool causal;
  std::int64_t window, sink_tokens;
  bool learned_sinks;
  double sink_logit;  // sinks uniform in sink_logit +- 0.5
  double amplitude;   // Q, K, V uniform in [-amplitude, amplitude]
  double scale;
};

AttnShape shape_of(const Variant& v) {
  AttnShape s;
  s.batch = v.batch;
  s.heads_q = v.heads_q;
  s.heads_kv = v.heads_kv;
  s.seq_q = v.seq_q;
  s.seq_k = v.seq_k;
  s.head_dim = v.head_dim;
  s.causal = v.causal;
  s.window = v.window;
  s.sink_tokens = v.sink_tokens;
  s.learned_sinks = v.learned_sinks;
  s.scale = v.scale;
  return s;
}

// name, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, causal, window, sink_tokens, learned, sink_logit,
// amplitude, scale
const std::vector<Variant> kVariants = {
    {"plain", 2, 2, 2, 7, 9, 4, false, 0, 0, false, 0, 1, 0},
    {"causal_square", 1, 2, 2, 8, 8, 5, true, 0, 0, false, 0, 1, 0},
    {"causal_q_longer", 1, 2, 2, 11, 6, 3, true, 0, 0, false, 0, 1, 0},  // rows 0..4 see no key
    {"causal_k_longer", 1, 2, 1, 5, 13, 6, true, 0, 0, false, 0, 1, 0},
    {"mqa_kv1_causal", 1, 4, 1, 9, 9, 3, true, 0, 0, false, 0, 1, 0},
    {"gqa_6_2", 1, 6, 2, 6, 10, 4, false, 0, 0, false, 0, 1, 0},
    {"gqa_kv_eq_q_causal", 2, 3, 3, 6, 7, 3, true, 0, 0, false, 0, 1, 0},
    {"window1_causal", 1, 2, 2, 8, 8, 4, true, 1, 0, false, 0, 1, 0},
    {"window1", 1, 2, 1, 7, 10, 5, false, 1, 0, false, 0, 1, 0},
    {"window_ge_seq_causal", 1, 2, 2, 9, 11, 4, true, 20, 0, false, 0, 1, 0},
    {"window3", 1, 2, 2, 10, 8, 4, false, 3, 0, false, 0, 1, 0},
    {"sinktok4_gt_window2_causal", 1, 2, 2, 12, 12, 3, true, 2, 4, false, 0, 1, 0},
    {"sinktok2_window3_gqa", 1, 4, 2, 10, 13, 4, false, 3, 2, false, 0, 1, 0},
    {"learned_sink", 1, 2, 2, 7, 8, 4, false, 0, 0, true, 0, 1, 0},
    {"learned_sink_p20", 1, 2, 1, 6, 9, 4, false, 0, 0, true, 20, 1, 0},
    {"learned_sink_p20_large_logits", 1, 2, 2, 6, 7, 4, true, 0, 0, true, 20, 3.5, 0.5},
    {"learned_sink_m3_causal_q_longer", 1, 2, 2, 9, 5, 5, true, 0, 0, true, -3, 1, 0},
    {"all_gqa_causal_window3_sinktok2_learned", 2, 4, 2, 9, 13, 8, true, 3, 2, true, 0.5, 1, 0},
    {"all_mqa_window1_sinktok1_learned_p20", 1, 3, 1, 8, 6, 3, true, 1, 1, true, 20, 2, 0},
    {"scale0p7_window2_sinktok3", 1, 2, 2, 5, 7, 6, false, 2, 3, false, 0, 1, 0.7},
};

struct Inputs {
  std::vector<double> q, k, v, sinks, dout;
};

Inputs make_inputs(const AttnShape& s, const Variant& var, std::uint64_t seed) {
  Inputs in;
  const auto nq = static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim);
  const auto nkv = static_cast<std::size_t>(s.batch * s.heads_kv * s.seq_k * s.head_dim);
  in.q = uniform(nq, -var.amplitude, var.amplitude, seed);
  in.k = uniform(nkv, -var.amplitude, var.amplitude, seed + 1);
  in.v = uniform(nkv, -var.amplitude, var.amplitude, seed + 2);
  if (s.learned_sinks)
    in.sinks = uniform(static_cast<std::size_t>(s.heads_q), var.sink_logit - 0.5, var.sink_logit + 0.5, seed + 3);
  in.dout = uniform(nq, -1, 1, seed + 4);
  return in;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

// Max |a - b|; NaN anywhere or a size mismatch counts as infinitely apart.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return kInf;
  double worst = 0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    const double d = std::fabs(a[n] - b[n]);
    worst = std::isnan(d) ? kInf : std::max(worst, d);
  }
  return worst;
}

double loss(const AttnShape& s, const Inputs& in) {
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  double sum = 0;
  for (std::size_t n = 0; n < o.size(); ++n) sum += in.dout[n] * o[n];
  return sum;
}

// Central differences of loss() in every element of *x (one of in's tensors), step h.
std::vector<double> numeric_grad(const AttnShape& s, Inputs in, std::vector<double> Inputs::*x, double h) {
  std::vector<double> grad((in.*x).size());
  for (std::size_t n = 0; n < grad.size(); ++n) {
    const double x0 = (in.*x)[n];
    (in.*x)[n] = x0 + h;
    const double up = loss(s, in);
    (in.*x)[n] = x0 - h;
    const double down = loss(s, in);
    (in.*x)[n] = x0;
    grad[n] = (up - down) / (2 * h);
  }
  return grad;
}

// Attention backward by plain loops in long double, independent of the library, from O and LSE as given.
AttnGrads loop_backward(const AttnShape& s, const Inputs& in, const std::vector<double>& o,
                        const std::vector<double>& lse) {
  const std::int64_t D = s.head_dim;
  const long double scale = s.scale == 0 ? 1.0L / std::sqrt(static_cast<long double>(D)) : s.scale;
  std::vector<long double> dq(in.q.size(), 0), dk(in.k.size(), 0), dv(in.v.size(), 0), ds_sink(s.heads_q, 0);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads_q; ++h) {
      const std::int64_t hkv = h / (s.heads_q / s.heads_kv);
      for (std::int64_t i = 0; i < s.seq_q; ++i) {
        const std::size_t row = static_cast<std::size_t>((b * s.heads_q + h) * s.seq_q + i);
        if (lse[row] == -kInf) continue;
        long double d_i = 0;
        for (std::int64_t d = 0; d < D; ++d) d_i += static_cast<long double>(in.dout[row * D + d]) * o[row * D + d];
        if (s.learned_sinks) ds_sink[h] -= std::exp(static_cast<long double>(in.sinks[h]) - lse[row]) * d_i;
        for (std::int64_t j = 0; j < s.seq_k; ++j) {
          if (!attn_visible(s, i, j)) continue;
          const std::size_t kj = static_cast<std::size_t>(((b * s.heads_kv + hkv) * s.seq_k + j) * D);
          long double dot = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            dot += static_cast<long double>(in.q[row * D + d]) * in.k[kj + d];
            dp += static_cast<long double>(in.dout[row * D + d]) * in.v[kj + d];
          }
          const long double p = std::exp(scale * dot - lse[row]);
          const long double ds = p * (dp - d_i);
          for (std::int64_t d = 0; d < D; ++d) {
            dq[row * D + d] += scale * ds * in.k[kj + d];
            dk[kj + d] += scale * ds * in.q[row * D + d];
            dv[kj + d] += p * in.dout[row * D + d];
          }
        }
      }
    }
  auto to_double = [](const std::vector<long double>& x) { return std::vector<double>(x.begin(), x.end()); };
  AttnGrads g{to_double(dq), to_double(dk), to_double(dv), {}};
  if (s.learned_sinks) g.dsinks = to_double(ds_sink);
  return g;
}

void expect_grads_near(const AttnGrads& got, const AttnGrads& want, double tol) {
  EXPECT_LE(max_abs_diff(got.dq, want.dq), tol) << "dq";
  EXPECT_LE(max_abs_diff(got.dk, want.dk), tol) << "dk";
  EXPECT_LE(max_abs_diff(got.dv, want.dv), tol) << "dv";
  EXPECT_LE(max_abs_diff(got.dsinks, want.dsinks), tol) << "dsinks";
}

// A variant at the given lengths, with fresh inputs and the naive forward's O and LSE.
struct Case {
  Variant var;
  AttnShape s;
  Inputs in;
  std::vector<double> o, lse;
  std::string label() const { return var.name + "_sq" + std::to_string(var.seq_q) + "_sk" + std::to_string(var.seq_k); }
};

Case make_case(Variant var, std::int64_t seq_q, std::int64_t seq_k, std::uint64_t seed) {
  var.seq_q = seq_q;
  var.seq_k = seq_k;
  Case c{var, shape_of(var), {}, {}, {}};
  c.in = make_inputs(c.s, var, seed);
  attention_naive<double>(c.s, c.in.q, c.in.k, c.in.v, c.in.sinks, c.o, c.lse);
  return c;
}

class AttentionBwdVariant : public ::testing::TestWithParam<Variant> {};

// The oracle is the derivative: every analytic gradient matches central differences of L = sum(dO * O)
// to a millionth of its largest entry (the difference error here is ~1e-9 of it).
TEST_P(AttentionBwdVariant, NaiveMatchesFiniteDifferences) {
  const Variant& var = GetParam();
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 11);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  AttnGrads g;
  attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, g);
  ASSERT_EQ(g.dsinks.size(), s.learned_sinks ? static_cast<std::size_t>(s.heads_q) : 0u);
  const double h = 1e-6;
  struct Check {
    const char* name;
    const std::vector<double>& analytic;
    std::vector<double> Inputs::*x;
  };
  std::vector<Check> checks = {{"dq", g.dq, &Inputs::q}, {"dk", g.dk, &Inputs::k}, {"dv", g.dv, &Inputs::v}};
  if (s.learned_sinks) checks.push_back({"dsinks", g.dsinks, &Inputs::sinks});
  for (const Check& c : checks) {
    const std::vector<double> numeric = numeric_grad(s, in, c.x, h);
    const double size = max_abs(numeric);
    // dQ and dK are exactly 0 when every row sees one key (window 1, causal): O_i = V_j does not move.
    if (c.x == &Inputs::v || c.x == &Inputs::sinks) {
      EXPECT_GT(size, 0) << c.name << ": all zero proves nothing";
    }
    EXPECT_LE(max_abs_diff(c.analytic, numeric), 1e-6 * size + 1e-13)
        << c.name << ": largest |gradient| " << size;
  }
}

// O and LSE are used as given (here inconsistent with Q, K, V), exactly as the formulas say.
TEST_P(AttentionBwdVariant, NaiveMatchesPlainLoopsForGivenOAndLse) {
  const Variant& var = GetParam();
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 21);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  const std::vector<double> o_noise = uniform(o.size(), -0.3, 0.3, 22), lse_noise = uniform(lse.size(), -0.2, 0.2, 23);
  for (std::size_t n = 0; n < o.size(); ++n) o[n] += o_noise[n];
  for (std::size_t n = 0; n < lse.size(); ++n) lse[n] += lse_noise[n];  // -inf stays -inf
  AttnGrads g;
  attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, g);
  const AttnGrads want = loop_backward(s, in, o, lse);
  expect_grads_near(g, want, 1e-12 * std::max(1.0, max_abs(want.dq) + max_abs(want.dk) + max_abs(want.dsinks)));
}

// The tiling of the kernels gives the naive result for every tile shape, on the variant's own lengths and
// on ragged ones, with true and with perturbed O / LSE.
TEST_P(AttentionBwdVariant, TiledMatchesNaiveForEveryTileAndLength) {
  const Variant& base = GetParam();
  const std::vector<std::pair<std::int64_t, std::int64_t>> seqs = {
      {base.seq_q, base.seq_k}, {1, 1}, {17, 29}, {29, 17}, {1, 13}};
  const std::vector<std::int64_t> tiles = {1, 3, 16, 64};
  std::uint64_t seed = 300;
  for (const auto& [sq, sk] : seqs) {
    Case c = make_case(base, sq, sk, seed += 10);
    const AttnShape& s = c.s;
    const Inputs& in = c.in;
    std::vector<double>& o = c.o;
    std::vector<double>& lse = c.lse;
    for (const bool perturbed : {false, true}) {
      if (perturbed) {
        const std::vector<double> noise = uniform(o.size() + lse.size(), -0.1, 0.1, seed + 5);
        for (std::size_t n = 0; n < o.size(); ++n) o[n] += noise[n];
        for (std::size_t n = 0; n < lse.size(); ++n) lse[n] += noise[o.size() + n];
      }
      AttnGrads want;
      attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, want);
      for (std::int64_t bm : tiles)
        for (std::int64_t bn : tiles) {
          SCOPED_TRACE(c.label() + "_bm" + std::to_string(bm) + "_bn" + std::to_string(bn) + (perturbed ? "_perturbed" : ""));
          AttnGrads g;
          attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, bm, bn, g);
          expect_grads_near(g, want, 1e-12);
        }
    }
  }
}

// The sweep schedule (chunks of query tiles owning dQ and the dK, dV of their diagonal key tiles, seams
// visited from both sides, D computed per tile) equals the naive backward for every tile, chunk and length.
TEST_P(AttentionBwdVariant, SweepMatchesNaiveForEveryTileChunkAndLength) {
  const Variant& base = GetParam();
  const std::vector<std::pair<std::int64_t, std::int64_t>> seqs = {{base.seq_q, base.seq_k}, {1, 1}, {17, 29}, {29, 17}};
  std::uint64_t seed = 700;
  for (const auto& [sq, sk] : seqs) {
    const Case c = make_case(base, sq, sk, seed += 10);
    AttnGrads want;
    attention_backward_naive<double>(c.s, c.in.q, c.in.k, c.in.v, c.in.sinks, c.o, c.lse, c.in.dout, want);
    for (const auto& [bm, bn] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {3, 5}, {4, 4}, {16, 8}})
      for (std::int64_t chunk : {1, 2, 3, 100}) {
        SCOPED_TRACE(c.label() + "_bm" + std::to_string(bm) + "_bn" + std::to_string(bn) + "_chunk" + std::to_string(chunk));
        AttnGrads g;
        SweepCost cost;
        attention_backward_sweep<double>(c.s, c.in.q, c.in.k, c.in.v, c.in.sinks, c.o, c.lse, c.in.dout, bm, bn, chunk, g, &cost);
        expect_grads_near(g, want, 1e-12);
        EXPECT_EQ(cost.split_products, 7 * cost.visible_tiles);
        // inside a chunk 5 products a tile, on a seam 4 + 3
        EXPECT_EQ(cost.sweep_products, 5 * cost.visible_tiles + 2 * cost.seam_tiles);
      }
  }
}

// A subset gives the full result on its rows and exact zeros elsewhere; dsinks is always whole.
TEST_P(AttentionBwdVariant, RowsSubsetMatchesFullOnTheListedRows) {
  const Variant& var = GetParam();
  const Case c = make_case(var, var.seq_q + 20, var.seq_k + 23, 41);  // room for rows well inside the sequence
  const AttnShape& s = c.s;
  const Inputs& in = c.in;
  const std::vector<double>& o = c.o;
  const std::vector<double>& lse = c.lse;
  AttnGrads full;
  attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, full);
  const std::vector<std::int64_t> q_rows = {s.seq_q - 1, 0, 3, 3, s.seq_q / 2};
  const std::vector<std::int64_t> k_rows = {1, s.seq_k - 1, 0, s.seq_k / 3, 1};
  const std::vector<std::vector<std::int64_t>> q_lists = {q_rows, {}, q_rows};
  const std::vector<std::vector<std::int64_t>> k_lists = {k_rows, k_rows, {}};
  for (std::size_t c = 0; c < q_lists.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    AttnGrads g;
    attention_backward_naive_rows<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, q_lists[c], k_lists[c], g);
    auto listed = [](const std::vector<std::int64_t>& rows, std::int64_t r) {
      return rows.empty() || std::find(rows.begin(), rows.end(), r) != rows.end();
    };
    auto check = [&](const std::vector<double>& got, const std::vector<double>& want,
                     const std::vector<std::int64_t>& rows, std::int64_t seq, const char* name) {
      ASSERT_EQ(got.size(), want.size()) << name;
      for (std::size_t n = 0; n < got.size(); ++n) {
        const auto r = static_cast<std::int64_t>(n) / s.head_dim % seq;
        if (listed(rows, r))
          ASSERT_NEAR(got[n], want[n], 1e-13) << name << " element " << n;
        else
          ASSERT_EQ(got[n], 0.0) << name << " element " << n << " of an unlisted row";
      }
    };
    check(g.dq, full.dq, q_lists[c], s.seq_q, "dq");
    check(g.dk, full.dk, k_lists[c], s.seq_k, "dk");
    check(g.dv, full.dv, k_lists[c], s.seq_k, "dv");
    EXPECT_LE(max_abs_diff(g.dsinks, full.dsinks), 1e-13);
  }
}

// The float versions (the naive same-precision result of the pass rule) stay close to double.
TEST_P(AttentionBwdVariant, FloatIsCloseToDouble) {
  Variant var = GetParam();
  var.seq_q = 33;
  var.seq_k = 47;
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 51);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  AttnGrads g64, g32, t32;
  attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, g64);
  attention_backward_naive<float>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, g32);
  attention_backward_tiled<float>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 16, 16, t32);
  const double size = std::max({max_abs(g64.dq), max_abs(g64.dk), max_abs(g64.dv), max_abs(g64.dsinks), 1e-30});
  expect_grads_near(g32, g64, 1e-4 * size);
  expect_grads_near(t32, g64, 1e-4 * size);
  double diff = max_abs_diff(g32.dq, g64.dq) + max_abs_diff(g32.dk, g64.dk);
  EXPECT_GT(diff, 0) << "the float path must actually round in float";
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionBwdVariant, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& info) { return info.param.name; });

// A row with no visible key and no learned sink (LSE = -inf) gets dQ = 0 and feeds no dK/dV; nothing is NaN.
TEST(AttentionBwd, RowsWithNoVisibleKeyContributeNothing) {
  const Variant var{"x", 1, 2, 1, 9, 4, 4, true, 0, 0, false, 0, 1, 0};  // causal: rows 0..4 see no key
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 61);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  ASSERT_EQ(lse[0], -kInf);
  for (const bool tiled : {false, true}) {
    AttnGrads g;
    if (tiled)
      attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 3, 2, g);
    else
      attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, g);
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 5; ++i)
        for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(g.dq[static_cast<std::size_t>((h * 9 + i) * 4 + d)], 0.0);
    for (double x : g.dq) EXPECT_TRUE(std::isfinite(x));
    for (double x : g.dk) EXPECT_TRUE(std::isfinite(x));
  }
  // O and dO of rows 0..4 changed arbitrarily change nothing while their LSE is -inf.
  std::vector<double> o2 = o, dout2 = in.dout;
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t n = 0; n < 5 * 4; ++n) {
      o2[static_cast<std::size_t>(h * 9 * 4 + n)] = 3.0;
      dout2[static_cast<std::size_t>(h * 9 * 4 + n)] = 7.0;
    }
  AttnGrads g1, g2;
  attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, g1);
  attention_backward_naive<double>(s, in.q, in.k, in.v, in.sinks, o2, lse, dout2, g2);
  EXPECT_EQ(g2.dq, g1.dq);
  EXPECT_EQ(g2.dk, g1.dk);
  EXPECT_EQ(g2.dv, g1.dv);
}

// Threads split the work by kv head, never inside a sum: two runs are bitwise equal.
TEST(AttentionBwd, TiledIsDeterministic) {
  const Variant var{"x", 2, 8, 2, 37, 41, 8, true, 5, 3, true, 1, 1, 0};
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 71);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  AttnGrads a, b;
  attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 16, 8, a);
  attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 16, 8, b);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.dsinks, b.dsinks);
}

// What the sweep saves on the GPT-OSS window (causal, window 128, 64 x 64 tiles; head_dim is irrelevant to
// the count): a query tile sees 3 key tiles, a chunk of C tiles has 3 seam tiles at each end, so the sweep
// does (15 C + 6) / (21 C) of the two-pass kernels' products (0.75 at C = 8) and one chunk none of the seams.
TEST(AttentionBwd, SweepCostsFewerTileProductsOnTheWindowedShape) {
  const Variant var{"gpt_oss_window", 1, 2, 1, 2048, 2048, 2, true, 128, 0, true, 1, 1, 0};
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 91);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  AttnGrads g, tiled;
  attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 64, 64, tiled);
  SweepCost one, eight;
  attention_backward_sweep<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 64, 64, 32, g, &one);
  EXPECT_EQ(one.seam_tiles, 0);
  EXPECT_EQ(one.sweep_products * 7, one.split_products * 5);
  attention_backward_sweep<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 64, 64, 8, g, &eight);
  expect_grads_near(g, tiled, 1e-12);
  // 32 query tiles of 3 key tiles each, less the first two's missing ones, per head
  EXPECT_EQ(eight.visible_tiles, 2 * (32 * 3 - 3));
  EXPECT_EQ(eight.seam_tiles, 2 * 3 * 3);  // 3 seams (4 chunks) of 3 tiles, per head
  const double ratio = double(eight.sweep_products) / double(eight.split_products);
  EXPECT_NEAR(ratio, 0.75, 0.02);
}

// A long-ish sequence checked only on a few rows agrees with the tiled whole (the host-check use).
TEST(AttentionBwd, RowsSubsetOfALongerProblemMatchesTiled) {
  const Variant var{"x", 1, 4, 2, 300, 260, 16, true, 64, 4, true, 0, 1, 0};
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 81);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  AttnGrads tiled, rows;
  attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 64, 32, tiled);
  const std::vector<std::int64_t> q_rows = {0, 1, 2, 3, 150, 299}, k_rows = {0, 3, 4, 130, 259};
  attention_backward_naive_rows<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, q_rows, k_rows, rows);
  for (std::int64_t h = 0; h < 4; ++h)
    for (std::int64_t i : q_rows)
      for (std::int64_t d = 0; d < 16; ++d) {
        const auto n = static_cast<std::size_t>((h * 300 + i) * 16 + d);
        EXPECT_NEAR(rows.dq[n], tiled.dq[n], 1e-12);
      }
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t j : k_rows)
      for (std::int64_t d = 0; d < 16; ++d) {
        const auto n = static_cast<std::size_t>((h * 260 + j) * 16 + d);
        EXPECT_NEAR(rows.dk[n], tiled.dk[n], 1e-12);
        EXPECT_NEAR(rows.dv[n], tiled.dv[n], 1e-12);
      }
  EXPECT_LE(max_abs_diff(rows.dsinks, tiled.dsinks), 1e-12);
  EXPECT_GT(max_abs(rows.dk), 0);
}

TEST(AttentionBwd, RejectsBadShapesSizesTilesAndRows) {
  const Variant var{"x", 1, 4, 2, 5, 6, 3, false, 0, 0, true, 0, 1, 0};
  const AttnShape s = shape_of(var);
  const Inputs in = make_inputs(s, var, 91);
  std::vector<double> o, lse;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  AttnGrads g;
  auto naive = [&](const AttnShape& shape, const std::vector<double>& oo, const std::vector<double>& ll,
                   const std::vector<double>& dd, const std::vector<double>& sinks) {
    attention_backward_naive<double>(shape, in.q, in.k, in.v, sinks, oo, ll, dd, g);
  };
  EXPECT_NO_THROW(naive(s, o, lse, in.dout, in.sinks));
  AttnShape bad = s;
  bad.heads_kv = 3;
  EXPECT_THROW(naive(bad, o, lse, in.dout, in.sinks), core::Error);
  bad = s;
  bad.head_dim = 0;
  EXPECT_THROW(naive(bad, o, lse, in.dout, in.sinks), core::Error);
  bad = s;
  bad.window = -1;
  EXPECT_THROW(naive(bad, o, lse, in.dout, in.sinks), core::Error);
  std::vector<double> short_o(o.begin(), o.end() - 1), short_lse(lse.begin(), lse.end() - 1);
  std::vector<double> short_dout(in.dout.begin(), in.dout.end() - 1);
  EXPECT_THROW(naive(s, short_o, lse, in.dout, in.sinks), core::Error);
  EXPECT_THROW(naive(s, o, short_lse, in.dout, in.sinks), core::Error);
  EXPECT_THROW(naive(s, o, lse, short_dout, in.sinks), core::Error);
  EXPECT_THROW(naive(s, o, lse, in.dout, {}), core::Error);  // learned sinks need heads_q logits
  try {
    naive(s, o, lse, short_dout, in.sinks);
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dout"), std::string::npos) << e.what();
  }
  EXPECT_THROW(attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 0, 4, g), core::Error);
  EXPECT_THROW(attention_backward_tiled<float>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, 4, 0, g), core::Error);
  EXPECT_THROW(attention_backward_tiled<double>(s, in.q, in.k, in.v, in.sinks, short_o, lse, in.dout, 4, 4, g),
               core::Error);
  EXPECT_THROW(attention_backward_naive_rows<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, {5}, {}, g),
               core::Error);  // seq_q is 5
  EXPECT_THROW(attention_backward_naive_rows<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, {}, {-1}, g),
               core::Error);
  EXPECT_NO_THROW(
      attention_backward_naive_rows<double>(s, in.q, in.k, in.v, in.sinks, o, lse, in.dout, {4}, {5}, g));
}

}  // namespace
}  // namespace flashtune::reference
