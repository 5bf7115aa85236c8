// harness/cuda/clocks.cpp: NVML through dlopen (nvmlInit_v2, nvmlDeviceGetHandleByUUID, nvmlDeviceGetClockInfo,
// nvmlDeviceGetCurrentClocksEventReasons or, on older drivers, nvmlDeviceGetCurrentClocksThrottleReasons: the
// same signature and bits) and the polling thread.
#include "harness/cuda/clocks.hpp"

#include <dlfcn.h>

#include <chrono>

namespace flashtune::cuda {

namespace {
using NvmlReturn = int;  // nvmlReturn_t: 0 = NVML_SUCCESS
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;  // nvmlClockType_t NVML_CLOCK_SM
}  // namespace

std::optional<ClockStats> summarize_polls(const std::vector<ClockPoll>& polls) {
  if (polls.empty()) return std::nullopt;
  double mhz = 0;
  int capped = 0;
  for (const ClockPoll& p : polls) {
    mhz += p.sm_mhz;
    capped += (p.reasons & kPowerCapReasons) != 0;
  }
  const double n = double(polls.size());
  return ClockStats{mhz / n, capped / n, int(polls.size())};
}

struct ClockProbe::Impl {
  void* lib = nullptr;
  NvmlDevice device = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  ~Impl() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

ClockProbe::ClockProbe(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
ClockProbe::~ClockProbe() = default;

std::unique_ptr<ClockProbe> ClockProbe::open(const std::string& gpu_uuid, std::string* why) {
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return std::unique_ptr<ClockProbe>();
  };
  auto impl = std::make_unique<Impl>();
  impl->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!impl->lib) return fail("libnvidia-ml.so.1 not found: no SM clock recorded");
  auto init = reinterpret_cast<NvmlReturn (*)()>(dlsym(impl->lib, "nvmlInit_v2"));
  auto by_uuid = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(dlsym(impl->lib, "nvmlDeviceGetHandleByUUID"));
  impl->clock_info = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned*)>(dlsym(impl->lib, "nvmlDeviceGetClockInfo"));
  impl->reasons = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
      dlsym(impl->lib, "nvmlDeviceGetCurrentClocksEventReasons"));
  if (!impl->reasons)
    impl->reasons = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
        dlsym(impl->lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
  auto shutdown = reinterpret_cast<NvmlReturn (*)()>(dlsym(impl->lib, "nvmlShutdown"));
  if (!init || !by_uuid || !impl->clock_info || !impl->reasons || !shutdown)
    return fail("libnvidia-ml.so.1 lacks the clock entry points: no SM clock recorded");
  if (init() != kNvmlSuccess) return fail("nvmlInit failed: no SM clock recorded");
  impl->shutdown = shutdown;  // nvmlShutdown balances the init from here on
  if (by_uuid(gpu_uuid.c_str(), &impl->device) != kNvmlSuccess)
    return fail("NVML does not know GPU " + gpu_uuid + ": no SM clock recorded");
  return std::unique_ptr<ClockProbe>(new ClockProbe(std::move(impl)));
}

std::optional<ClockPoll> ClockProbe::poll() const {
  ClockPoll p;
  unsigned long long reasons = 0;
  if (m_impl->clock_info(m_impl->device, kNvmlClockSm, &p.sm_mhz) != kNvmlSuccess) return std::nullopt;
  if (m_impl->reasons(m_impl->device, &reasons) != kNvmlSuccess) return std::nullopt;
  p.reasons = reasons;
  return p;
}

ClockSampler::ClockSampler(const ClockProbe& probe, int period_us)
    : m_thread([this, &probe, period_us] {
        while (!m_stop.load(std::memory_order_relaxed)) {
          if (auto p = probe.poll()) m_polls.push_back(*p);
          std::this_thread::sleep_for(std::chrono::microseconds(period_us));
        }
      }) {}

ClockSampler::~ClockSampler() { stop(); }

std::optional<ClockStats> ClockSampler::stop() {
  m_stop.store(true);
  if (m_thread.joinable()) m_thread.join();
  return summarize_polls(m_polls);
}

}  // namespace flashtune::cuda
