// harness/kernels/launch.hpp: one config of an operation bound to device buffers as a launch you can enqueue, the one
// path from a compiled kernel to the GPU (the runner's trials and runtime/'s calls both take it): a family that
// launches itself gets its LaunchEnv, any other kernel its packed arguments and launch shape.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "harness/kernels/family.hpp"

namespace flashtune::kernels {

/// Enqueues one launch (run) and the untimed work before it (prepare: KernelFamily::prepare, families that launch
/// themselves only; empty otherwise) on a stream. May throw cuda::CudaError.
struct BoundLaunch {
  std::function<void(CUstream)> run;
  std::function<void(CUstream)> prepare;
};

/// `family`'s kernel `fn` (compiled from specialize(config, problem)) over `buffers` (device address per buffer, in
/// buffers(problem) order). `args` receives the packed arguments the launch points at: it, `family`, `config` and
/// `problem` must outlive the returned functions. Throws core::Error when an argument names a missing buffer.
BoundLaunch bind_launch(const KernelFamily& family, const core::Config& config, const core::Problem& problem,
                        const LaunchShape& shape, CUfunction fn, const std::vector<std::uint64_t>& buffers,
                        PackedArgs& args);

/// bind_launch() for a caller that launches one config again and again (runtime/): the packed arguments are kept and
/// rebuilt only when a buffer's address changes (a family that launches itself rebuilds its LaunchEnv each time, as
/// it packs its own arguments), and the dynamic shared memory limit is raised once per function. Not thread safe: one per (config, problem), used under the caller's lock.
class CachedLaunch {
 public:
  /// Enqueues prepare (if any) and the launch on `stream`; `family`, `config` and `problem` as for bind_launch.
  void run(const KernelFamily& family, const core::Config& config, const core::Problem& problem, const LaunchShape& shape,
           CUfunction fn, const std::vector<std::uint64_t>& buffers, CUstream stream);

 private:
  std::vector<std::uint64_t> m_buffers;
  PackedArgs m_args;
  bool m_valid = false;
  CUfunction m_limit_raised_for = nullptr;  // the function whose dynamic shared memory limit this raised
  unsigned m_limit_raised_to = 0;           // [bytes]
};

}  // namespace flashtune::kernels
