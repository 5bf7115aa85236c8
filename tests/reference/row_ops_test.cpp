// tests/reference/row_ops_test.cpp: the row oracles against plain loops and against each other
// (online softmax == two-pass softmax for any tile), plus overflow safety for large logits.
#include "reference/row_ops.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "reference/dtype.hpp"

namespace flashtune::reference {
namespace {

TEST(WeightedRowSum, MatchesPlainLoop) {
  const std::int64_t rows = 7, cols = 333;
  const auto x = uniform(rows * cols, -1, 1, 1);
  const auto w = uniform(cols, -1, 1, 2);
  const auto y = weighted_row_sum<double>(x, w, rows, cols);
  ASSERT_EQ(y.size(), std::size_t(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    long double s = 0;
    for (std::int64_t j = 0; j < cols; ++j) s += static_cast<long double>(x[i * cols + j]) * w[j];
    EXPECT_NEAR(y[i], static_cast<double>(s), 1e-13) << "row " << i;
  }
}

TEST(WeightedRowSum, FloatAccumulationIsCloseButNotExact) {
  const std::int64_t rows = 16, cols = 4096;
  const auto x = uniform(rows * cols, -1, 1, 3);
  const auto w = uniform(cols, -1, 1, 4);
  const auto y64 = weighted_row_sum<double>(x, w, rows, cols);
  const auto y32 = weighted_row_sum<float>(x, w, rows, cols);
  double max_err = 0;
  for (std::int64_t i = 0; i < rows; ++i) max_err = std::max(max_err, std::fabs(y64[i] - y32[i]));
  EXPECT_GT(max_err, 0.0);
  EXPECT_LT(max_err, 1e-4);
}

TEST(WeightedRowSum, SizeMismatchThrows) {
  EXPECT_THROW(weighted_row_sum<double>({1, 2, 3}, {1, 2}, 2, 2), core::Error);
}

TEST(SoftmaxRows, RowsSumToOneAndMatchDefinition) {
  const std::int64_t rows = 5, cols = 17;
  const auto x = uniform(rows * cols, -8, 8, 5);
  const auto y = softmax_rows<double>(x, rows, cols);
  for (std::int64_t i = 0; i < rows; ++i) {
    double denom = 0, sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) denom += std::exp(x[i * cols + j]);
    for (std::int64_t j = 0; j < cols; ++j) {
      EXPECT_NEAR(y[i * cols + j], std::exp(x[i * cols + j]) / denom, 1e-15);
      sum += y[i * cols + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);
  }
}

TEST(SoftmaxRows, LargeLogitsDoNotOverflow) {
  const std::int64_t rows = 3, cols = 100;
  auto x = uniform(rows * cols, 1e4, 1e4 + 10, 6);
  round_all(core::DType::f32, x);  // exactly representable, so the shift below is exact in float too
  ASSERT_TRUE(std::isinf(std::exp(static_cast<float>(x[0]))));  // the naive formula would overflow
  const auto y = softmax_rows<float>(x, rows, cols);
  const auto y_online = softmax_rows_online<float>(x, rows, cols, 16);
  // Shifting every logit by a constant leaves softmax unchanged.
  for (double& v : x) v -= 1e4;
  const auto y_shifted = softmax_rows<double>(x, rows, cols);
  for (std::size_t k = 0; k < y.size(); ++k) {
    ASSERT_TRUE(std::isfinite(y[k]));
    ASSERT_TRUE(std::isfinite(y_online[k]));
    EXPECT_NEAR(y[k], y_shifted[k], 1e-5);
    EXPECT_NEAR(y_online[k], y_shifted[k], 1e-5);
  }
}

TEST(SoftmaxRowsOnline, EqualsTwoPassForAnyTile) {
  for (std::int64_t cols : {1, 7, 64, 333, 1000}) {
    const std::int64_t rows = 4;
    const auto x = uniform(rows * cols, -8, 8, 100 + cols);
    const auto two_pass = softmax_rows<double>(x, rows, cols);
    for (std::int64_t tile : {1, 3, 8, 32, 128, 4096}) {
      const auto online = softmax_rows_online<double>(x, rows, cols, tile);
      ASSERT_EQ(online.size(), two_pass.size());
      for (std::size_t k = 0; k < online.size(); ++k)
        ASSERT_NEAR(online[k], two_pass[k], 1e-15) << "cols " << cols << " tile " << tile << " k " << k;
    }
  }
}

TEST(SoftmaxRowsOnline, FloatIsWithinFloatRounding) {
  const std::int64_t rows = 8, cols = 1000;
  const auto x = uniform(rows * cols, -8, 8, 9);
  const auto ref = softmax_rows<double>(x, rows, cols);
  const auto online = softmax_rows_online<float>(x, rows, cols, 37);
  for (std::size_t k = 0; k < ref.size(); ++k) ASSERT_NEAR(online[k], ref[k], 1e-6 * std::max(ref[k], 1e-3));
  EXPECT_THROW(softmax_rows_online<float>(x, rows, cols, 0), core::Error);
}

}  // namespace
}  // namespace flashtune::reference
