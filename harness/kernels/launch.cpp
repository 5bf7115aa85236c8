// harness/kernels/launch.cpp: bind_launch (launch.hpp).
#include "harness/kernels/launch.hpp"

#include "harness/cuda/module.hpp"

namespace flashtune::kernels {

BoundLaunch bind_launch(const KernelFamily& family, const core::Config& config, const core::Problem& problem,
                        const LaunchShape& shape, CUfunction fn, const std::vector<std::uint64_t>& buffers,
                        PackedArgs& args) {
  if (family.launches_itself()) {
    LaunchEnv env;
    env.function = fn;
    env.shape = shape;
    env.buffers = buffers;
    return {[&family, env, &config, &problem](CUstream s) mutable {
              env.stream = s;
              family.launch(env, config, problem);
            },
            [&family, env, &config, &problem](CUstream s) mutable {
              env.stream = s;
              family.prepare(env, config, problem);
            }};
  }
  args = pack_kernel_args(family.arguments(config, problem), buffers);
  return {[fn, shape, &args](CUstream s) {
            cuda::launch(fn, shape.grid, shape.block, shape.dynamic_smem_bytes, s, args.pointers.data());
          },
          {}};
}

void CachedLaunch::run(const KernelFamily& family, const core::Config& config, const core::Problem& problem,
                       const LaunchShape& shape, CUfunction fn, const std::vector<std::uint64_t>& buffers,
                       CUstream stream) {
  if (family.launches_itself()) {
    PackedArgs unused;
    const auto l = bind_launch(family, config, problem, shape, fn, buffers, unused);
    l.prepare(stream);
    l.run(stream);
    return;
  }
  if (!m_valid || buffers != m_buffers) {
    m_valid = false;
    m_args = pack_kernel_args(family.arguments(config, problem), buffers);
    m_buffers = buffers;
    m_valid = true;
  }
  if (fn != m_limit_raised_for || shape.dynamic_smem_bytes != m_limit_raised_to) {
    cuda::raise_dynamic_smem_limit(fn, shape.dynamic_smem_bytes);
    m_limit_raised_for = fn, m_limit_raised_to = shape.dynamic_smem_bytes;
  }
  cuda::launch(fn, shape.grid, shape.block, shape.dynamic_smem_bytes, stream, m_args.pointers.data(), true);
}

}  // namespace flashtune::kernels
