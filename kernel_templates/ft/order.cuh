// kernel_templates/ft/order.cuh: ordering work between blocks through counters in global memory (gpu scope): a
// block waits until a counter reaches its turn (acquire), does its writes, then passes the turn on (release).
// Writes made by the async proxy (bulk reduce-adds) must be complete (ft_bulk_wait<0>) and fenced
// (ft_fence_proxy_async_global) before the release; an async-proxy write after the acquire is fenced likewise.
#pragma once

// Spins (one thread) until *counter == turn; the loads acquire at gpu scope. A turn that never comes (a bug in who
// counts what) traps after 2^28 polls, seconds, rather than hanging the GPU. Call it outside wgmma warpgroups (the
// TMA backward: its dQ writer warps): inlined into a consumer warpgroup, the trap made ptxas serialize the wgmma
// chains (C7512) and spill 1.3 KB; not inlined, the call spilled the writer's 24 registers.
__device__ __forceinline__ void ft_wait_turn(const int* counter, int turn) {
  for (unsigned polls = 0; polls < (1u << 28); ++polls) {
    int now;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(now) : "l"(counter) : "memory");
    if (now == turn) return;
  }
  __trap();
}
// *counter += value, released at gpu scope: the writes before it are seen by whoever acquires the new value.
__device__ __forceinline__ void ft_add_release(int* counter, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(counter), "r"(value) : "memory");
}
// The next turn: *counter += 1, released.
__device__ __forceinline__ void ft_pass_turn(int* counter) { ft_add_release(counter, 1); }
// Orders this thread's generic-proxy and async-proxy accesses to global memory.
__device__ __forceinline__ void ft_fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// Programmatic dependent launch (sm_90): the next kernel of the stream, launched with the programmatic stream
// serialization attribute, may start once every block of this grid has executed this (or exited). Its blocks
// then run beside this grid's; what it reads of this grid's writes it orders itself (counters, as above) or
// after ft_wait_prerequisites.
__device__ __forceinline__ void ft_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// Waits until the grid this one was launched after (programmatically) has completed, its writes visible.
__device__ __forceinline__ void ft_wait_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
