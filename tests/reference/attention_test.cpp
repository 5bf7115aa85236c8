// tests/reference/attention_test.cpp: the attention oracles against plain loops and against each other
// (FlashAttention-2 tiling == naive for every mask variant, tile size and ragged length), the mask
// against a brute-force restatement, overflow safety for large logits and float-vs-double closeness.
#include "reference/attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "harness/core/types.hpp"
#include "reference/dtype.hpp"

namespace flashtune::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Inputs {
  std::vector<double> q, k, v, sinks;
};

// Fresh random inputs for a shape; `amplitude` scales Q, K and V; sinks are sink_logit +- 0.5.
Inputs make_inputs(const AttnShape& s, std::uint64_t seed, double amplitude = 1.0, double sink_logit = 0.0) {
  Inputs in;
  const auto nq = static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim);
  const auto nkv = static_cast<std::size_t>(s.batch * s.heads_kv * s.seq_k * s.head_dim);
  in.q = uniform(nq, -amplitude, amplitude, seed);
  in.k = uniform(nkv, -amplitude, amplitude, seed + 1);
  in.v = uniform(nkv, -amplitude, amplitude, seed + 2);
  if (s.learned_sinks)
    in.sinks = uniform(static_cast<std::size_t>(s.heads_q), sink_logit - 0.5, sink_logit + 0.5, seed + 3);
  return in;
}

// The mask of DESIGN.md restated literally, one condition at a time.
bool brute_visible(const AttnShape& s, std::int64_t i, std::int64_t j) {
  const std::int64_t shift = s.seq_k - s.seq_q;
  if (s.causal && j > i + shift) return false;
  if (j < s.sink_tokens) return true;
  if (s.window == 0) return true;
  return j > i + shift - s.window;
}

// Max |a - b|, where two -inf entries count as equal and any other non-finite pair as infinitely apart.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return kInf;
  double worst = 0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    if (a[n] == -kInf && b[n] == -kInf) continue;
    const double d = std::fabs(a[n] - b[n]);
    worst = std::isnan(d) ? kInf : std::max(worst, d);
  }
  return worst;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

// Attention by plain loops in long double, independent of the library (GQA map, mask, sinks).
void loop_attention(const AttnShape& s, const Inputs& in, std::vector<double>& o, std::vector<double>& lse) {
  const std::int64_t D = s.head_dim;
  const long double scale = s.scale == 0 ? 1.0L / std::sqrt(static_cast<long double>(D)) : s.scale;
  o.assign(in.q.size(), 0.0);
  lse.assign(static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q), -kInf);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads_q; ++h) {
      const std::int64_t hkv = h / (s.heads_q / s.heads_kv);
      for (std::int64_t i = 0; i < s.seq_q; ++i) {
        const double* qi = &in.q[static_cast<std::size_t>(((b * s.heads_q + h) * s.seq_q + i) * D)];
        std::vector<long double> p(static_cast<std::size_t>(s.seq_k), 0.0L);
        long double denom = s.learned_sinks ? std::exp(static_cast<long double>(in.sinks[h])) : 0.0L;
        for (std::int64_t j = 0; j < s.seq_k; ++j) {
          if (!brute_visible(s, i, j)) continue;
          const double* kj = &in.k[static_cast<std::size_t>(((b * s.heads_kv + hkv) * s.seq_k + j) * D)];
          long double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += static_cast<long double>(qi[d]) * kj[d];
          p[j] = std::exp(scale * dot);
          denom += p[j];
        }
        const std::size_t row = static_cast<std::size_t>((b * s.heads_q + h) * s.seq_q + i);
        if (denom == 0) continue;
        lse[row] = static_cast<double>(std::log(denom));
        for (std::int64_t j = 0; j < s.seq_k; ++j) {
          if (p[j] == 0) continue;
          const double* vj = &in.v[static_cast<std::size_t>(((b * s.heads_kv + hkv) * s.seq_k + j) * D)];
          for (std::int64_t d = 0; d < D; ++d)
            o[row * D + d] += static_cast<double>(p[j] / denom * vj[d]);
        }
      }
    }
}

