// harness/runner/trial.cpp: one trial (trial.hpp). Outputs are poisoned with NaN before the checked launch, the
// trial's second (the first leaves the workspace as it leaves it for any next launch), so an element the kernel never
// writes, or one that needs a workspace zeroed only before the first launch, fails the check.
#include "harness/runner/trial.hpp"

#include <algorithm>

#include "harness/cuda/check.hpp"
#include "harness/cuda/module.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/launch.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"

namespace flashtune::runner {
namespace {

using core::TrialStatus;

// NaN bit patterns for poisoning, as 32-bit words (two 16-bit NaNs for the half types).
std::uint32_t nan_pattern(core::DType d) {
  switch (d) {
    case core::DType::f32: return 0x7FC00000u;
    case core::DType::f16: return 0x7E007E00u;
    case core::DType::bf16: return 0x7FC07FC0u;
  }
  return 0xFFFFFFFFu;
}

std::size_t buffer_bytes(const kernels::BufferSpec& b) {
  const std::size_t raw = std::size_t(b.elements) * core::dtype_size(b.dtype);
  return (raw + 3) / 4 * 4;  // whole 32-bit words, so poisoning covers every element
}

// Every output of the checked launch against its references (the pass rule, reference/compare.hpp); the result
// is the first failing output's, else the one with the largest error.
core::Validation check_outputs(const TrialSpec& t, TrialGpu& g, CUstream stream) {
  ProblemData& data = g.data;
  core::Validation worst;
  std::size_t out = 0;
  const double atol = g.validate.atol >= 0 ? g.validate.atol : t.family.default_atol(t.problem);
  for (std::size_t i = 0; i < data.specs.size(); ++i) {
    if (data.specs[i].role != kernels::BufferRole::output) continue;
    const auto& b = data.specs[i];
    std::vector<unsigned char> bytes(std::size_t(b.elements) * core::dtype_size(b.dtype));
    data.buffers[i].download(bytes.data(), bytes.size(), stream);
    const auto got = reference::unpack(b.dtype, bytes.data(), std::size_t(b.elements));
    // At least one ulp of a 16-bit output at the largest reference magnitude (reference/compare.hpp).
    const double out_atol = reference::storage_atol(b.dtype, data.ref64[out].values, atol);
    const auto v = reference::compare(got, data.ref64[out].values, data.naive[out].values, out_atol, data.ref64[out].checked);
    ++out;
    if (!worst.checked || !v.passed || v.max_abs_err > worst.max_abs_err) {
      const bool keep_failed = worst.checked && !worst.passed && v.passed;
      if (!keep_failed) worst = v;
    }
    worst.checked = true;
  }
  return worst;
}

// Load, check the loaded resources, validate, measure: fills r. CUDA errors propagate (run_trial sorts them).
void launch_and_measure(const TrialSpec& t, const kernels::LaunchShape& shape, const jit::CompileOutput& compiled,
                        TrialGpu& g, core::TrialResult& r) {
  cuda::Module module(compiled.cubin);
  CUfunction fn = module.function(compiled.record.lowered_name);
  if (auto why = resource_problem(cuda::function_resources(fn), shape, t.limits)) {
    r.status = TrialStatus::resource_exceeded, r.reason = *why;
    return;
  }
  ProblemData& data = g.data;
  r.device_bytes = data.device_bytes();
  CUstream stream = g.session.stream.get();
  kernels::PackedArgs args;
  const kernels::BoundLaunch launch =
      kernels::bind_launch(t.family, t.config, t.problem, shape, fn, data.addresses(), args);
  // Workspaces start every trial zeroed (untimed); a kernel that keeps state there between its launches (a
  // scheduler's counters) leaves it as it found it.
  for (std::size_t i = 0; i < data.specs.size(); ++i)
    if (data.specs[i].role == kernels::BufferRole::workspace) data.buffers[i].fill_bytes(0, stream);

  if (g.validate.enabled) {
    const auto launch_once = [&] {
      if (launch.prepare) launch.prepare(stream);
      launch.run(stream);
    };
    launch_once();  // unchecked: it leaves the workspace as any launch leaves it for the next (file comment)
    for (std::size_t i = 0; i < data.specs.size(); ++i)
      if (data.specs[i].role == kernels::BufferRole::output) data.buffers[i].fill_u32(nan_pattern(data.specs[i].dtype), stream);
    launch_once();
    const measure::Watchdog unbounded(0);
    (g.watchdog ? *g.watchdog : unbounded).wait([&] { return g.session.stream.query(); }, 1, "the validation launch");
    const core::Validation worst = check_outputs(t, g, stream);
    r.validation = worst;
    if (!worst.passed) {
      r.status = TrialStatus::incorrect;
      r.reason = "max abs error " + std::to_string(worst.max_abs_err) + " > tolerance " +
                 std::to_string(worst.tolerance) + ", " + std::to_string(worst.nan_count) + " NaN/Inf";
      return;
    }
  }
  r.timing = measure::measure(launch.run, g.session.stream, g.measure, g.measure.cold ? &g.session.flusher : nullptr,
                              g.early_exit, g.watchdog, launch.prepare, g.session.clocks.get());
  const double seconds = r.timing->median_ms * 1e-3;
  r.gbps = t.family.bytes_moved(t.problem) / seconds * 1e-9;
  r.tflops = t.family.flops(t.problem) / seconds * 1e-12;
  r.status = TrialStatus::ok;
}

}  // namespace

std::int64_t ProblemData::device_bytes() const {
  std::int64_t n = 0;
  for (const auto& b : specs) n += std::int64_t(buffer_bytes(b));
  return n;
}

std::vector<std::uint64_t> ProblemData::addresses() const {
  std::vector<std::uint64_t> out;
  for (const auto& b : buffers) out.push_back(std::uint64_t(b.ptr()));
  return out;
}

void make_host_data(const kernels::KernelFamily& family, const core::Problem& p, std::uint64_t seed,
                    bool with_reference, ProblemData& d) {
  d.specs = family.buffers(p);
  d.seed = seed;
  d.inputs.clear(), d.ref64.clear(), d.naive.clear();
  std::uint64_t stream = 0;
  for (const auto& b : d.specs) {
    if (b.role == kernels::BufferRole::input) {
      kernels::HostTensor t{b.dtype, reference::uniform(std::size_t(b.elements), b.lo, b.hi, seed + 7919 * ++stream), {}};
      reference::round_all(b.dtype, t.values);
      d.inputs.push_back(std::move(t));
    } else if (b.role == kernels::BufferRole::output) {
      d.ref64.push_back({b.dtype, std::vector<double>(std::size_t(b.elements)), {}});
    }
  }
  if (!with_reference) return;
  d.naive = d.ref64;
  family.reference(p, d.inputs, d.ref64, kernels::RefPrecision::f64);
  family.reference(p, d.inputs, d.naive, kernels::RefPrecision::same);
  for (std::size_t i = 0; i < d.ref64.size(); ++i)
    if (d.ref64[i].checked != d.naive[i].checked)
      throw core::Error(family.name() + ".reference: the f64 and same-precision references checked different elements");
}

void upload_inputs(ProblemData& d) {
  d.buffers.clear();
  std::size_t in = 0;
  for (const auto& b : d.specs) {
    d.buffers.emplace_back(buffer_bytes(b));
    if (b.role == kernels::BufferRole::input) {
      const auto bytes = reference::pack(b.dtype, d.inputs[in++].values);
      d.buffers.back().upload(bytes.data(), bytes.size());
    }
  }
}

std::optional<std::string> resource_problem(const core::KernelResources& r, const kernels::LaunchShape& s,
                                            const core::DeviceLimits& d) {
  const std::int64_t threads = s.threads_per_block();
  if (r.registers > 0 && r.registers * threads > d.max_regs_per_block)
    return std::to_string(r.registers) + " registers x " + std::to_string(threads) + " threads > " +
           std::to_string(d.max_regs_per_block) + " registers per block";
  const std::int64_t smem = std::max(r.shared_static_bytes, 0) + std::int64_t(s.dynamic_smem_bytes);
  if (smem > d.max_shared_per_block_optin)
    return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B per block";
  return std::nullopt;
}

core::TrialResult run_trial(const TrialSpec& t, const jit::Compiler& compiler, TemplateSources& sources, TrialGpu* gpu) {
  core::TrialResult r;
  if (auto why = t.family.can_run(t.config, t.problem, t.limits)) {
    r.status = TrialStatus::invalid_config, r.reason = *why;
    return r;
  }
  const auto shape = t.family.launch_shape(t.config, t.problem, t.limits);
  jit::CompileOutput compiled;
  try {
    compiled = compiler.compile(sources.request(t.family, t.config, t.problem, t.limits.arch));
  } catch (const std::exception& e) {
    r.status = TrialStatus::compile_failed, r.reason = e.what();
    return r;
  }
  r.compile = compiled.record;
  if (!compiled.record.ok) {
    r.status = TrialStatus::compile_failed, r.reason = jit::first_error_line(compiled.record.log);
    return r;
  }
  if (auto why = resource_problem(compiled.record.resources, shape, t.limits)) {
    r.status = TrialStatus::resource_exceeded, r.reason = *why;
    return r;
  }
  if (!gpu) {
    r.status = TrialStatus::compiled;
    return r;
  }
  if (gpu->on_compiled) gpu->on_compiled(compiled.record);
  try {
    launch_and_measure(t, shape, compiled, *gpu, r);
  } catch (const cuda::CudaError& e) {
    r.status = e.is_sticky() ? TrialStatus::crashed : TrialStatus::launch_failed;
    r.reason = e.what();
    r.timing.reset();
  } catch (const core::Error& e) {
    r.status = TrialStatus::launch_failed, r.reason = e.what();
    r.timing.reset();
  }
  return r;
}

}  // namespace flashtune::runner
