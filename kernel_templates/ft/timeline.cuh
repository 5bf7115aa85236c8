// kernel_templates/ft/timeline.cuh: a diagnostic, per-block timestamps of a kernel's phases (the mma 91 backward's
// `timeline: 2`): the SM's cycle counter (clock64; one counter per SM, so that phases of one block and blocks that
// follow one another on one SM compare), the global nanosecond timer (%globaltimer; comparable across SMs, coarse)
// and the SM id. A block's record is FtBwdTimeline::slots() 64-bit words (attn_params.cuh, shared with the host, names
// them), each written by the thread that reaches the phase (plain stores; the host reads them after the launch).
#pragma once

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