// One mask/sink variant; the sequence lengths are filled in by each test.
struct Variant {
  std::string name;
  std::int64_t heads_q, heads_kv;
  bool causal;
  std::int64_t window, sink_tokens;
  bool learned_sinks;
  double sink_logit;
  double scale;
};

AttnShape shape_of(const Variant& v, std::int64_t seq_q, std::int64_t seq_k) {
  AttnShape s;
  s.batch = 2;
  s.heads_q = v.heads_q;
  s.heads_kv = v.heads_kv;
  s.seq_q = seq_q;
  s.seq_k = seq_k;
  s.head_dim = 8;
  s.causal = v.causal;
  s.window = v.window;
  s.sink_tokens = v.sink_tokens;
  s.learned_sinks = v.learned_sinks;
  s.scale = v.scale;
  return s;
}

const std::vector<Variant> kVariants = {
    {"plain", 4, 4, false, 0, 0, false, 0, 0},
    {"causal", 4, 4, true, 0, 0, false, 0, 0},
    {"gqa_kv1_causal", 4, 1, true, 0, 0, false, 0, 0},
    {"gqa_kv2", 4, 2, false, 0, 0, false, 0, 0},
    {"window1_causal", 2, 2, true, 1, 0, false, 0, 0},
    {"window1", 2, 2, false, 1, 0, false, 0, 0},
    {"window5", 2, 1, false, 5, 0, false, 0, 0},
    {"window_ge_seq_causal", 2, 2, true, 64, 0, false, 0, 0},
    {"window3_sinktok8_causal", 2, 2, true, 3, 8, false, 0, 0},
    {"window4_sinktok2", 2, 2, false, 4, 2, false, 0, 0},
    {"learned_sink_p20", 4, 2, false, 0, 0, true, 20, 0},
    {"learned_sink_m5_causal", 4, 4, true, 0, 0, true, -5, 0},
    {"learned_sink_p20_window1_causal", 4, 1, true, 1, 0, true, 20, 0},
    {"all_gqa_window3_sinktok2_learned", 4, 2, true, 3, 2, true, 0.5, 0},
    {"scale0p3_causal", 2, 2, true, 0, 0, false, 0, 0.3},
};
const std::vector<std::pair<std::int64_t, std::int64_t>> kSeqs = {{1, 1},  {17, 17}, {33, 33}, {17, 33},
                                                                   {33, 17}, {1, 33},  {33, 1}};
const std::vector<std::int64_t> kTiles = {1, 16, 64, 7};

class AttentionVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(AttentionVariant, TiledMatchesNaiveForEveryTileAndLength) {
  const Variant& var = GetParam();
  std::uint64_t seed = 100;
  for (const auto& [sq, sk] : kSeqs) {
    const AttnShape s = shape_of(var, sq, sk);
    const Inputs in = make_inputs(s, seed += 10, 1.0, var.sink_logit);
    std::vector<double> o_ref, lse_ref;
    attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o_ref, lse_ref);
    for (std::int64_t bm : kTiles)
      for (std::int64_t bn : kTiles) {
        SCOPED_TRACE(var.name + "_sq" + std::to_string(sq) + "_sk" + std::to_string(sk) + "_bm" +
                     std::to_string(bm) + "_bn" + std::to_string(bn));
        std::vector<double> o, lse;
        attention_tiled<double>(s, in.q, in.k, in.v, in.sinks, bm, bn, o, lse);
        EXPECT_LT(max_abs_diff(o, o_ref), 1e-12);
        EXPECT_LT(max_abs_diff(lse, lse_ref), 1e-12);
      }
  }
}

