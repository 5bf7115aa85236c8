// harness/cuda/device.hpp: what flashtune needs to know about a GPU (name, UUID, NVRTC target, limits),
// read from the driver. device_count() is the one question that is safe to ask on a machine without one.
#pragma once

#include <cstdint>
#include <string>

#include "harness/core/types.hpp"

namespace flashtune::cuda {

/// Number of CUDA devices; 0 when there is no driver or no device. Never throws.
int device_count() noexcept;

struct DeviceInfo {
  int ordinal = 0;
  std::string name;              ///< "NVIDIA H200"
  std::string uuid;              ///< "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string arch;              ///< NVRTC target: "sm_90a" on 9.0 (Hopper-specific), else "sm_<major><minor>"
  int sm_major = 0, sm_minor = 0;
  int num_sms = 0;
  std::int64_t total_mem_bytes = 0;  ///< [bytes]
  std::int64_t l2_bytes = 0;         ///< [bytes]
  int clock_mhz = 0;                 ///< [MHz] nominal SM clock; 0 when the driver does not report it
  int driver_version = 0;            ///< 1000 * major + 10 * minor
  core::DeviceLimits limits;         ///< from the device's attributes, arch included
};

/// The NVRTC target for a compute capability: 9.0 -> "sm_90a", 8.0 -> "sm_80".
std::string arch_for(int sm_major, int sm_minor);

/// Reads device `ordinal`'s attributes. Throws core::Error without a driver, CudaError on a bad ordinal.
DeviceInfo query_device(int ordinal);

}  // namespace flashtune::cuda
