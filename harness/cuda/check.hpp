// harness/cuda/check.hpp: the typed error of the CUDA driver API and the one macro every CUresult goes
// through. A sticky error (illegal address, ...) poisons the context, and with current drivers the whole
// process: the runner must stop measuring, record the trial as crashed and restart the worker process.
#pragma once

#include <cuda.h>

#include <string>

#include "harness/core/types.hpp"

namespace flashtune::cuda {

class CudaError : public core::Error {
 public:
  /// `call` is the source text of the failed call; `file`/`line` where it was made. The message names the
  /// call, the error's name and description (when the driver is loaded) and file:line.
  CudaError(CUresult code, const std::string& call, const char* file, int line);

  CUresult code() const noexcept { return m_code; }
  /// True when the error leaves the context unusable (every later call fails): illegal address or
  /// instruction, misaligned address, invalid PC, launch failure or timeout, device assert, ...
  bool is_sticky() const noexcept { return is_sticky_code(m_code); }
  static bool is_sticky_code(CUresult code) noexcept;

 private:
  CUresult m_code;
};

/// "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"; "CUresult 700" when the
/// driver cannot name it. Never throws.
std::string describe(CUresult code) noexcept;

}  // namespace flashtune::cuda

/// Throws CudaError(code, call text, file:line) unless `call` succeeds.
#define FT_CHECK_CU(call)                                                   \
  do {                                                                      \
    if (const CUresult ft_rc = (call); ft_rc != CUDA_SUCCESS)               \
      throw ::flashtune::cuda::CudaError(ft_rc, #call, __FILE__, __LINE__); \
  } while (false)