TEST_P(AttentionVariant, NaiveMatchesPlainLoops) {
  const Variant& var = GetParam();
  std::uint64_t seed = 700;
  for (const auto& [sq, sk] : kSeqs) {
    SCOPED_TRACE(var.name + "_sq" + std::to_string(sq) + "_sk" + std::to_string(sk));
    const AttnShape s = shape_of(var, sq, sk);
    const Inputs in = make_inputs(s, seed += 10, 1.0, var.sink_logit);
    std::vector<double> o, lse, o_loop, lse_loop;
    attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
    loop_attention(s, in, o_loop, lse_loop);
    EXPECT_LT(max_abs_diff(o, o_loop), 1e-13);
    EXPECT_LT(max_abs_diff(lse, lse_loop), 1e-13);
  }
}

TEST_P(AttentionVariant, FloatIsCloseToDouble) {
  const Variant& var = GetParam();
  const AttnShape s = shape_of(var, 33, 47);
  const Inputs in = make_inputs(s, 900, 1.0, var.sink_logit);
  std::vector<double> o64, lse64, o32, lse32, ot32, lset32;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o64, lse64);
  attention_naive<float>(s, in.q, in.k, in.v, in.sinks, o32, lse32);
  attention_tiled<float>(s, in.q, in.k, in.v, in.sinks, 16, 16, ot32, lset32);
  EXPECT_LT(max_abs_diff(o32, o64), 1e-4 * max_abs(o64));
  EXPECT_LT(max_abs_diff(lse32, lse64), 1e-4 * std::max(1.0, max_abs(lse64)));
  EXPECT_LT(max_abs_diff(ot32, o64), 1e-4 * max_abs(o64));
  EXPECT_LT(max_abs_diff(lset32, lse64), 1e-4 * std::max(1.0, max_abs(lse64)));
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionVariant, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& info) { return info.param.name; });

TEST(AttnVisible, MatchesBruteForceOnSmallShapes) {
  int checked = 0;
  for (std::int64_t sq : {1, 3, 6})
    for (std::int64_t sk : {1, 4, 6})
      for (bool causal : {false, true})
        for (std::int64_t window : {0, 1, 2, 5})
          for (std::int64_t sinks : {0, 1, 3}) {
            AttnShape s;
            s.seq_q = sq;
            s.seq_k = sk;
            s.causal = causal;
            s.window = window;
            s.sink_tokens = sinks;
            double pairs = 0;
            for (std::int64_t i = 0; i < sq; ++i)
              for (std::int64_t j = 0; j < sk; ++j) {
                EXPECT_EQ(attn_visible(s, i, j), brute_visible(s, i, j))
                    << "sq " << sq << " sk " << sk << " causal " << causal << " window " << window << " sinks "
                    << sinks << " i " << i << " j " << j;
                pairs += brute_visible(s, i, j) ? 1 : 0;
                ++checked;
              }
            EXPECT_EQ(attention_visible_pairs(s), pairs);
          }
  EXPECT_GT(checked, 1000);
}

TEST(AttnVisible, CausalEqualLengthsIsLowerTriangle) {
  AttnShape s;
  s.seq_q = s.seq_k = 5;
  s.causal = true;
  EXPECT_TRUE(attn_visible(s, 2, 2));
  EXPECT_FALSE(attn_visible(s, 2, 3));
  s.seq_k = 7;  // bottom-right aligned: query 0 sees keys 0..2
  EXPECT_TRUE(attn_visible(s, 0, 2));
  EXPECT_FALSE(attn_visible(s, 0, 3));
}

TEST(AttentionVisiblePairs, CountsKnownCasesAndScalesWithBatchAndHeads) {
  AttnShape s;
  s.batch = 3;
  s.heads_q = 4;
  s.seq_q = s.seq_k = 100;
  EXPECT_EQ(attention_visible_pairs(s), 12.0 * 100 * 100);
  s.causal = true;
  EXPECT_EQ(attention_visible_pairs(s), 12.0 * 100 * 101 / 2);
  s.window = 10;  // rows 0..9 see i + 1 keys, the other 90 see 10
  EXPECT_EQ(attention_visible_pairs(s), 12.0 * (55 + 90 * 10));
}

