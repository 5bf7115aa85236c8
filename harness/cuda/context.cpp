// harness/cuda/context.cpp: primary context retain/release/reset.
#include "harness/cuda/context.hpp"

#include <atomic>
#include <utility>

#include "harness/cuda/check.hpp"
#include "harness/cuda/driver.hpp"

namespace flashtune::cuda {

namespace {
std::atomic<std::uint64_t> g_generation{0};
}

std::uint64_t context_generation() noexcept { return g_generation.load(std::memory_order_acquire); }

Context::Context(int ordinal) : m_ordinal(ordinal) {
  const Driver& d = driver();
  FT_CHECK_CU(d.cuDeviceGet(&m_device, ordinal));
  FT_CHECK_CU(d.cuDevicePrimaryCtxRetain(&m_ctx, m_device));
  if (const CUresult rc = d.cuCtxSetCurrent(m_ctx); rc != CUDA_SUCCESS) {
    release();
    throw CudaError(rc, "cuCtxSetCurrent(m_ctx)", __FILE__, __LINE__);
  }
}

Context::~Context() { release(); }

Context::Context(Context&& other) noexcept
    : m_ordinal(other.m_ordinal), m_device(other.m_device), m_ctx(std::exchange(other.m_ctx, nullptr)) {}

Context& Context::operator=(Context&& other) noexcept {
  if (this != &other) {
    release();
    m_ordinal = other.m_ordinal;
    m_device = other.m_device;
    m_ctx = std::exchange(other.m_ctx, nullptr);
  }
  return *this;
}

void Context::release() noexcept {
  if (!m_ctx) return;
  m_ctx = nullptr;
  try {
    driver().cuDevicePrimaryCtxRelease(m_device);  // result ignored: nothing to do about it here
  } catch (...) {
  }
}

void Context::make_current() const { FT_CHECK_CU(driver().cuCtxSetCurrent(m_ctx)); }

void Context::synchronize() const { FT_CHECK_CU(driver().cuCtxSynchronize()); }

void Context::reset() {
  const Driver& d = driver();
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  release();  // our reference; a poisoned context may report the sticky error again here: ignored
  FT_CHECK_CU(d.cuDevicePrimaryCtxReset(m_device));
  FT_CHECK_CU(d.cuDevicePrimaryCtxRetain(&m_ctx, m_device));
  FT_CHECK_CU(d.cuCtxSetCurrent(m_ctx));
}

std::size_t Context::free_bytes() const {
  std::size_t free = 0, total = 0;
  FT_CHECK_CU(driver().cuMemGetInfo(&free, &total));
  return free;
}

std::size_t Context::total_bytes() const {
  std::size_t free = 0, total = 0;
  FT_CHECK_CU(driver().cuMemGetInfo(&free, &total));
  return total;
}

}  // namespace flashtune::cuda
