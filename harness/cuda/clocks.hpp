// harness/cuda/clocks.hpp: the SM clock and its clock-event reasons (power cap, thermal, ...) of one GPU, read
// through NVML (libnvidia-ml.so.1, loaded at run time like libcuda: nothing is linked), and a sampler that polls
// them on a thread of its own while samples are timed. Under a power cap the same kernel runs at different clocks
// on different cards and between trials: a trial's clock says which (H100 at 700 W: ~1.65-1.75 GHz under the
// d128 backward, session 34). Without NVML (no driver, no library, a device NVML cannot see) there is no probe and
// trials record no clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace flashtune::cuda {

/// One reading: SM clock [MHz] and NVML's clock-event reasons (nvmlClocksEventReason* bits).
struct ClockPoll {
  unsigned sm_mhz = 0;
  std::uint64_t reasons = 0;
};

/// NVML's reasons that say the power limit holds the clock down: SW power cap (0x4) and HW power brake (0x80).
constexpr std::uint64_t kPowerCapReasons = 0x4ull | 0x80ull;

/// What a trial records: the mean SM clock [MHz] over the polls and the fraction of polls [0, 1] with a power-cap
/// reason active. nullopt without polls.
struct ClockStats {
  double sm_mhz = 0;
  double power_capped = 0;
  int polls = 0;
};
std::optional<ClockStats> summarize_polls(const std::vector<ClockPoll>& polls);

/// The NVML handle of one device. open() returns nullptr (and says why in `why`) where NVML is missing or does not
/// know the device; it never throws.
class ClockProbe {
 public:
  static std::unique_ptr<ClockProbe> open(const std::string& gpu_uuid, std::string* why = nullptr);
  ~ClockProbe();
  ClockProbe(const ClockProbe&) = delete;
  ClockProbe& operator=(const ClockProbe&) = delete;
  /// The current reading; nullopt when NVML fails to answer.
  std::optional<ClockPoll> poll() const;

 private:
  struct Impl;
  explicit ClockProbe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

/// Polls a probe every `period_us` [us] on its own thread from construction to stop() (or destruction).
class ClockSampler {
 public:
  explicit ClockSampler(const ClockProbe& probe, int period_us = 2000);
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;
  /// Stops the thread and summarizes its polls.
  std::optional<ClockStats> stop();

 private:
  std::atomic<bool> m_stop{false};
  std::vector<ClockPoll> m_polls;
  std::thread m_thread;
};

}  // namespace flashtune::cuda
