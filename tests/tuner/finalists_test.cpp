// tests/tuner/finalists_test.cpp: choosing finalists, their interleaved order, and naming a winner with
// the noise band and the deterministic tie-break.
#include <gtest/gtest.h>

#include "tuner/finalists.hpp"

namespace ft = flashtune;
using ft::core::Config;
using ft::core::TrialResult;
using ft::core::TrialStatus;

namespace {

Config cfg(std::int64_t bm, std::int64_t bn) { return Config{{{"block_m", bm}, {"block_n", bn}}}; }

TrialResult ok_result(double ms) {
  TrialResult r;
  r.status = TrialStatus::ok;
  r.timing = ft::core::Timing{};
  r.timing->median_ms = ms;
  return r;
}

// n samples spread evenly over [center - half, center + half].
std::vector<double> spread(double center, double half, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(center - half + 2 * half * i / (n - 1));
  return v;
}

}  // namespace

TEST(TopConfigs, KeepsTheFastestCompleteMeasurements) {
  ft::tuner::TopConfigs top(3);
  EXPECT_TRUE(top.offer(cfg(64, 64), ok_result(5)));
  EXPECT_TRUE(top.offer(cfg(128, 64), ok_result(3)));
  TrialResult early = ok_result(1);
  early.timing->stopped_early = true;
  EXPECT_FALSE(top.offer(cfg(16, 16), early));  // abandoned: its median is not a full measurement
  TrialResult bad;
  bad.status = TrialStatus::incorrect;
  EXPECT_FALSE(top.offer(cfg(16, 32), bad));
  EXPECT_TRUE(top.offer(cfg(32, 64), ok_result(4)));
  EXPECT_TRUE(top.offer(cfg(32, 32), ok_result(3)));   // equal to 128x64: goes after it
  EXPECT_FALSE(top.offer(cfg(16, 64), ok_result(6)));  // slower than all three
  ASSERT_EQ(top.entries().size(), 3u);
  EXPECT_EQ(top.configs(), (std::vector<Config>{cfg(128, 64), cfg(32, 32), cfg(32, 64)}));
  EXPECT_DOUBLE_EQ(top.entries()[2].second, 4);
  ft::tuner::TopConfigs none(0);
  EXPECT_FALSE(none.offer(cfg(64, 64), ok_result(1)));
}

TEST(InterleavedOrder, RotatesTheStartEachRound) {
  EXPECT_EQ(ft::tuner::interleaved_order(3, 4), (std::vector<int>{0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2}));
  EXPECT_EQ(ft::tuner::interleaved_order(1, 3), (std::vector<int>{0, 0, 0}));
  EXPECT_TRUE(ft::tuner::interleaved_order(0, 3).empty());
  EXPECT_TRUE(ft::tuner::interleaved_order(3, 0).empty());
  // Each finalist occupies each position in the round equally often over n rounds.
  const auto order = ft::tuner::interleaved_order(4, 4);
  for (int f = 0; f < 4; ++f)
    for (int pos = 0; pos < 4; ++pos) {
      int n = 0;
      for (int r = 0; r < 4; ++r) n += order[std::size_t(4 * r + pos)] == f;
      EXPECT_EQ(n, 1) << "finalist " << f << " position " << pos;
    }
}

TEST(NameWinner, ClearWinnerIsNotATie) {
  const std::vector<Config> f{cfg(64, 64), cfg(128, 32), cfg(32, 32)};
  const auto v = ft::tuner::name_winner(f, {spread(1.10, 0.005, 15), spread(1.00, 0.005, 15), spread(1.20, 0.005, 15)}, 0.01);
  EXPECT_EQ(v.fastest, 1u);
  EXPECT_EQ(v.winner, 1u);
  EXPECT_FALSE(v.tie());
  EXPECT_NEAR(v.stats[1].median_ms, 1.0, 1e-12);
  EXPECT_NEAR(v.stats[1].iqr_ms, 0.005, 1e-12);  // quartiles of an even spread of +-0.005: +-0.0025
  EXPECT_EQ(v.stats[0].samples, 15u);
}

TEST(NameWinner, WithinTheBandTheSmallestConfigWinsWhateverTheOrder) {
  // 128x64 measured 0.5 % faster than 64x64: within a 1 % band, a tie; 64x64 compares smaller.
  const std::vector<Config> f{cfg(128, 64), cfg(64, 64), cfg(32, 16)};
  const auto v = ft::tuner::name_winner(f, {spread(1.000, 0.001, 9), spread(1.005, 0.001, 9), spread(1.5, 0.001, 9)}, 0.01);
  EXPECT_EQ(v.fastest, 0u);
  EXPECT_TRUE(v.tie());
  EXPECT_EQ(v.tied, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(v.winner, 1u);
  // The same measurements in another order, or with the noise the other way, give the same winner.
  const auto w = ft::tuner::name_winner({cfg(64, 64), cfg(128, 64), cfg(32, 16)},
                                        {spread(0.999, 0.001, 9), spread(1.004, 0.001, 9), spread(1.5, 0.001, 9)}, 0.01);
  EXPECT_EQ(w.fastest, 0u);
  EXPECT_EQ(w.winner, 0u);
  // A band of 0.1 % no longer ties them: the fastest wins.
  const auto x = ft::tuner::name_winner(f, {spread(1.000, 0.001, 9), spread(1.005, 0.001, 9), spread(1.5, 0.001, 9)}, 0.001);
  EXPECT_FALSE(x.tie());
  EXPECT_EQ(x.winner, 0u);
}

TEST(NameWinner, NoisyMeasurementsTieBeyondTheBand) {
  // 3 % apart, but each with an IQR of 10 % over 5 samples: the notches overlap, so it is a tie even
  // with a zero band; with 500 samples of the same spread the medians are told apart.
  const std::vector<Config> f{cfg(128, 64), cfg(64, 64)};
  const auto noisy = ft::tuner::name_winner(f, {spread(1.00, 0.1, 5), spread(1.03, 0.1, 5)}, 0.0);
  EXPECT_TRUE(noisy.tie());
  EXPECT_EQ(noisy.winner, 1u);
  const auto many = ft::tuner::name_winner(f, {spread(1.00, 0.1, 500), spread(1.03, 0.1, 500)}, 0.0);
  EXPECT_FALSE(many.tie());
  EXPECT_EQ(many.winner, 0u);
}

TEST(NameWinner, RejectsMismatchedOrEmptyInput) {
  EXPECT_THROW(ft::tuner::name_winner({}, {}, 0.01), ft::core::Error);
  EXPECT_THROW(ft::tuner::name_winner({cfg(1, 1)}, {}, 0.01), ft::core::Error);
  EXPECT_THROW(ft::tuner::name_winner({cfg(1, 1)}, {{}}, 0.01), ft::core::Error);
  EXPECT_THROW(ft::tuner::name_winner({cfg(1, 1)}, {{1.0}}, -1), ft::core::Error);
  const auto one = ft::tuner::name_winner({cfg(1, 1)}, {{2.0}}, 0.01);
  EXPECT_EQ(one.winner, 0u);
  EXPECT_FALSE(one.tie());
}
