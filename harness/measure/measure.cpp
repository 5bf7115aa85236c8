// harness/measure/measure.cpp: the sampling loop, the L2 flush and the copy-bandwidth ceiling.
#include "harness/measure/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "harness/cuda/check.hpp"
#include "harness/cuda/clocks.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/measure/stats.hpp"

namespace flashtune::measure {

namespace {
constexpr std::int64_t kDefaultL2Bytes = 64ll << 20;  // [bytes] when the device's L2 size is unknown
constexpr int kMaxBatch = 16;          // samples enqueued between two host synchronizations
constexpr double kBatchTargetMs = 2.0; // [ms] of kernel time per batch once the kernel's time is known
constexpr int kMaxWarmupLaunches = 100000;  // warmup_s's launches past the first timed one
}  // namespace

L2Flusher::L2Flusher(std::int64_t l2_bytes)
    : m_buffer(static_cast<std::size_t>(2 * (l2_bytes > 0 ? l2_bytes : kDefaultL2Bytes))) {}

void L2Flusher::flush(CUstream stream) {
  m_buffer.fill_u32(++m_value, stream);  // a new value each time: no chance of a write being elided
}

core::Timing measure(const std::function<void(CUstream)>& launch, cuda::Stream& stream,
                     const core::MeasureSettings& s, L2Flusher* flusher, std::optional<EarlyExit> early_exit,
                     const Watchdog* watchdog, const std::function<void(CUstream)>& prepare,
                     const cuda::ClockProbe* clocks) {
  using Clock = std::chrono::steady_clock;
  const auto wall_start = Clock::now();
  const CUstream st = stream.get();
  const int max_samples = std::max(1, s.max_samples);
  const int min_samples = std::clamp(s.min_samples, 1, max_samples);
  const int early_exit_after = std::min(5, min_samples);

  const auto untimed = [&] {  // one warm-up launch, prepared and flushed as a sample is
    if (prepare) prepare(st);
    if (flusher) flusher->flush(st);
    launch(st);
  };
  for (int i = 0; i < s.warmup; ++i) untimed();
  if (watchdog) watchdog->wait([&] { return stream.query(); }, s.warmup, "warm-up");
  else stream.synchronize();
  if (s.warmup_s > 0) {  // more warm-up, by the kernel time of one timed launch (at most kMaxWarmupLaunches)
    cuda::Event start, stop;
    if (prepare) prepare(st);
    if (flusher) flusher->flush(st);
    start.record(st);
    launch(st);
    stop.record(st);
    if (watchdog) watchdog->wait([&] { return stop.query(); }, 1, "warm-up");
    else stop.synchronize();
    const double ms = std::max(double(cuda::Event::elapsed_ms(start, stop)), 1e-3);
    const int more = int(std::min<double>(kMaxWarmupLaunches, std::ceil(s.warmup_s * 1e3 / ms) - 1));
    for (int i = 0; i < more; ++i) untimed();
    if (more > 0) {
      if (watchdog) watchdog->wait([&] { return stream.query(); }, more, "warm-up");
      else stream.synchronize();
    }
  }

  // Samples back-to-back: batch j + 1 is enqueued before the host waits for batch j, so the GPU does not idle
  // between batches for the host's synchronize (or, in the Python peers' copy of this loop, for a library's host
  // time to enqueue its call: docs/NOTES.md session 38). Under a power cap an idle gap before a sample raises its
  // clock; back-to-back samples run in the steady state a training loop sees. The batch still in flight when the
  // loop stops is waited for and dropped.
  std::vector<cuda::Event> starts(2 * kMaxBatch), stops(2 * kMaxBatch);
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(std::min(max_samples, 4096)));
  double total_ms = 0;
  int batch = 1;  // the first sample alone tells how long the kernel takes
  bool converged = false, stopped_early = false;
  std::optional<cuda::ClockSampler> sampler;
  if (clocks) sampler.emplace(*clocks);

