// tests/cuda/clocks_test.cpp (cpu): the clock summary a trial records, and the NVML probe's refusal on any machine
// (no NVML here, or a GPU NVML does not know): nullptr and a reason, never an exception.
#include <gtest/gtest.h>

#include "harness/cuda/clocks.hpp"

using namespace flashtune;

TEST(Clocks, SummaryIsTheMeanClockAndTheShareOfPowerCappedPolls) {
  EXPECT_FALSE(cuda::summarize_polls({}));
  // 0x4 SW power cap, 0x80 HW power brake: capped; 0x1 GPU idle, 0x20 SW thermal: not the power cap.
  const auto s = cuda::summarize_polls({{1980, 0x1}, {1650, 0x4}, {1700, 0x4 | 0x20}, {1690, 0x80}, {1800, 0x20}});
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->sm_mhz, (1980.0 + 1650 + 1700 + 1690 + 1800) / 5);
  EXPECT_DOUBLE_EQ(s->power_capped, 3.0 / 5);
  EXPECT_EQ(s->polls, 5);
}

TEST(Clocks, ProbeOfAnUnknownGpuIsRefusedWithAReason) {
  std::string why;
  const auto probe = cuda::ClockProbe::open("GPU-00000000-0000-0000-0000-000000000000", &why);
  EXPECT_FALSE(probe);
  EXPECT_NE(why.find("no SM clock recorded"), std::string::npos) << why;
}
