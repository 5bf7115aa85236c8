// runtime/runtime.hpp: the tuned attention kernels for other projects (issue 22), behind runtime/flashtune_runtime.h's
// C ABI. A Runtime holds an export's best configs; for a call's shape it picks each stage's config (configs.hpp's rule,
// the backward's fastest complete way of kernels/attn_bwd_ways.hpp), compiles it once (jit::Compiler, disk cache),
// loads it per CUDA context, and launches the stages on the caller's stream with the caller's device pointers through
// kernels::bind_launch, the path the harness's trials take.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "harness/jit/compiler.hpp"
#include "runtime/configs.hpp"
#include "tuner/constraint.hpp"
#include "runtime/flashtune_runtime.h"

namespace flashtune::cuda {
class Context;
}

namespace flashtune::runtime {

/// An error with the C ABI's status (ft_status) beside its one-line message.
class RuntimeError : public core::Error {
 public:
  RuntimeError(ft_status status, const std::string& message) : core::Error(message), m_status(status) {}
  ft_status status() const noexcept { return m_status; }

 private:
  ft_status m_status;
};

enum class Pass { forward, backward };

/// The attention problem of a C shape (qk_range, sink_bias and tf32 at their defaults), checked by the attention
/// families' own rule; throws RuntimeError(FT_ERR_ARGUMENT) naming what is wrong.
core::Problem attention_problem(const ft_attn_shape& shape);

struct Plan;

class Runtime {
 public:
  /// `cache_dir` nullopt: no CUBIN cache on disk.
  Runtime(ConfigTable table, std::optional<std::filesystem::path> cache_dir);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Enqueues `pass` of `shape` on `stream` in the current context (made the device's primary context when none is
  /// current). `workspace` 0: the runtime's own for this shape. Throws RuntimeError.
  void run(Pass pass, const ft_attn_shape& shape, const ft_attn_tensors& tensors, void* stream,
           std::uint64_t workspace, std::size_t workspace_bytes);
  /// [bytes] of workspace `pass` of `shape` needs on the current device.
  std::size_t workspace_bytes(Pass pass, const ft_attn_shape& shape);
  /// The choice for `shape` as JSON (flashtune_runtime.h, ft_attention_explain): on the current device when `arch` is
  /// empty, else chosen among every GPU's entries and compiled for `arch` without a GPU.
  std::string explain(Pass pass, const ft_attn_shape& shape, const std::string& arch);

 private:
  struct DeviceState;
  DeviceState& current_device();  // under m_mutex
  Plan& plan_for(DeviceState& dev, Pass pass, const ft_attn_shape& shape);  // under m_mutex
  std::unique_ptr<Plan> make_plan(Pass pass, const core::Problem& problem, const std::string& gpu,
                                  const core::DeviceLimits& limits);
  void compile(Plan& plan, const std::string& arch);

  ConfigTable m_table;
  jit::Compiler m_compiler;
  std::vector<jit::TemplateFile> m_headers;        // every embedded template, for NVRTC's include table
  std::map<std::string, std::string> m_sources;    // template file -> text
  std::map<std::string, tuner::ConstraintSet> m_constraints;  // each family's own, by name (built on first use)
  std::mutex m_mutex;
  std::unique_ptr<cuda::Context> m_primary;        // retained when a call found no current context
  std::map<void*, std::unique_ptr<DeviceState>> m_devices;  // by CUcontext
};

}  // namespace flashtune::runtime
