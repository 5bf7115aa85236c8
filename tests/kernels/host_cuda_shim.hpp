// tests/kernels/host_cuda_shim.hpp: just enough of CUDA to compile a kernel template as host C++ and run
// it, one std::thread per CUDA thread (so that the machine without a GPU still executes the kernel's own
// indexing, tiling and reductions): thread and block indices, __syncthreads() as a barrier of the block,
// __shfl_xor_sync() as an exchange within each warp of 32 threads, the float intrinsics, float4.
// Blocks run one after another. Slow (a thread per CUDA thread): for small problems only.
//
// The including file defines __shared__ first: empty when the kernel only uses `extern __shared__`
// (define that array at namespace scope), `static` when it declares fixed __shared__ arrays.
#pragma once

#include <barrier>
#include <cmath>
#include <math.h>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__

struct dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim, gridDim;

namespace ft_host {
inline std::unique_ptr<std::barrier<>> block_barrier;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline std::vector<float> warp_slots;  // one per thread of the block
}  // namespace ft_host

inline void __syncthreads() { ft_host::block_barrier->arrive_and_wait(); }

// Every lane of the warp must call it (as on the GPU with a full mask).
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  const unsigned t = threadIdx.x, warp = t / 32, lane = t % 32;
  ft_host::warp_slots[t] = v;
  ft_host::warp_barriers[warp]->arrive_and_wait();
  const float other = ft_host::warp_slots[warp * 32 + (lane ^ unsigned(lane_mask))];
  ft_host::warp_barriers[warp]->arrive_and_wait();  // nobody overwrites a slot still to be read
  return other;
}

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// exp2f, logf, fmaxf, fmaf: <cmath> declares them in the global namespace too.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace ft_host {

/// Runs `kernel` (a callable taking no arguments: bind the kernel's arguments) on grid x block threads.
inline void launch(dim3 grid, unsigned threads, const std::function<void()>& kernel) {
  gridDim = grid;
  blockDim = dim3{threads, 1, 1};
  block_barrier = std::make_unique<std::barrier<>>(std::ptrdiff_t(threads));
  warp_barriers.clear();
  for (unsigned w = 0; w < (threads + 31) / 32; ++w) warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
  warp_slots.assign(threads, 0.0f);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3{x, y, z};
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t)
          pool.emplace_back([t, &kernel] {
            threadIdx = dim3{t, 0, 0};
            kernel();
          });
        for (auto& th : pool) th.join();
      }
}

}  // namespace ft_host
