// tests/core/types_test.cpp: canonical keys, dtype parsing, status names and hashes of the core types.
#include "harness/core/types.hpp"

#include <gtest/gtest.h>

using namespace flashtune::core;

TEST(CoreTypes, ProblemKeyIsCanonicalWhateverTheInsertionOrder) {
  Problem a, b;
  a.dims["rows"] = 4, a.dims["cols"] = 8;
  b.dims["cols"] = 8, b.dims["rows"] = 4;
  EXPECT_EQ(a.key(), "cols=8,rows=4,dtype=f32");
  EXPECT_EQ(a.key(), b.key());
  b.dtype = DType::bf16;
  EXPECT_NE(a.key(), b.key());
  EXPECT_THROW(a.at("heads"), Error);
  EXPECT_EQ(a.get("heads", 7), 7);
}

TEST(CoreTypes, DtypeAndStatusRoundTrip) {
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_FALSE(parse_dtype("int8"));
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  for (auto s : {TrialStatus::ok, TrialStatus::crashed, TrialStatus::resource_exceeded})
    EXPECT_EQ(parse_trial_status(to_string(s)), s);
  EXPECT_FALSE(parse_trial_status("fine"));
}

TEST(CoreTypes, HashIsStableAndSensitive) {
  EXPECT_EQ(hash_hex(""), "cbf29ce484222325");  // FNV-1a offset basis
  EXPECT_EQ(hash_hex("a"), "af63dc4c8601ec8c");  // published FNV-1a 64 test vector
  EXPECT_NE(hash_hex("kernel v1"), hash_hex("kernel v2"));
}

TEST(CoreTypes, DeviceLimitsKnowTheirArchAndRejectOthers) {
  EXPECT_EQ(DeviceLimits::for_arch("sm_80").max_shared_per_block_optin, 163 * 1024);
  EXPECT_EQ(DeviceLimits::for_arch("sm_90a").sm_major, 9);
  EXPECT_THROW(DeviceLimits::for_arch("sm_12"), UserError);
}
