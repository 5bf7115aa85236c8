// tests/cuda/cuda_gpu_test.cpp (gpu): the driver layer, NVRTC and measurement on a real GPU: copies,
// launches of NVRTC-compiled kernels (with > 48 KiB dynamic shared memory), events, measure(), copy
// bandwidth, and a planted illegal address that must surface as a sticky CudaError (last: it poisons the
// process; the test then checks that a fresh process works). Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/module.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/measure/measure.hpp"

using namespace flashtune;

namespace {

const char* kTestKernels = R"(
template <int kAdd>
__global__ void iota_plus(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * i + kAdd;
}

__global__ void reverse_through_smem(const float* in, float* out, int n) {
  extern __shared__ float tile[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i];
}

__global__ void spin(long long cycles, int* done) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0) done[blockIdx.x] = 1;
}

__global__ void write_far(int* p, long long offset) { p[offset] = 1; }
)";

struct Kernel {
  cuda::Module module;
  CUfunction function;
  core::CompileRecord record;
};

class CudaGpu : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    m_info = cuda::query_device(0);
    m_ctx.emplace(0);
  }

  Kernel load(const std::string& name_expression) const {
    jit::CompileRequest req;
    req.source = kTestKernels;
    req.source_name = "cuda_gpu_test_kernels.cu";
    req.name_expression = name_expression;
    req.arch = m_info.arch;
    auto out = jit::Compiler(std::nullopt).compile(req);
    if (!out.record.ok) throw std::runtime_error("compile of " + name_expression + " failed:\n" + out.record.log);
    cuda::Module module(out.cubin);
    const CUfunction f = module.function(out.record.lowered_name);
    return Kernel{std::move(module), f, out.record};
  }

  void launch_spin(const Kernel& k, CUstream stream, long long cycles, cuda::DeviceBuffer& done) const {
    CUdeviceptr p = done.ptr();
    void* args[] = {&cycles, &p};
    cuda::launch(k.function, {1, 1, 1}, {32, 1, 1}, 0, stream, args);
  }

  cuda::DeviceInfo m_info;
  std::optional<cuda::Context> m_ctx;
};

// Exactly n samples after `warmup` launches: no noise stop (target 0), a wall-time budget far above the need.
core::MeasureSettings fixed_samples(int n, int warmup) {
  core::MeasureSettings s;
  s.warmup = warmup;
  s.min_samples = s.max_samples = n;
  s.noise_target = 0;
  s.max_time_s = 30;
  return s;
}

}  // namespace

TEST_F(CudaGpu, BufferRoundTripsAndFills) {
  const std::size_t n = 1 << 20;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = 0.5f * static_cast<float>(i) - 7.0f;
  cuda::DeviceBuffer buf(n * sizeof(float));
  EXPECT_EQ(buf.size(), n * sizeof(float));
  EXPECT_NE(buf.ptr(), 0u);
  buf.upload(host.data(), n * sizeof(float));
  std::vector<float> back(n, 0.0f);
  buf.download(back.data(), n * sizeof(float));
  EXPECT_EQ(back, host);

  cuda::Stream stream;
  buf.fill_u32(0x7fc00000u, stream.get());  // quiet NaN
  buf.download(back.data(), n * sizeof(float), stream.get());
  for (std::size_t i = 0; i < n; i += 4099) ASSERT_TRUE(std::isnan(back[i])) << i;
  buf.fill_bytes(0, stream.get());
  buf.download(back.data(), n * sizeof(float), stream.get());
  for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(back[i], 0.0f) << i;

  float partial[2] = {1.0f, 2.0f};
  buf.upload(partial, sizeof partial, nullptr, 8 * sizeof(float));
  float read[2] = {};
  buf.download(read, sizeof read, nullptr, 8 * sizeof(float));
  EXPECT_EQ(read[0], 1.0f);
  EXPECT_EQ(read[1], 2.0f);
  EXPECT_THROW(buf.upload(host.data(), n * sizeof(float) + 4), core::Error);
  EXPECT_THROW(buf.download(back.data(), 8, nullptr, n * sizeof(float) - 4), core::Error);

  cuda::DeviceBuffer moved = std::move(buf);
  EXPECT_EQ(buf.ptr(), 0u);
  EXPECT_EQ(moved.size(), n * sizeof(float));
  EXPECT_GT(m_ctx->total_bytes(), m_ctx->free_bytes());
}

