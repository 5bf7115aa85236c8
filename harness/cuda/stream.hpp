// harness/cuda/stream.hpp: owning wrappers of a CUDA stream and a timing event (move-only). Both belong
// to the context current when they were made.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace flashtune::cuda {

class Stream {
 public:
  Stream();  ///< a non-blocking stream (does not synchronize with the legacy default stream)
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream get() const noexcept { return m_stream; }
  void synchronize() const;  ///< waits for the stream's work; throws CudaError if any of it failed
  bool query() const;        ///< true when the stream's work is done (never blocks); throws CudaError if it failed

 private:
  void destroy() noexcept;
  CUstream m_stream = nullptr;
  std::uint64_t m_generation = 0;
};

class Event {
 public:
  Event();  ///< an event that records time stamps
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  CUevent get() const noexcept { return m_event; }
  void record(CUstream stream);  ///< enqueues the time stamp on `stream`
  void synchronize() const;      ///< waits until the recorded work is done
  bool query() const;            ///< true when the recorded work is done (never blocks)
  /// [ms] between two recorded, completed events (resolution about 0.5 us).
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  void destroy() noexcept;
  CUevent m_event = nullptr;
  std::uint64_t m_generation = 0;
};

}  // namespace flashtune::cuda
