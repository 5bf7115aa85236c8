// harness/cuda/stream.cpp: Stream and Event.
#include "harness/cuda/stream.hpp"

#include <utility>

#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/driver.hpp"

namespace flashtune::cuda {

Stream::Stream() : m_generation(context_generation()) {
  FT_CHECK_CU(driver().cuStreamCreate(&m_stream, CU_STREAM_NON_BLOCKING));
}
Stream::~Stream() { destroy(); }
Stream::Stream(Stream&& other) noexcept
    : m_stream(std::exchange(other.m_stream, nullptr)), m_generation(other.m_generation) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    destroy();
    m_stream = std::exchange(other.m_stream, nullptr);
    m_generation = other.m_generation;
  }
  return *this;
}
void Stream::destroy() noexcept {
  if (m_stream && m_generation == context_generation()) {
    try {
      driver().cuStreamDestroy(m_stream);
    } catch (...) {
    }
  }
  m_stream = nullptr;
}
void Stream::synchronize() const { FT_CHECK_CU(driver().cuStreamSynchronize(m_stream)); }
bool Stream::query() const {
  const CUresult rc = driver().cuStreamQuery(m_stream);
  if (rc == CUDA_ERROR_NOT_READY) return false;
  FT_CHECK_CU(rc);
  return true;
}

Event::Event() : m_generation(context_generation()) {
  FT_CHECK_CU(driver().cuEventCreate(&m_event, CU_EVENT_DEFAULT));
}
Event::~Event() { destroy(); }
Event::Event(Event&& other) noexcept
    : m_event(std::exchange(other.m_event, nullptr)), m_generation(other.m_generation) {}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    destroy();
    m_event = std::exchange(other.m_event, nullptr);
    m_generation = other.m_generation;
  }
  return *this;
}
void Event::destroy() noexcept {
  if (m_event && m_generation == context_generation()) {
    try {
      driver().cuEventDestroy(m_event);
    } catch (...) {
    }
  }
  m_event = nullptr;
}
void Event::record(CUstream stream) { FT_CHECK_CU(driver().cuEventRecord(m_event, stream)); }
void Event::synchronize() const { FT_CHECK_CU(driver().cuEventSynchronize(m_event)); }
bool Event::query() const {
  const CUresult rc = driver().cuEventQuery(m_event);
  if (rc == CUDA_ERROR_NOT_READY) return false;
  FT_CHECK_CU(rc);
  return true;
}
float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0;
  FT_CHECK_CU(driver().cuEventElapsedTime(&ms, start.m_event, stop.m_event));
  return ms;
}

}  // namespace flashtune::cuda
