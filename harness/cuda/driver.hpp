// harness/cuda/driver.hpp: the CUDA driver API, loaded at run time with dlopen("libcuda.so.1") so that
// flashtune starts (and compiles, checks, queries) on a machine with no NVIDIA driver. Only this folder
// calls the driver, always through the table below.
#pragma once

#include <cuda.h>

#include <string>

namespace flashtune::cuda {

// Every driver entry point flashtune uses. A name that cuda.h maps to a versioned symbol (cuMemAlloc ->
// cuMemAlloc_v2) is resolved to that version, so the member's type matches the header's prototype.
#define FT_CUDA_DRIVER_FUNCTIONS(X)                                                                   \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                               \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceGetUuid)     \
  X(cuDeviceTotalMem)                                                                                 \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset)                 \
  X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)                          \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                                        \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute)                                                         \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync)      \
  X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD32Async)                    \
  X(cuLaunchKernel) X(cuLaunchKernelEx)                                                               \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)           \
  X(cuEventElapsedTime)                                                                               \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)                       \
  X(cuTensorMapEncodeTiled)

// Function pointers into libcuda.so.1. Call as `driver().cuMemAlloc(&ptr, bytes)` (the header's macros
// apply to the member names too). All members are non-null once driver() returned.
struct Driver {
#define FT_CUDA_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  FT_CUDA_DRIVER_FUNCTIONS(FT_CUDA_DRIVER_MEMBER)
#undef FT_CUDA_DRIVER_MEMBER
  int version = 0;  ///< cuDriverGetVersion: 1000 * major + 10 * minor (13000 = CUDA 13.0)
};

/// True when libcuda.so.1 loaded, every entry point resolved and cuInit(0) succeeded. Otherwise false
/// and `why` (if given) says why, e.g. "libcuda.so.1 not found: no NVIDIA driver on this machine".
/// Loads once per process; thread safe; never throws.
bool driver_available(std::string* why = nullptr) noexcept;

/// The loaded driver; throws core::Error with driver_available()'s reason when there is none.
const Driver& driver();

}  // namespace flashtune::cuda