TEST_F(CudaGpu, CompiledKernelWritesExpectedValues) {
  const Kernel k = load("iota_plus<7>");
  int n = 100000;
  cuda::DeviceBuffer out(n * sizeof(int));
  out.fill_bytes(0xff);
  cuda::Stream stream;
  CUdeviceptr p = out.ptr();
  void* args[] = {&p, &n};
  const unsigned block = 128;
  cuda::launch(k.function, {(n + block - 1) / block, 1, 1}, {block, 1, 1}, 0, stream.get(), args);
  std::vector<int> host(n);
  out.download(host.data(), n * sizeof(int), stream.get());
  for (int i = 0; i < n; ++i) ASSERT_EQ(host[i], 2 * i + 7) << "at " << i;

  const core::KernelResources r = cuda::function_resources(k.function);
  EXPECT_GE(r.registers, 1);
  EXPECT_EQ(r.registers, k.record.resources.registers) << "driver and ptxas disagree on registers";
  EXPECT_EQ(r.shared_static_bytes, 0);
  EXPECT_THROW(k.module.function("_Z13no_such_kernelv"), cuda::CudaError);
}

TEST_F(CudaGpu, LaunchOptsIntoMoreThan48KiBOfDynamicSharedMemory) {
  const Kernel k = load("reverse_through_smem");
  int n = 24 * 1024;  // 96 KiB of floats
  const unsigned smem = static_cast<unsigned>(n * sizeof(float));
  ASSERT_LE(static_cast<int>(smem), m_info.limits.max_shared_per_block_optin);
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  cuda::DeviceBuffer in(smem), out(smem);
  in.upload(host.data(), smem);
  cuda::Stream stream;
  CUdeviceptr pin = in.ptr(), pout = out.ptr();
  void* args[] = {&pin, &pout, &n};
  cuda::launch(k.function, {1, 1, 1}, {256, 1, 1}, smem, stream.get(), args);
  std::vector<float> back(n);
  out.download(back.data(), smem, stream.get());
  for (int i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<float>(n - 1 - i)) << "at " << i;
}

TEST_F(CudaGpu, EventsTimeASpinningKernel) {
  const Kernel k = load("spin");
  cuda::DeviceBuffer done(sizeof(int));
  done.fill_bytes(0);
  cuda::Stream stream;
  cuda::Event start, stop;
  start.record(stream.get());
  launch_spin(k, stream.get(), 4'000'000, done);  // ~2 ms at 2 GHz
  stop.record(stream.get());
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  const float ms = cuda::Event::elapsed_ms(start, stop);
  EXPECT_GT(ms, 0.5f);
  EXPECT_LT(ms, 1000.0f);
  int flag = 0;
  done.download(&flag, sizeof flag, stream.get());
  EXPECT_EQ(flag, 1);
}

