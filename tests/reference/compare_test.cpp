// tests/reference/compare_test.cpp: the pass rule flags NaN and over-tolerance outputs, passes close ones.
#include "reference/compare.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace flashtune::reference {
namespace {

TEST(Compare, PassesWithinTwiceNaiveErrorPlusAtol) {
  const std::vector<double> ref{1.0, 2.0, 4.0};
  const std::vector<double> naive{1.0, 2.001, 4.0};
  const std::vector<double> out{1.0015, 2.0, 3.999};
  const auto v = compare(out, ref, naive, 1e-4);
  EXPECT_TRUE(v.checked);
  EXPECT_NEAR(v.naive_err, 1e-3, 1e-12);
  EXPECT_NEAR(v.tolerance, 2.1e-3, 1e-12);
  EXPECT_NEAR(v.max_abs_err, 1.5e-3, 1e-12);
  EXPECT_NEAR(v.max_rel_err, 1.5e-3, 1e-12);
  EXPECT_EQ(v.nan_count, 0);
  EXPECT_TRUE(v.passed);
}

TEST(Compare, FailsWhenOneElementIsOverTolerance) {
  const std::vector<double> ref{1.0, 2.0, 4.0};
  const std::vector<double> naive{1.0, 2.001, 4.0};
  const std::vector<double> out{1.0, 2.0, 4.003};
  const auto v = compare(out, ref, naive, 1e-4);
  EXPECT_NEAR(v.max_abs_err, 3e-3, 1e-12);
  EXPECT_FALSE(v.passed);
}

TEST(Compare, FlagsNaNAndInfEvenWhenOtherwiseExact) {
  const std::vector<double> ref{1.0, 2.0, 3.0};
  const std::vector<double> out{std::nan(""), 2.0, std::numeric_limits<double>::infinity()};
  const auto v = compare(out, ref, ref, 1.0);
  EXPECT_EQ(v.nan_count, 2);
  EXPECT_EQ(v.max_abs_err, 0.0);
  EXPECT_FALSE(v.passed);
}

TEST(Compare, NaNReferenceFails) {
  const std::vector<double> ref{std::nan("")};
  const auto v = compare({1.0}, ref, {1.0}, 1.0);
  EXPECT_FALSE(v.passed);
}

TEST(Compare, RelativeErrorUsesFloorForTinyReferences) {
  const auto v = compare({1e-9}, {0.0}, {0.0}, 1.0);
  EXPECT_NEAR(v.max_rel_err, 1e-9 / kRelFloor, 1e-15);
  EXPECT_TRUE(v.passed);
}

TEST(Compare, SizeMismatchThrows) {
  EXPECT_THROW(compare({1.0}, {1.0, 2.0}, {1.0, 2.0}, 0.0), core::Error);
  EXPECT_THROW(compare({1.0}, {1.0}, {1.0}, -1.0), core::Error);
}

// The atol of a 16-bit output rises to one ulp at the largest finite reference magnitude; fp32 keeps atol.
TEST(Compare, StorageAtolIsAtLeastOneUlpOfA16BitOutput) {
  const std::vector<double> ref{0.5, -3.0, std::numeric_limits<double>::infinity(), 1.0};  // largest finite: 3 (2^1)
  EXPECT_EQ(storage_atol(core::DType::f32, ref, 1e-4), 1e-4);
  EXPECT_EQ(storage_atol(core::DType::bf16, ref, 1e-4), std::ldexp(1.0, 1 - 7));
  EXPECT_EQ(storage_atol(core::DType::f16, ref, 1e-4), std::ldexp(1.0, 1 - 10));
  EXPECT_EQ(storage_atol(core::DType::bf16, ref, 0.5), 0.5);                           // a larger atol stays
  EXPECT_EQ(storage_atol(core::DType::f16, std::vector<double>{0.0, 0.0}, 1e-3), 1e-3);  // nothing to scale by
}

}  // namespace
}  // namespace flashtune::reference
