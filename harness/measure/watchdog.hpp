// harness/measure/watchdog.hpp: waits for launched GPU work by polling with a deadline instead of a
// blocking synchronize, so a kernel that never ends (an endless loop) is noticed and reported instead of
// hanging the tuner. The clock and the sleep are injectable: tests/measure/watchdog_test.cpp drives the
// deadline logic on the CPU with a fake clock.
#pragma once

#include <functional>
#include <string>

#include "harness/core/types.hpp"

namespace flashtune::measure {

/// Work that did not complete within the watchdog's deadline.
class KernelTimeout : public core::Error {
 public:
  using core::Error::Error;
};

class Watchdog {
 public:
  struct Clock {
    std::function<double()> now_s;         ///< [s] a monotonic time
    std::function<void(double)> sleep_s;   ///< sleeps about this many [s]
  };
  static Clock steady_clock();  ///< std::chrono::steady_clock and std::this_thread::sleep_for

  /// Called when a wait passes its deadline with what was waited for and how long [s]. It may not return
  /// (the runner records the trial as timeout and restarts the process: the GPU is still busy with the
  /// endless kernel, and freeing its memory or module would block); if it returns, wait() throws KernelTimeout.
  using OnTimeout = std::function<void(const std::string& what, double waited_s)>;

  /// limit_s [s]: time allowed per launch waited for (<= 0: no limit, wait forever).
  explicit Watchdog(double limit_s, OnTimeout on_timeout = {}, Clock clock = steady_clock());

  /// Polls done() (which must never block) until it returns true. The deadline is limit_s x max(1,
  /// launches) after the call. Between polls it sleeps, 10 us at first, doubling up to 200 us.
  void wait(const std::function<bool()>& done, int launches, const std::string& what) const;

  double limit_s() const noexcept { return m_limit_s; }

 private:
  double m_limit_s;
  OnTimeout m_on_timeout;
  Clock m_clock;
};

}  // namespace flashtune::measure