  const auto enqueue = [&](int slot, int k) {  // k samples into events [slot kMaxBatch, slot kMaxBatch + k)
    for (int i = 0; i < k; ++i) {
      if (prepare) prepare(st);
      if (flusher) flusher->flush(st);
      starts[slot * kMaxBatch + i].record(st);
      launch(st);
      stops[slot * kMaxBatch + i].record(st);
    }
  };
  const auto wait_for = [&](int slot, int k) {
    cuda::Event& last = stops[slot * kMaxBatch + k - 1];
    if (watchdog) watchdog->wait([&] { return last.query(); }, k, "a batch of " + std::to_string(k) + " sample(s)");
    else last.synchronize();
  };
  int slot = 0, k = std::min(batch, max_samples);
  enqueue(slot, k);
  while (true) {
    // The next batch, sized by the samples read so far, goes in before this one is waited for.
    const int next_k = std::min(batch, max_samples - static_cast<int>(samples.size()) - k);
    if (next_k > 0) enqueue(1 - slot, next_k);
    wait_for(slot, k);
    for (int i = 0; i < k; ++i) {
      const double ms = cuda::Event::elapsed_ms(starts[slot * kMaxBatch + i], stops[slot * kMaxBatch + i]);
      samples.push_back(ms);
      total_ms += ms;
    }

    const int n = static_cast<int>(samples.size());
    const core::Timing now = summarize(samples);
    bool stop = false;
    if (n >= min_samples && total_ms * 1e-3 >= s.min_time_s && now.rel_stdev < s.noise_target) converged = stop = true;
    else if (n >= max_samples) stop = true;
    else if (std::chrono::duration<double>(Clock::now() - wall_start).count() > s.max_time_s) stop = true;
    else if (early_exit && early_exit->incumbent_ms > 0 && n >= early_exit_after &&
             now.median_ms > early_exit->factor * early_exit->incumbent_ms)
      stopped_early = stop = true;
    if (stop) {
      if (next_k > 0) wait_for(1 - slot, next_k);  // the batch in flight: waited for (the stream is idle after), dropped
      break;
    }
    const double mean_ms = total_ms / n;
    batch = std::clamp(static_cast<int>(kBatchTargetMs / std::max(mean_ms, 1e-3)), 1, kMaxBatch);
    slot = 1 - slot;
    k = next_k;
  }

  core::Timing t = summarize(std::move(samples));
  if (sampler)
    if (const auto c = sampler->stop()) t.sm_clock_mhz = c->sm_mhz, t.power_capped = c->power_capped;
  t.converged = converged;
  t.cold = flusher != nullptr;
  t.stopped_early = stopped_early;
  return t;
}

double copy_bandwidth_gbps(std::int64_t bytes, cuda::Stream& stream, int reps) {
  if (bytes <= 0 || reps <= 0)
    throw core::Error("copy_bandwidth_gbps: bytes and reps must be positive (got " + std::to_string(bytes) +
                      ", " + std::to_string(reps) + ")");
  const auto size = static_cast<std::size_t>(bytes);
  cuda::DeviceBuffer src(size), dst(size);
  const CUstream st = stream.get();
  src.fill_u32(0x3f800000u, st);  // 1.0f everywhere: the copy reads initialized memory
  const cuda::Driver& d = cuda::driver();
  constexpr int kWarmup = 3;
  for (int i = 0; i < kWarmup; ++i) FT_CHECK_CU(d.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), size, st));

  std::vector<cuda::Event> starts(static_cast<std::size_t>(reps)), stops(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    starts[i].record(st);
    FT_CHECK_CU(d.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), size, st));
    stops[i].record(st);
  }
  stream.synchronize();
  std::vector<double> ms(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) ms[i] = cuda::Event::elapsed_ms(starts[i], stops[i]);
  const double median_ms = summarize(std::move(ms)).median_ms;
  if (median_ms <= 0) return 0;
  return 2.0 * static_cast<double>(bytes) / (median_ms * 1e-3) / 1e9;
}

}  // namespace flashtune::measure
