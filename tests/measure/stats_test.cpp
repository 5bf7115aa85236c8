// tests/measure/stats_test.cpp: summarize() and quantiles on data whose statistics are known by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/measure/stats.hpp"

using flashtune::measure::quantile_sorted;
using flashtune::measure::summarize;

TEST(Stats, QuantileInterpolatesLinearlyBetweenRanks) {
  const std::vector<double> v = {10, 20, 30, 40, 50};
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.0), 10);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 1.0), 50);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.5), 30);
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.1), 14);   // position 0.4
  EXPECT_DOUBLE_EQ(quantile_sorted(v, 0.75), 40);  // position 3
  EXPECT_DOUBLE_EQ(quantile_sorted({7}, 0.3), 7);
}

TEST(Stats, SummarizesEvenCountWithInterpolatedMedianAndIqr) {
  const auto t = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(t.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(t.iqr_ms, 3.25 - 1.75);
  EXPECT_DOUBLE_EQ(t.min_ms, 1);
  EXPECT_DOUBLE_EQ(t.max_ms, 4);
  EXPECT_DOUBLE_EQ(t.mean_ms, 2.5);
  EXPECT_NEAR(t.rel_stdev, std::sqrt(5.0 / 3.0) / 2.5, 1e-12);  // sample stdev (n - 1)
  ASSERT_EQ(t.samples_ms.size(), 4u);
  EXPECT_EQ(t.samples_ms, (std::vector<double>{4, 1, 3, 2}));  // kept in order
}

TEST(Stats, SummarizesOddCountWithMiddleElementAsMedian) {
  const auto t = summarize({5, 1, 3, 100, 2});
  EXPECT_DOUBLE_EQ(t.median_ms, 3);
  EXPECT_DOUBLE_EQ(t.iqr_ms, 5 - 2);
  EXPECT_DOUBLE_EQ(t.max_ms, 100);
  EXPECT_DOUBLE_EQ(t.mean_ms, 111.0 / 5);
}

TEST(Stats, ConstantSamplesHaveNoSpread) {
  const auto t = summarize({0.25, 0.25, 0.25});
  EXPECT_DOUBLE_EQ(t.median_ms, 0.25);
  EXPECT_DOUBLE_EQ(t.iqr_ms, 0);
  EXPECT_DOUBLE_EQ(t.rel_stdev, 0);
}

TEST(Stats, SingleAndEmptySamplesGiveZeroSpread) {
  const auto one = summarize({1.5});
  EXPECT_DOUBLE_EQ(one.median_ms, 1.5);
  EXPECT_DOUBLE_EQ(one.min_ms, 1.5);
  EXPECT_DOUBLE_EQ(one.rel_stdev, 0);
  const auto none = summarize({});
  EXPECT_TRUE(none.samples_ms.empty());
  EXPECT_DOUBLE_EQ(none.median_ms, 0);
  EXPECT_DOUBLE_EQ(none.mean_ms, 0);
}
