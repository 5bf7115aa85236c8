// harness/cuda/device.cpp: device queries through the driver table.
#include "harness/cuda/device.hpp"

#include <cstdio>

#include "harness/cuda/check.hpp"
#include "harness/cuda/driver.hpp"

namespace flashtune::cuda {

int device_count() noexcept {
  if (!driver_available()) return 0;
  try {
    int n = 0;
    if (driver().cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
    return n;
  } catch (...) {
    return 0;
  }
}

std::string arch_for(int sm_major, int sm_minor) {
  std::string arch = "sm_" + std::to_string(sm_major) + std::to_string(sm_minor);
  if (sm_major == 9 && sm_minor == 0) arch += "a";  // wgmma and TMA need the arch-specific target
  return arch;
}

namespace {
int attribute(CUdevice dev, CUdevice_attribute attr, const char* what) {
  int value = 0;
  if (const CUresult rc = driver().cuDeviceGetAttribute(&value, attr, dev); rc != CUDA_SUCCESS)
    throw CudaError(rc, std::string("cuDeviceGetAttribute(") + what + ")", __FILE__, __LINE__);
  return value;
}

std::string format_uuid(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}
}  // namespace

DeviceInfo query_device(int ordinal) {
  const Driver& d = driver();
  CUdevice dev = 0;
  FT_CHECK_CU(d.cuDeviceGet(&dev, ordinal));

  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  FT_CHECK_CU(d.cuDeviceGetName(name, sizeof name - 1, dev));
  info.name = name;
  CUuuid uuid{};
  FT_CHECK_CU(d.cuDeviceGetUuid(&uuid, dev));
  info.uuid = format_uuid(uuid);
  std::size_t total = 0;
  FT_CHECK_CU(d.cuDeviceTotalMem(&total, dev));
  info.total_mem_bytes = static_cast<std::int64_t>(total);
  info.driver_version = d.version;

  info.sm_major = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability major");
  info.sm_minor = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability minor");
  info.arch = arch_for(info.sm_major, info.sm_minor);
  info.num_sms = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count");
  info.l2_bytes = attribute(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size");
  int clock_khz = 0;  // deprecated attribute: report 0 rather than fail when a driver drops it
  if (d.cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev) == CUDA_SUCCESS)
    info.clock_mhz = clock_khz / 1000;

  core::DeviceLimits& l = info.limits;
  l.arch = info.arch;
  l.sm_major = info.sm_major;
  l.sm_minor = info.sm_minor;
  l.num_sms = info.num_sms;
  l.max_threads_per_block = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block");
  l.max_shared_per_block =
      attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "max shared memory per block");
  l.max_shared_per_block_optin = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                           "max shared memory per block (opt-in)");
  l.max_shared_per_sm = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                                  "max shared memory per multiprocessor");
  l.max_regs_per_block = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, "max registers per block");
  l.max_regs_per_thread = 255;  // every architecture since sm_35; not a driver attribute
  l.l2_bytes = info.l2_bytes;
  return info;
}

}  // namespace flashtune::cuda
