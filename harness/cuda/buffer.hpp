// harness/cuda/buffer.hpp: an owning device allocation (move-only) with checked copies and fills.
// Copies are complete when they return; fills are enqueued on a stream.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace flashtune::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;                   ///< empty: ptr() == 0, size() == 0
  explicit DeviceBuffer(std::size_t bytes);   ///< [bytes]; uninitialized; throws CudaError (out of memory)
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const noexcept { return m_ptr; }
  std::size_t size() const noexcept { return m_bytes; }  ///< [bytes]

  /// Copies `bytes` from host `src` to the buffer at `offset` [bytes], ordered after earlier work on
  /// `stream`; complete on return. Throws core::Error when the range exceeds the buffer.
  void upload(const void* src, std::size_t bytes, CUstream stream = nullptr, std::size_t offset = 0);
  /// Copies `bytes` at `offset` to host `dst`, ordered after earlier work on `stream` (pass the stream
  /// the kernel ran on); complete on return.
  void download(void* dst, std::size_t bytes, CUstream stream = nullptr, std::size_t offset = 0) const;
  /// Enqueues setting every byte to `value` on `stream`.
  void fill_bytes(std::uint8_t value, CUstream stream = nullptr);
  /// Enqueues setting every 32-bit word to `value` (e.g. 0x7fc00000, a float NaN) on `stream`;
  /// trailing bytes past the last whole word are left alone.
  void fill_u32(std::uint32_t value, CUstream stream = nullptr);

 private:
  void check_range(std::size_t bytes, std::size_t offset, const char* what) const;
  void free() noexcept;
  CUdeviceptr m_ptr = 0;
  std::size_t m_bytes = 0;
  std::uint64_t m_generation = 0;
};

/// Enqueues setting `words` 32-bit words from device address `ptr` to `value` on `stream` (memory a caller
/// holds only the address of, e.g. a family's workspace in LaunchEnv).
void fill_u32(CUdeviceptr ptr, std::size_t words, std::uint32_t value, CUstream stream);

}  // namespace flashtune::cuda
