// harness/cuda/check.cpp: CudaError's message and the list of sticky (context-poisoning) error codes.
#include "harness/cuda/check.hpp"

#include "harness/cuda/driver.hpp"

namespace flashtune::cuda {

namespace {
std::string make_message(CUresult code, const std::string& call, const char* file, int line) {
  return call + " failed: " + describe(code) + " at " + file + ":" + std::to_string(line);
}
}  // namespace

CudaError::CudaError(CUresult code, const std::string& call, const char* file, int line)
    : core::Error(make_message(code, call, file, line)), m_code(code) {}

bool CudaError::is_sticky_code(CUresult code) noexcept {
  // The driver documents these as leaving the context in an unusable state ("the process must be
  // terminated and relaunched" / "all existing device memory allocations are invalid").
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return true;
    default:
      return false;
  }
}

std::string describe(CUresult code) noexcept {
  try {
    std::string out;
    if (driver_available()) {
      const Driver& d = driver();
      const char* name = nullptr;
      const char* text = nullptr;
      if (d.cuGetErrorName(code, &name) == CUDA_SUCCESS && name) out = name;
      if (d.cuGetErrorString(code, &text) == CUDA_SUCCESS && text) out += std::string(" (") + text + ")";
    }
    if (out.empty()) out = "CUresult " + std::to_string(static_cast<int>(code));
    return out;
  } catch (...) {
    return "CUresult";
  }
}

}  // namespace flashtune::cuda
