// kernel_templates/ft/timeline.cuh: a diagnostic, per-block timestamps of a kernel's phases (the mma 91 backward's
// `timeline: 2`): the SM's cycle counter (clock64; one counter per SM, so that phases of one block and blocks that
// follow one another on one SM compare), the global nanosecond timer (%globaltimer; comparable across SMs, coarse)
// and the SM id. A block's record is kFtTimelineSlots 64-bit words at `rec`, each written by the thread that reaches
// the phase (plain stores; the host reads them after the launch).
#pragma once

// Slots of a record, in the order a block's phases run (the host's reader, python/flashtune/timeline.py, names them
// the same): 0 SM id << 32 | the block's items, 1 globaltimer at entry [ns], 2 clock64 at entry, 3 the consumers'
// K / V arrived (warpgroup 0), 4 its first item done, 5 its last item done, 6 dK, dV stored, 7 the dQ writer's adds
// complete (writer warp 2), 8 warpgroup 1's last item done, 9 globaltimer after slot 6 [ns].
constexpr int kFtTimelineSlots = 10;

__device__ __forceinline__ unsigned long long ft_clock64() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long ft_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned ft_smid() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
