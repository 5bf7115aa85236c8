// harness/cuda/buffer.cpp: DeviceBuffer.
#include "harness/cuda/buffer.hpp"

#include <string>
#include <utility>

#include "harness/core/types.hpp"
#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/driver.hpp"

namespace flashtune::cuda {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : m_bytes(bytes), m_generation(context_generation()) {
  if (bytes > 0) FT_CHECK_CU(driver().cuMemAlloc(&m_ptr, bytes));
}
DeviceBuffer::~DeviceBuffer() { free(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : m_ptr(std::exchange(other.m_ptr, 0)), m_bytes(std::exchange(other.m_bytes, 0)),
      m_generation(other.m_generation) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    free();
    m_ptr = std::exchange(other.m_ptr, 0);
    m_bytes = std::exchange(other.m_bytes, 0);
    m_generation = other.m_generation;
  }
  return *this;
}
void DeviceBuffer::free() noexcept {
  if (m_ptr && m_generation == context_generation()) {
    try {
      driver().cuMemFree(m_ptr);
    } catch (...) {
    }
  }
  m_ptr = 0;
  m_bytes = 0;
}

void DeviceBuffer::check_range(std::size_t bytes, std::size_t offset, const char* what) const {
  if (offset > m_bytes || bytes > m_bytes - offset)
    throw core::Error(std::string("DeviceBuffer::") + what + ": range [" + std::to_string(offset) + ", " +
                      std::to_string(offset) + "+" + std::to_string(bytes) + ") exceeds the buffer's " +
                      std::to_string(m_bytes) + " bytes");
}

void DeviceBuffer::upload(const void* src, std::size_t bytes, CUstream stream, std::size_t offset) {
  check_range(bytes, offset, "upload");
  if (bytes == 0) return;
  const Driver& d = driver();
  FT_CHECK_CU(d.cuMemcpyHtoDAsync(m_ptr + offset, src, bytes, stream));
  FT_CHECK_CU(d.cuStreamSynchronize(stream));
}

void DeviceBuffer::download(void* dst, std::size_t bytes, CUstream stream, std::size_t offset) const {
  check_range(bytes, offset, "download");
  if (bytes == 0) return;
  const Driver& d = driver();
  FT_CHECK_CU(d.cuMemcpyDtoHAsync(dst, m_ptr + offset, bytes, stream));
  FT_CHECK_CU(d.cuStreamSynchronize(stream));
}

void DeviceBuffer::fill_bytes(std::uint8_t value, CUstream stream) {
  if (m_bytes == 0) return;
  FT_CHECK_CU(driver().cuMemsetD8Async(m_ptr, value, m_bytes, stream));
}

void DeviceBuffer::fill_u32(std::uint32_t value, CUstream stream) { cuda::fill_u32(m_ptr, m_bytes / 4, value, stream); }

void fill_u32(CUdeviceptr ptr, std::size_t words, std::uint32_t value, CUstream stream) {
  if (words == 0) return;
  FT_CHECK_CU(driver().cuMemsetD32Async(ptr, value, words, stream));
}

}  // namespace flashtune::cuda