TEST_F(CudaGpu, MeasureCollectsSamplesAndHonoursItsStoppingRules) {
  const Kernel k = load("spin");
  cuda::DeviceBuffer done(sizeof(int));
  cuda::Stream stream;
  const auto launch = [&](CUstream s) { launch_spin(k, s, 20'000, done); };  // ~10 us
  measure::L2Flusher flusher(m_info.l2_bytes);
  EXPECT_EQ(flusher.buffer_bytes(), static_cast<std::size_t>(2 * m_info.l2_bytes));

  core::MeasureSettings s;
  s.warmup = 2;
  s.min_samples = 10;
  s.max_samples = 40;
  s.noise_target = 0;  // never met: runs to max_samples
  s.max_time_s = 30;
  const core::Timing cold = measure::measure(launch, stream, s, &flusher);
  EXPECT_EQ(cold.samples_ms.size(), 40u);
  EXPECT_TRUE(cold.cold);
  EXPECT_FALSE(cold.converged);
  EXPECT_GT(cold.median_ms, 0.002);
  EXPECT_LE(cold.min_ms, cold.median_ms);
  EXPECT_GE(cold.max_ms, cold.median_ms);
  for (double v : cold.samples_ms) EXPECT_GT(v, 0);

  s.noise_target = 1.0;  // met at once: stops as soon as min_samples and min_time_s allow
  s.min_time_s = 0;
  const core::Timing hot = measure::measure(launch, stream, s, nullptr);
  EXPECT_FALSE(hot.cold);
  EXPECT_TRUE(hot.converged);
  EXPECT_GE(hot.samples_ms.size(), 10u);
  EXPECT_LE(hot.samples_ms.size(), 40u);
  std::printf("spin kernel: cold median %.4f ms (IQR %.4f), hot median %.4f ms (IQR %.4f)\n", cold.median_ms,
              cold.iqr_ms, hot.median_ms, hot.iqr_ms);

  s.noise_target = 0;
  const core::Timing abandoned = measure::measure(launch, stream, s, &flusher, measure::EarlyExit{1e-6, 1.5});
  EXPECT_TRUE(abandoned.stopped_early);
  EXPECT_FALSE(abandoned.converged);
  EXPECT_GE(abandoned.samples_ms.size(), 5u);
  EXPECT_LT(abandoned.samples_ms.size(), 40u);

  // warmup_s: past the `warmup` launches, one timed launch and as many more as make up warmup_s of kernel time.
  int launches = 0;
  const auto counted = [&](CUstream st) {
    ++launches;
    launch(st);
  };
  core::MeasureSettings w;
  w.warmup = 0;
  w.warmup_s = 0.02;  // [s]: ~2000 launches of the ~10 us kernel
  w.min_samples = w.max_samples = 5;
  w.noise_target = 0;
  w.max_time_s = 30;
  const core::Timing warmed = measure::measure(counted, stream, w, nullptr);
  ASSERT_EQ(warmed.samples_ms.size(), 5u);
  const double expected = w.warmup_s * 1e3 / warmed.median_ms;  // warm-up launches the samples' time implies
  const int warm = launches - 5;
  std::printf("warmup_s %.3f s: %d warm-up launches (%.0f expected at the samples' median %.4f ms)\n", w.warmup_s, warm,
              expected, warmed.median_ms);
  EXPECT_GE(warm, int(0.25 * expected));  // the first, timed launch may be slower (cold) than the samples
  EXPECT_LE(warm, int(4 * expected) + 2);
  launches = 0;
  w.warmup_s = 0;
  measure::measure(counted, stream, w, nullptr);
  EXPECT_EQ(launches, 5);  // warmup 0, warmup_s 0: the samples only
}

// NVML knows the device the driver gives (by UUID), its SM clock reads in a plausible range, and measure() records
// the clock its samples ran at when given the probe (issue 21, session 34: trials record their clock).
TEST_F(CudaGpu, ClockProbeReadsTheSmClockWhileSamplesRun) {
  std::string why;
  const auto probe = cuda::ClockProbe::open(m_info.uuid, &why);
  ASSERT_TRUE(probe) << why;
  const auto p = probe->poll();
  ASSERT_TRUE(p);
  EXPECT_GT(p->sm_mhz, 100u);
  EXPECT_LT(p->sm_mhz, 5000u);
  const Kernel k = load("spin");
  cuda::DeviceBuffer done(sizeof(int));
  cuda::Stream stream;
  const core::MeasureSettings s = fixed_samples(20, 1);
  const core::Timing t = measure::measure([&](CUstream st) { launch_spin(k, st, 4'000'000, done); }, stream, s, nullptr,
                                          std::nullopt, nullptr, {}, probe.get());  // ~40 ms of samples
  ASSERT_TRUE(t.sm_clock_mhz && t.power_capped);
  EXPECT_GT(*t.sm_clock_mhz, 100.0);
  EXPECT_LT(*t.sm_clock_mhz, 5000.0);
  EXPECT_GE(*t.power_capped, 0.0);
  EXPECT_LE(*t.power_capped, 1.0);
  std::printf("spin kernel: SM clock %.0f MHz while sampled, power cap active in %.0f %% of the polls\n", *t.sm_clock_mhz,
              100 * *t.power_capped);
  const core::Timing without = measure::measure([&](CUstream st) { launch_spin(k, st, 20'000, done); }, stream, s, nullptr);
  EXPECT_FALSE(without.sm_clock_mhz);  // no probe, no clock
}

// Samples run back-to-back: batch j + 1 is enqueued before the host waits for batch j, so host time spent before each
// launch (a Python library enqueueing its kernels: docs/NOTES.md session 38) is hidden behind the previous sample
// as long as it is shorter than the kernel. A ~2 ms kernel behind 1 ms of host time per launch must time as the
// kernel alone (the loop that synchronized after every batch of one timed it ~1 ms longer).
TEST_F(CudaGpu, MeasureHidesHostTimeShorterThanTheKernel) {
  const Kernel k = load("spin");
  cuda::DeviceBuffer done(sizeof(int));
  cuda::Stream stream;
  const core::MeasureSettings s = fixed_samples(15, 2);
  measure::L2Flusher flusher(m_info.l2_bytes);
  constexpr long long kCycles = 4'000'000;  // ~2 ms at 2 GHz
  const core::Timing plain = measure::measure([&](CUstream st) { launch_spin(k, st, kCycles, done); }, stream, s, &flusher);
  const core::Timing slow_host = measure::measure(
      [&](CUstream st) {
        std::this_thread::sleep_for(std::chrono::microseconds(1000));
        launch_spin(k, st, kCycles, done);
      },
      stream, s, &flusher);
  std::printf("spin kernel: median %.4f ms, with 1 ms of host time per launch %.4f ms\n", plain.median_ms, slow_host.median_ms);
  ASSERT_GT(plain.median_ms, 1.2);  // the host time must be shorter than the kernel for the test to mean anything
  EXPECT_LT(slow_host.median_ms, 1.1 * plain.median_ms);
  EXPECT_EQ(slow_host.samples_ms.size(), 15u);
}

TEST_F(CudaGpu, CopyBandwidthIsPositiveAndPlausible) {
  cuda::Stream stream;
  const double gbps = measure::copy_bandwidth_gbps(std::int64_t(256) << 20, stream, 10);
  std::printf("device-to-device copy of 256 MiB: %.0f GB/s (read + write)\n", gbps);
  EXPECT_GT(gbps, 50.0);
  EXPECT_LT(gbps, 20000.0);
  EXPECT_THROW(measure::copy_bandwidth_gbps(0, stream, 10), core::Error);
}

// Last on purpose: the illegal address poisons the context (with current drivers, the whole process).
class CudaGpuStickyError : public CudaGpu {};

TEST_F(CudaGpuStickyError, OutOfBoundsWriteIsStickyAndAFreshProcessRecovers) {
  {
    const Kernel k = load("write_far");
    cuda::DeviceBuffer buf(1024);
    cuda::Stream stream;
    CUdeviceptr p = buf.ptr();
    long long offset = 1ll << 38;  // 1 TiB past the allocation
    void* args[] = {&p, &offset};
    try {
      cuda::launch(k.function, {1, 1, 1}, {1, 1, 1}, 0, stream.get(), args);
      stream.synchronize();
      FAIL() << "the out-of-bounds write was not reported";
    } catch (const cuda::CudaError& e) {
      EXPECT_TRUE(e.is_sticky()) << e.what();
      std::printf("planted fault reported as: %s\n", e.what());
    }
    try {
      m_ctx->synchronize();
      FAIL() << "a poisoned context should keep failing";
    } catch (const cuda::CudaError& e) {
      EXPECT_TRUE(e.is_sticky()) << e.what();
    }
    // reset() either brings a working context back or reports, as a sticky error, that this process is
    // done with the GPU (what driver 580 does). Either way no resource made before may be touched again.
    bool reset_worked = false;
    try {
      m_ctx->reset();
      reset_worked = true;
    } catch (const cuda::CudaError& e) {
      EXPECT_TRUE(e.is_sticky()) << e.what();
      std::printf("reset after the fault: %s\n", e.what());
    }
    if (reset_worked) {
      cuda::DeviceBuffer fresh(64);
      int v = 42, back = 0;
      fresh.upload(&v, sizeof v);
      fresh.download(&back, sizeof back);
      EXPECT_EQ(back, 42);
    }
  }  // the kernel's module, buffer and stream died with the old context: their destructors free nothing

  // The recovery the runner relies on: a new process gets a healthy GPU.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "'" + self + "' --gtest_filter=CudaGpu.CompiledKernelWritesExpectedValues > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}
