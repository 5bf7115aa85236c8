// harness/measure/measure.hpp: timing of one kernel launch the way nvbench does it: warm-up, CUDA events
// around each sample, an optional L2 flush before each sample (cold), and noise-based stopping within a
// budget. Also the device-to-device copy bandwidth that memory-bound kernels are compared with.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "harness/core/types.hpp"
#include "harness/cuda/buffer.hpp"
#include "harness/cuda/clocks.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/measure/watchdog.hpp"

namespace flashtune::measure {

/// Evicts the L2 cache by writing a buffer twice its size (cuMemsetD32Async) on a stream.
class L2Flusher {
 public:
  /// `l2_bytes` [bytes]: the device's L2 size (DeviceInfo::l2_bytes); <= 0 uses 64 MiB.
  explicit L2Flusher(std::int64_t l2_bytes);
  void flush(CUstream stream);  ///< enqueues the flush; returns at once
  std::size_t buffer_bytes() const noexcept { return m_buffer.size(); }

 private:
  cuda::DeviceBuffer m_buffer;
  std::uint32_t m_value = 0;
};

/// Tuner early exit: give up on a config that is clearly slower than the best so far.
struct EarlyExit {
  double incumbent_ms = 0;  ///< [ms] median of the best config so far
  double factor = 1.5;      ///< abandon when the median exceeds factor * incumbent_ms
};

/// Times `launch` (which must enqueue exactly the work to time on the stream it is given).
/// Runs s.warmup untimed launches (and, with s.warmup_s, more: one timed, then as many as make up s.warmup_s of
/// kernel time), then samples, each between its own pair of events (samples are
/// enqueued in small batches so the GPU never idles waiting for the host between a start event and its
/// launch). With `flusher` (cold), an L2 flush is enqueued before each sample's start event.
/// Stops when: n >= s.min_samples, total kernel time >= s.min_time_s and rel_stdev < s.noise_target
/// (converged = true); or n >= s.max_samples; or wall time > s.max_time_s; or, with `early_exit`, once
/// n >= min(5, s.min_samples) and the median exceeds factor * incumbent (stopped_early = true).
/// Every sample is kept. Throws cuda::CudaError when a launch fails (sticky errors included).
/// With `watchdog`, every wait for the GPU polls under its deadline (per launch waited for) instead of
/// blocking: a launch that never completes reaches the watchdog's OnTimeout, or throws KernelTimeout.
/// With `prepare`, it is enqueued before every launch (warm-up and samples), ahead of the flush and outside
/// the events: untimed setup such as zeroing an accumulator the launch adds into.
/// With `clocks`, the SM clock is polled from the first sample to the last (Timing::sm_clock_mhz, power_capped).
core::Timing measure(const std::function<void(CUstream)>& launch, cuda::Stream& stream,
                     const core::MeasureSettings& s, L2Flusher* flusher /* nullptr = hot */,
                     std::optional<EarlyExit> early_exit = std::nullopt, const Watchdog* watchdog = nullptr,
                     const std::function<void(CUstream)>& prepare = {}, const cuda::ClockProbe* clocks = nullptr);

/// [GB/s] device-to-device copy bandwidth: cuMemcpyDtoDAsync of `bytes` [bytes], after warm-up, median
/// over `reps` event-timed copies, counted as 2 * bytes (read + write) / time, 1 GB = 1e9 bytes.
double copy_bandwidth_gbps(std::int64_t bytes, cuda::Stream& stream, int reps = 20);

}  // namespace flashtune::measure