TEST(AttentionLearnedSink, LseEqualsLogOfSumWithSinkComputedDirectly) {
  AttnShape s;
  s.batch = 1;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.seq_q = 9;
  s.seq_k = 13;
  s.head_dim = 4;
  s.causal = true;
  s.learned_sinks = true;
  for (double sink : {20.0, -5.0}) {
    const Inputs in = make_inputs(s, 1234, 1.0, sink);
    std::vector<double> o, lse, ot, lset;
    attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
    attention_tiled<double>(s, in.q, in.k, in.v, in.sinks, 4, 5, ot, lset);
    const double scale = 1.0 / std::sqrt(4.0);
    for (std::int64_t h = 0; h < s.heads_q; ++h)
      for (std::int64_t i = 0; i < s.seq_q; ++i) {
        long double sum = std::exp(static_cast<long double>(in.sinks[h]));
        for (std::int64_t j = 0; j <= i + (s.seq_k - s.seq_q); ++j) {
          long double dot = 0;
          for (std::int64_t d = 0; d < 4; ++d) dot += in.q[(h * s.seq_q + i) * 4 + d] * in.k[j * 4 + d];
          sum += std::exp(scale * dot);
        }
        const double want = static_cast<double>(std::log(sum));
        EXPECT_NEAR(lse[h * s.seq_q + i], want, 1e-13) << "sink " << sink << " h " << h << " i " << i;
        EXPECT_NEAR(lset[h * s.seq_q + i], want, 1e-13) << "sink " << sink << " h " << h << " i " << i;
      }
    if (sink == 20.0) {  // the sink takes nearly all the mass: O is tiny but not zero
      EXPECT_LT(max_abs(o), 1e-6);
      EXPECT_GT(max_abs(o), 0.0);
    }
  }
}

TEST(AttentionEmptyRows, NoVisibleKeyGivesZeroAndMinusInfUnlessLearnedSink) {
  AttnShape s;
  s.heads_q = 2;
  s.seq_q = 10;
  s.seq_k = 4;  // causal, bottom-right: queries 0..5 see no key
  s.head_dim = 4;
  s.causal = true;
  for (bool learned : {false, true}) {
    s.learned_sinks = learned;
    const Inputs in = make_inputs(s, 55, 1.0, 1.5);
    std::vector<double> o, lse, ot, lset;
    attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
    attention_tiled<double>(s, in.q, in.k, in.v, in.sinks, 3, 2, ot, lset);
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < s.seq_q; ++i) {
        const std::size_t row = static_cast<std::size_t>(h * s.seq_q + i);
        for (const auto* l : {&lse, &lset}) {
          if (i < 6) {
            EXPECT_EQ((*l)[row], learned ? in.sinks[h] : -kInf) << "h " << h << " i " << i;
          } else {
            EXPECT_TRUE(std::isfinite((*l)[row])) << "h " << h << " i " << i;
          }
        }
        for (std::int64_t d = 0; d < 4; ++d) {
          if (i < 6) {
            EXPECT_EQ(o[row * 4 + d], 0.0);
            EXPECT_EQ(ot[row * 4 + d], 0.0);
          }
          EXPECT_FALSE(std::isnan(o[row * 4 + d]));
        }
      }
  }
}

