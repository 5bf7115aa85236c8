// kernel_templates/ft/schedule.cuh: dynamic work-unit scheduling for persistent warp-specialized kernels. A
// global ticket counter hands the units out in index order as blocks free up (longest-first when the kernel
// orders its units heaviest first: the blocks that finish early take the next heaviest), and a two-slot mailbox in
// shared memory passes each unit from the producer thread to the consumer warps.
//
// The counter: two 32-bit words in global memory (a workspace the host zeroes once at allocation): [0] tickets
// taken, [1] blocks done. Every launch leaves them zero again: the last block to finish resets them
// (ft_units_done), so back-to-back launches on one stream need no memset. Two launches that share the words must
// not run at the same time.
#pragma once

#include "ft/tma.cuh"

// Position u of a unit order walked in sections of `group` units (the last section may be narrower; group >= 1):
// inside a section the inner index (`n_inner` values) is the slower one and the section's units take turns, so
// the section's heaviest inner steps come first over all of its units. Returns (inner index, unit).
struct FtSectionSlot {
  int inner, unit;
};
__device__ __forceinline__ FtSectionSlot ft_section_slot(int u, int n_inner, int group, int n_units) {
  const int section = u / (n_inner * group), r = u - section * n_inner * group;
  const int width = min(group, n_units - section * group);  // units in this section
  return {r / width, section * group + r % width};
}

// The unit a block runs after its first (blockIdx.x): gridDim.x + the next ticket. Units >= the count mean "no
// more"; every block takes exactly one such ticket, as its last.
__device__ __forceinline__ int ft_next_unit(unsigned* counter) { return int(gridDim.x + atomicAdd(counter, 1u)); }

// One thread per block, after its last ft_next_unit: the block is done taking tickets; the last of the grid's
// blocks zeroes both words for the next launch (every other block's tickets were taken before its own `done`).
__device__ __forceinline__ void ft_units_done(unsigned* counter) {
  __threadfence();
  if (atomicAdd(counter + 1, 1u) == gridDim.x - 1) {
    atomicExch(counter, 0u);
    atomicExch(counter + 1, 0u);
  }
}

// The mailbox at shared address `base` (8-aligned, kBytes): mbarriers full[2], empty[2], then two 32-bit slots.
// The producer thread puts its block's j-th unit in slot j % 2 (waiting for the consumers to have read the
// slot's previous unit, j - 2); every consumer thread takes it (in order j = 0, 1, ...) and frees the slot by its
// own arrival once it has read it (no warp-level hand-off for compute-sanitizer's racecheck to miss).
struct FtUnitMailbox {
  enum : int { kBytes = 4 * 8 + 2 * 4 };
  unsigned base;
  int consumer_threads;

  __device__ unsigned full(int s) const { return base + 8u * unsigned(s); }
  __device__ unsigned empty(int s) const { return base + 8u * unsigned(2 + s); }
  __device__ unsigned slot(int s) const { return base + 32u + 4u * unsigned(s); }

  // One thread, with the kernel's other mbarrier inits (before its fence and __syncthreads).
  __device__ void init() const {
    for (int s = 0; s < 2; ++s) {
      ft_mbarrier_init(full(s), 1);
      ft_mbarrier_init(empty(s), unsigned(consumer_threads));
    }
  }
  // The producer thread: unit `unit` is this block's j-th (j = 0, 1, ...).
  __device__ void put(int j, int unit) const {
    const int s = j & 1;
    if (j >= 2) ft_mbarrier_wait(empty(s), unsigned((j >> 1) - 1) & 1u);
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(slot(s)), "r"(unit) : "memory");
    ft_mbarrier_arrive(full(s));  // release: the slot's store is visible to whoever sees the phase complete
  }
  // Every consumer thread: the block's j-th unit.
  __device__ int take(int j) const {
    const int s = j & 1;
    ft_mbarrier_wait(full(s), unsigned(j >> 1) & 1u);
    int unit;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(unit) : "r"(slot(s)) : "memory");
    ft_mbarrier_arrive(empty(s));
    return unit;
  }
};
