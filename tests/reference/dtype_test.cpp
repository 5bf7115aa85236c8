// tests/reference/dtype_test.cpp: rounding to fp16/bf16/fp32, packing as the GPU reads it, random fill.
#include "reference/dtype.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace flashtune::reference {
namespace {

using core::DType;

TEST(RoundTo, KnownFp16Values) {
  EXPECT_EQ(round_to(DType::f16, 1.0 / 3.0), 0.333251953125);
  EXPECT_EQ(round_to(DType::f16, 65504.0), 65504.0);                       // largest finite
  EXPECT_TRUE(std::isinf(round_to(DType::f16, 65520.0)));                  // rounds past it
  EXPECT_EQ(round_to(DType::f16, 0x1.0p-24), 0x1.0p-24);                   // smallest subnormal
  EXPECT_EQ(round_to(DType::f16, 1.0 + 0x1.0p-11), 1.0);                   // tie -> even
  EXPECT_EQ(round_to(DType::f16, 1.0 + 3 * 0x1.0p-11), 1.0 + 0x1.0p-9);    // tie -> even (up)
}

TEST(RoundTo, KnownBf16Values) {
  EXPECT_EQ(round_to(DType::bf16, 1.00390625), 1.0);                 // 1 + 2^-8: tie -> even
  EXPECT_EQ(round_to(DType::bf16, 1.01171875), 1.015625);            // 1 + 3*2^-8: tie -> even (up)
  EXPECT_EQ(round_to(DType::bf16, 1.0 / 3.0), 0.333984375);
}

TEST(RoundTo, NoDoubleRoundingThroughFloat) {
  // 1 + 2^-11 + 2^-40 is just above the fp16 tie: correct rounding goes up; rounding to float first
  // (which drops the 2^-40) would land exactly on the tie and round down to 1.
  EXPECT_EQ(round_to(DType::f16, 1.0 + 0x1.0p-11 + 0x1.0p-40), 1.0 + 0x1.0p-10);
  EXPECT_EQ(round_to(DType::bf16, 1.0 + 0x1.0p-8 + 0x1.0p-40), 1.0 + 0x1.0p-7);
}

TEST(RoundTo, Fp32AndNaN) {
  EXPECT_EQ(round_to(DType::f32, 0.1), static_cast<double>(0.1f));
  EXPECT_TRUE(std::isnan(round_to(DType::f16, std::nan(""))));
  EXPECT_TRUE(std::isnan(round_to(DType::bf16, std::nan(""))));
}

TEST(Pack, BytesAreWhatTheGpuReads) {
  const auto h = pack(DType::f16, {1.0, -2.0});
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[0], 0x00);
  EXPECT_EQ(h[1], 0x3c);  // fp16 1.0 = 0x3c00
  EXPECT_EQ(h[3], 0xc0);  // fp16 -2.0 = 0xc000
  const auto b = pack(DType::bf16, {1.0});
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], 0x80);  // bf16 1.0 = 0x3f80
  EXPECT_EQ(b[1], 0x3f);
  const auto f = pack(DType::f32, {1.5});
  float back;
  std::memcpy(&back, f.data(), 4);
  EXPECT_EQ(back, 1.5f);
}

TEST(Pack, RoundTripsEveryDtype) {
  const auto values = uniform(1000, -3, 3, 42);
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<double> rounded = values;
    round_all(d, rounded);
    const auto bytes = pack(d, values);
    ASSERT_EQ(bytes.size(), values.size() * core::dtype_size(d));
    EXPECT_EQ(unpack(d, bytes.data(), values.size()), rounded) << to_string(d);
    EXPECT_NE(rounded, values) << to_string(d) << " rounding must change some random doubles";
  }
}

TEST(Uniform, DeterministicInRangeAndNonZero) {
  const auto a = uniform(10000, -1, 1, 7);
  EXPECT_EQ(a, uniform(10000, -1, 1, 7));
  EXPECT_NE(a, uniform(10000, -1, 1, 8));
  double lo = 1, hi = -1, mean = 0;
  for (double v : a) {
    EXPECT_NE(v, 0.0);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    mean += v / a.size();
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 0.99);
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_THROW(uniform(1, 1, 1, 0), core::Error);
}

}  // namespace
}  // namespace flashtune::reference