TEST(AttentionLargeLogits, InputsScaledBy50StayFiniteAndAgree) {
  AttnShape s;
  s.batch = 1;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.seq_q = 37;
  s.seq_k = 29;
  s.head_dim = 16;
  s.causal = true;
  s.window = 9;
  s.sink_tokens = 2;
  s.learned_sinks = true;
  const Inputs in = make_inputs(s, 77, 50.0, 20.0);  // |S| up to ~1e4: exp() overflows without the max
  std::vector<double> o, lse, ot, lset, o32, lse32, ot32, lset32;
  attention_naive<double>(s, in.q, in.k, in.v, in.sinks, o, lse);
  attention_tiled<double>(s, in.q, in.k, in.v, in.sinks, 16, 7, ot, lset);
  attention_naive<float>(s, in.q, in.k, in.v, in.sinks, o32, lse32);
  attention_tiled<float>(s, in.q, in.k, in.v, in.sinks, 16, 7, ot32, lset32);
  for (const auto* x : {&o, &lse, &ot, &lset, &o32, &lse32, &ot32, &lset32})
    for (double y : *x) ASSERT_TRUE(std::isfinite(y));
  EXPECT_GT(max_abs(lse), 100.0);
  EXPECT_LT(max_abs_diff(o, ot), 1e-12 * max_abs(o));
  EXPECT_LT(max_abs_diff(lse, lset), 1e-12 * max_abs(lse));
  EXPECT_LT(max_abs_diff(ot32, o), 1e-2 * max_abs(o));  // scores ~1e4 in float: ~1e-3 absolute error
}

TEST(SoftmaxMatmul, MatchesPlainLoops) {
  const std::int64_t batch = 3, d1 = 5, d2 = 19, d3 = 7;
  const auto x = uniform(batch * d1 * d2, -6, 6, 11);
  const auto v = uniform(batch * d2 * d3, -1, 1, 12);
  std::vector<double> out, out32;
  softmax_matmul<double>(batch, d1, d2, d3, x, v, out);
  softmax_matmul<float>(batch, d1, d2, d3, x, v, out32);
  ASSERT_EQ(out.size(), std::size_t(batch * d1 * d3));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < d1; ++i) {
      long double denom = 0;
      for (std::int64_t j = 0; j < d2; ++j) denom += std::exp(static_cast<long double>(x[(b * d1 + i) * d2 + j]));
      for (std::int64_t c = 0; c < d3; ++c) {
        long double want = 0;
        for (std::int64_t j = 0; j < d2; ++j)
          want += std::exp(static_cast<long double>(x[(b * d1 + i) * d2 + j])) / denom * v[(b * d2 + j) * d3 + c];
        const std::size_t n = static_cast<std::size_t>((b * d1 + i) * d3 + c);
        EXPECT_NEAR(out[n], static_cast<double>(want), 1e-14);
        EXPECT_NEAR(out32[n], static_cast<double>(want), 1e-5);
      }
    }
}

TEST(SoftmaxMatmul, LargeLogitsStayFinite) {
  std::vector<double> out;
  softmax_matmul<float>(1, 2, 3, 1, {1000, 999, -1000, -5000, 5000, 4999}, {1, 2, 3}, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0], (1 + 2 * std::exp(-1.0)) / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(out[1], (2 + 3 * std::exp(-1.0)) / (1 + std::exp(-1.0)), 1e-6);
}

TEST(AttentionErrors, BadShapesAndSizesThrow) {
  AttnShape s;
  s.heads_q = 3;
  s.heads_kv = 2;
  std::vector<double> o, lse;
  EXPECT_THROW(attention_naive<double>(s, {1}, {1}, {1}, {}, o, lse), core::Error);  // 3 % 2 != 0
  s.heads_q = 2;
  s.heads_kv = 1;
  EXPECT_THROW(attention_naive<double>(s, {1}, {1}, {1}, {}, o, lse), core::Error);  // q needs 2 values
  EXPECT_NO_THROW(attention_naive<double>(s, {1, 2}, {1}, {1}, {}, o, lse));
  EXPECT_THROW(attention_tiled<double>(s, {1, 2}, {1}, {1}, {}, 0, 4, o, lse), core::Error);
  s.learned_sinks = true;
  EXPECT_THROW(attention_tiled<double>(s, {1, 2}, {1}, {1}, {0.5}, 4, 4, o, lse), core::Error);
  EXPECT_THROW(softmax_matmul<double>(1, 2, 2, 2, {1, 2, 3}, {1, 2, 3, 4}, o), core::Error);
}

}  // namespace
}  // namespace flashtune::reference
