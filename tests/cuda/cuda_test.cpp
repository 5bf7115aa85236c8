// tests/cuda/cuda_test.cpp (cpu): the driver layer behaves on any machine. Without a driver (CI) it says
// why and reports zero devices without throwing; with one, its answers are consistent and sane.
#include <gtest/gtest.h>

#include "harness/cuda/check.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"

using namespace flashtune;

TEST(CudaDriver, AvailabilityIsConsistentWithDeviceCount) {
  std::string why = "untouched";
  bool available = false;
  ASSERT_NO_THROW(available = cuda::driver_available(&why));
  int count = -1;
  ASSERT_NO_THROW(count = cuda::device_count());
  EXPECT_EQ(cuda::driver_available(), available) << "the answer must not change within a process";
  if (!available) {
    EXPECT_EQ(count, 0);
    EXPECT_FALSE(why.empty());
    EXPECT_TRUE(why.find("libcuda") != std::string::npos || why.find("cuInit") != std::string::npos) << why;
    EXPECT_THROW(cuda::driver(), core::Error);
    EXPECT_THROW(cuda::query_device(0), core::Error);
  } else {
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_GE(count, 0);
    EXPECT_GE(cuda::driver().version, 11000);
  }
}

TEST(CudaDriver, QueriesEveryDeviceSanelyWhenPresent) {
  const int count = cuda::device_count();
  if (count == 0) GTEST_SKIP() << "no CUDA device on this machine";
  for (int i = 0; i < count; ++i) {
    const cuda::DeviceInfo d = cuda::query_device(i);
    SCOPED_TRACE(d.name);
    EXPECT_EQ(d.ordinal, i);
    EXPECT_FALSE(d.name.empty());
    EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u);
    EXPECT_EQ(d.uuid.size(), 40u) << d.uuid;
    EXPECT_GE(d.sm_major, 7);
    EXPECT_EQ(d.arch, cuda::arch_for(d.sm_major, d.sm_minor));
    EXPECT_EQ(d.limits.arch, d.arch);
    EXPECT_GT(d.num_sms, 0);
    EXPECT_EQ(d.limits.num_sms, d.num_sms);
    EXPECT_GT(d.total_mem_bytes, std::int64_t(1) << 30);
    EXPECT_GT(d.l2_bytes, 0);
    EXPECT_EQ(d.limits.l2_bytes, d.l2_bytes);
    EXPECT_GE(d.driver_version, 11000);
    EXPECT_EQ(d.limits.max_threads_per_block, 1024);
    EXPECT_GE(d.limits.max_shared_per_block_optin, d.limits.max_shared_per_block);
    EXPECT_GE(d.limits.max_shared_per_sm, d.limits.max_shared_per_block_optin);
    EXPECT_GE(d.limits.max_regs_per_block, 32768);
    if (d.sm_major == 9 && d.sm_minor == 0) {
      EXPECT_EQ(d.arch, "sm_90a");
      EXPECT_GE(d.limits.max_shared_per_block_optin, 227 * 1024);
    }
  }
  EXPECT_THROW(cuda::query_device(count + 7), cuda::CudaError);
}

TEST(CudaDevice, ArchForPicksTheHopperSpecificTarget) {
  EXPECT_EQ(cuda::arch_for(9, 0), "sm_90a");
  EXPECT_EQ(cuda::arch_for(8, 0), "sm_80");
  EXPECT_EQ(cuda::arch_for(8, 9), "sm_89");
  EXPECT_EQ(cuda::arch_for(8, 6), "sm_86");
}

TEST(CudaError, CarriesCallCodeAndLocationAndKnowsStickyCodes) {
  const cuda::CudaError e(CUDA_ERROR_ILLEGAL_ADDRESS, "cuLaunchKernel(f, ...)", "kernel.cpp", 42);
  EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(e.is_sticky());
  const std::string what = e.what();
  EXPECT_NE(what.find("cuLaunchKernel(f, ...)"), std::string::npos) << what;
  EXPECT_NE(what.find("kernel.cpp:42"), std::string::npos) << what;
  if (cuda::driver_available())
    EXPECT_NE(what.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << what;
  else
    EXPECT_NE(what.find("700"), std::string::npos) << what;

  for (CUresult sticky : {CUDA_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_INVALID_PC,
                          CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_ASSERT,
                          CUDA_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_LAUNCH_TIMEOUT})
    EXPECT_TRUE(cuda::CudaError::is_sticky_code(sticky)) << sticky;
  for (CUresult benign : {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_FOUND,
                          CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, CUDA_ERROR_NO_BINARY_FOR_GPU})
    EXPECT_FALSE(cuda::CudaError::is_sticky_code(benign)) << benign;
}

TEST(CudaError, CheckMacroThrowsOnlyOnFailure) {
  EXPECT_NO_THROW(FT_CHECK_CU(CUDA_SUCCESS));
  try {
    FT_CHECK_CU(CUDA_ERROR_INVALID_VALUE);
    FAIL() << "expected CudaError";
  } catch (const cuda::CudaError& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
    EXPECT_FALSE(e.is_sticky());
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_INVALID_VALUE"), std::string::npos);  // the call text
    EXPECT_NE(std::string(e.what()).find("cuda_test.cpp"), std::string::npos);
  }
}
