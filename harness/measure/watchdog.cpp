// harness/measure/watchdog.cpp: the polling wait with a deadline (see watchdog.hpp).
#include "harness/measure/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

namespace flashtune::measure {

Watchdog::Clock Watchdog::steady_clock() {
  return Clock{[] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); },
               [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }};
}

Watchdog::Watchdog(double limit_s, OnTimeout on_timeout, Clock clock)
    : m_limit_s(limit_s), m_on_timeout(std::move(on_timeout)), m_clock(std::move(clock)) {}

void Watchdog::wait(const std::function<bool()>& done, int launches, const std::string& what) const {
  constexpr double kFirstSleep = 10e-6, kLongestSleep = 200e-6;  // [s] short: the GPU idles while we sleep
  const double start = m_clock.now_s();
  const double allowed = m_limit_s * std::max(1, launches);
  double sleep = kFirstSleep;
  while (!done()) {
    const double waited = m_clock.now_s() - start;
    if (m_limit_s > 0 && waited > allowed) {
      if (m_on_timeout) m_on_timeout(what, waited);
      char text[160];
      std::snprintf(text, sizeof text, "%s did not complete within %.3g s (watchdog_s %.3g x %d launch%s)", what.c_str(),
                    waited, m_limit_s, std::max(1, launches), launches > 1 ? "es" : "");
      throw KernelTimeout(text);
    }
    m_clock.sleep_s(sleep);
    sleep = std::min(2 * sleep, kLongestSleep);
  }
}

}  // namespace flashtune::measure
