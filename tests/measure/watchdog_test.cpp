// tests/measure/watchdog_test.cpp: the watchdog's deadline logic on the CPU, with a fake clock whose
// time moves only when the watchdog sleeps, and a fake poller that says when the "kernel" is done.
#include "harness/measure/watchdog.hpp"

#include <gtest/gtest.h>

#include <string>

using flashtune::measure::KernelTimeout;
using flashtune::measure::Watchdog;

namespace {

struct FakeTime {
  double now = 100.0;  // [s]
  int sleeps = 0;
  double longest_sleep = 0;
  Watchdog::Clock clock() {
    return {[this] { return now; }, [this](double s) {
              now += s;
              ++sleeps;
              longest_sleep = std::max(longest_sleep, s);
            }};
  }
};

}  // namespace

TEST(Watchdog, ReturnsWhenTheWorkCompletesBeforeTheDeadline) {
  FakeTime t;
  bool timed_out = false;
  Watchdog w(2.0, [&](const std::string&, double) { timed_out = true; }, t.clock());
  const double done_at = t.now + 1.5;  // a 1.5 s kernel under a 2 s watchdog
  w.wait([&] { return t.now >= done_at; }, 1, "launch");
  EXPECT_FALSE(timed_out);
  EXPECT_GE(t.now, done_at);
  EXPECT_LT(t.now, done_at + 2.1e-4);  // noticed within one longest sleep
  EXPECT_LE(t.longest_sleep, 2e-4 + 1e-12);
  EXPECT_LT(t.sleeps, 8000);  // backed off: not one poll per microsecond (1.5 s / 200 us = 7500)
}

TEST(Watchdog, AnEndlessKernelTimesOutAfterTheLimitTimesTheLaunches) {
  FakeTime t;
  std::string what;
  double waited = 0;
  int calls = 0;
  Watchdog w(0.5, [&](const std::string& wh, double s) { what = wh, waited = s, ++calls; }, t.clock());
  const double start = t.now;
  try {
    w.wait([] { return false; }, 4, "validation launch");
    FAIL() << "an endless wait returned";
  } catch (const KernelTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("validation launch did not complete"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(what, "validation launch");
  EXPECT_GT(waited, 0.5 * 4);          // not before 4 launches' worth
  EXPECT_LT(waited, 0.5 * 4 + 2.1e-4);  // and promptly after
  EXPECT_NEAR(t.now - start, waited, 1e-9);

  // A batch that completes at 1.9 s of a 4 x 0.5 s allowance is not a timeout; one launch of 0.6 s is.
  const double ok_at = t.now + 1.9;
  EXPECT_NO_THROW(w.wait([&] { return t.now >= ok_at; }, 4, "batch"));
  const double late_at = t.now + 0.6;
  EXPECT_THROW(w.wait([&] { return t.now >= late_at; }, 1, "single"), KernelTimeout);
  EXPECT_EQ(calls, 2);
}

TEST(Watchdog, NoLimitWaitsAsLongAsItTakes) {
  FakeTime t;
  Watchdog w(0.0, [](const std::string&, double) { ADD_FAILURE() << "timed out without a limit"; }, t.clock());
  const double done_at = t.now + 3600;
  w.wait([&] { return t.now >= done_at; }, 1, "slow");
  EXPECT_GE(t.now, done_at);
}

TEST(Watchdog, CompletedWorkIsNeverSleptOn) {
  FakeTime t;
  Watchdog w(1.0, {}, t.clock());
  w.wait([] { return true; }, 1, "done");
  EXPECT_EQ(t.sleeps, 0);
}
