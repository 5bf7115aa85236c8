// harness/cuda/module.hpp: a loaded CUBIN (move-only), its kernels, their resources, and the one launch
// helper every kernel launch goes through (it opts into > 48 KiB of dynamic shared memory when asked).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::cuda {

class Module {
 public:
  /// Loads a CUBIN (as NVRTC made it) into the current context. Throws CudaError, e.g.
  /// CUDA_ERROR_NO_BINARY_FOR_GPU when it was built for another architecture.
  explicit Module(const std::vector<char>& cubin);
  ~Module();
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  CUmodule get() const noexcept { return m_module; }
  /// The kernel of that mangled (lowered) name; throws CudaError (CUDA_ERROR_NOT_FOUND) when absent.
  /// The handle lives as long as the module.
  CUfunction function(const std::string& lowered_name) const;

 private:
  void unload() noexcept;
  CUmodule m_module = nullptr;
  std::uint64_t m_generation = 0;
};

/// Raises `f`'s dynamic shared memory limit to `dynamic_smem_bytes` when that exceeds the 48 KiB default (a
/// driver call; the setting stays with the function until its module is unloaded).
void raise_dynamic_smem_limit(CUfunction f, unsigned dynamic_smem_bytes);

/// Launches `f` on `stream` with kernel arguments `args` (pointers to each argument, in order). Unless
/// `limit_raised` (the caller did raise_dynamic_smem_limit for this function and size: a launcher that runs one
/// function again and again saves that driver call, ~1 us of host time), first raises the function's dynamic
/// shared memory limit as raise_dynamic_smem_limit does.
/// Throws CudaError for launch errors the driver reports at once (bad configuration, too many resources);
/// faults inside the kernel surface at the next synchronization.
void launch(CUfunction f, const unsigned (&grid)[3], const unsigned (&block)[3],
            unsigned dynamic_smem_bytes, CUstream stream, void** args, bool limit_raised = false);

/// As launch, with programmatic stream serialization (sm_90's programmatic dependent launch): the kernel may start
/// once every block of the stream's previous kernel has executed griddepcontrol.launch_dependents (or exited),
/// beside it. The kernel orders its reads of the previous kernel's writes itself, and should not complete before
/// it (griddepcontrol.wait in some block) when later work in the stream reads them.
void launch_programmatic(CUfunction f, const unsigned (&grid)[3], const unsigned (&block)[3],
                         unsigned dynamic_smem_bytes, CUstream stream, void** args);

/// The loaded function's resources as the driver reports them: registers, local memory per thread
/// (reported as stack_frame_bytes), static shared and user constant memory. Spills are unknown (-1):
/// they come from the ptxas report (jit::parse_ptxas_report).
core::KernelResources function_resources(CUfunction f);

}  // namespace flashtune::cuda
