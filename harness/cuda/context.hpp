// harness/cuda/context.hpp: the primary context of one GPU, retained for the life of a Context object and
// made current on the calling thread.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace flashtune::cuda {

class Context {
 public:
  /// Retains device `ordinal`'s primary context and makes it current on this thread. Throws core::Error
  /// without a driver, CudaError otherwise.
  explicit Context(int ordinal = 0);
  ~Context();  ///< releases the primary context; never throws
  Context(Context&& other) noexcept;
  Context& operator=(Context&& other) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void make_current() const;  ///< binds the context to the calling thread
  /// Waits for all work in the context; throws CudaError on a failed kernel (sticky errors surface here).
  void synchronize() const;
  /// Destroys the context's allocations, modules and streams and starts a fresh one (made current).
  /// Every Module, DeviceBuffer, Stream and Event made before is dead: their destructors then free nothing.
  /// It does NOT recover from a sticky error: on driver 580.159.04 (H200) the driver then refuses every
  /// context for the rest of the process, and reset() throws that sticky CudaError (the Context is left
  /// empty). After a sticky error, restart the worker process (DESIGN.md, Robustness).
  void reset();

  CUcontext get() const noexcept { return m_ctx; }
  CUdevice device() const noexcept { return m_device; }
  int ordinal() const noexcept { return m_ordinal; }
  std::size_t free_bytes() const;   ///< [bytes] free device memory (cuMemGetInfo)
  std::size_t total_bytes() const;  ///< [bytes] device memory

 private:
  void release() noexcept;
  int m_ordinal = -1;
  CUdevice m_device = 0;
  CUcontext m_ctx = nullptr;
};

/// Incremented by every Context::reset(). Objects remember the value they were made under and skip their
/// free/destroy when it changed (the handle died with the old context and might alias a new one).
std::uint64_t context_generation() noexcept;

}  // namespace flashtune::cuda
