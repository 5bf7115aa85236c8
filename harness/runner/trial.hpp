// harness/runner/trial.hpp: one trial, one config on one problem (DESIGN.md "A trial, step by step"):
// can_run -> compile -> resources -> (on a GPU) load, fresh zeroed workspaces, NaN-poisoned outputs, one
// launch checked against the references -> measure -> the result. Recording it and telling the strategy are
// the caller's. This is where a trial's exceptions become its TrialStatus (STYLE.md, Errors 3).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "harness/cuda/buffer.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/kernels/family.hpp"
#include "harness/measure/measure.hpp"
#include "harness/measure/watchdog.hpp"
#include "harness/runner/sources.hpp"

namespace flashtune::runner {

/// One problem's data: host inputs and references (computed once per problem and run) and the device buffers.
struct ProblemData {
  std::vector<kernels::BufferSpec> specs;   ///< the family's buffers, in order
  std::vector<kernels::HostTensor> inputs;  ///< inputs only, in spec order
  std::vector<kernels::HostTensor> ref64;   ///< outputs only, in spec order: the double-precision oracle
  std::vector<kernels::HostTensor> naive;   ///< outputs only: the naive result in the kernel's precision
  std::vector<cuda::DeviceBuffer> buffers;  ///< every spec, in order (upload_inputs)
  std::uint64_t seed = 0;                   ///< the inputs' random seed (recorded with each trial)
  std::int64_t device_bytes() const;        ///< [bytes] every buffer, in whole 32-bit words
  std::vector<std::uint64_t> addresses() const;  ///< every buffer's device address, in order
};

/// Fills d's specs and fresh random inputs (rounded to their dtype) from `seed`, and with_reference the f64 and
/// same-precision references. Throws core::Error when the two references check different elements.
void make_host_data(const kernels::KernelFamily& family, const core::Problem& p, std::uint64_t seed,
                    bool with_reference, ProblemData& d);
/// Allocates every buffer of d on the current context and uploads the inputs.
void upload_inputs(ProblemData& d);

/// Everything a run keeps on the GPU. A sticky error (illegal address) poisons it for the rest of the
/// process: measured on an H200 with driver 580, even a reset primary context fails to come back, so the
/// run stops and a fresh process resumes past the recorded crash.
struct GpuSession {
  cuda::DeviceInfo info;
  cuda::Context ctx;
  cuda::Stream stream;
  measure::L2Flusher flusher;
  /// The SM clock and power-cap state while samples run (NVML); nullptr without NVML (no clock recorded).
  std::unique_ptr<cuda::ClockProbe> clocks;

  explicit GpuSession(int device)
      : info(cuda::query_device(device)), ctx(device), stream(), flusher(info.l2_bytes), clocks(cuda::ClockProbe::open(info.uuid)) {}
};

/// Why compiled (or loaded) resources make a launch of shape `s` unrunnable on the device: registers x threads
/// past the block's registers, or static + dynamic shared memory past the opt-in limit; nullopt when they fit.
std::optional<std::string> resource_problem(const core::KernelResources& r, const kernels::LaunchShape& s,
                                            const core::DeviceLimits& d);

/// The trial: what runs, and on what device (compile-only: limits of the named arch).
struct TrialSpec {
  const kernels::KernelFamily& family;
  const core::Config& config;
  const core::Problem& problem;
  const core::DeviceLimits& limits;
};

/// What a trial runs on the GPU with. Without it the trial ends at `compiled`.
struct TrialGpu {
  GpuSession& session;
  ProblemData& data;  ///< the problem's buffers (uploaded) and, with validate.enabled, its references
  core::ValidateSettings validate;
  core::MeasureSettings measure;
  std::optional<measure::EarlyExit> early_exit;  ///< abandon a measurement past k x the best so far
  const measure::Watchdog* watchdog = nullptr;   ///< bounds every wait for a launch; null: none
  /// Called with the compile record before the first launch (what a hang must record with the trial).
  std::function<void(const core::CompileRecord&)> on_compiled;
};

/// Runs the trial. Its own failures are its status, never thrown: invalid_config (can_run), compile_failed,
/// resource_exceeded (ptxas report, and again as loaded), compiled (no GPU), launch_failed, crashed (a sticky
/// CUDA error: the GPU is unusable for this process), incorrect (Validation), ok (Timing, GB/s, TFLOP/s).
core::TrialResult run_trial(const TrialSpec& t, const jit::Compiler& compiler, TemplateSources& sources,
                            TrialGpu* gpu);

}  // namespace flashtune::runner
