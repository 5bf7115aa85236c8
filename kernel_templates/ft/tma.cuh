// kernel_templates/ft/tma.cuh: Hopper (sm_90a) asynchronous copies and the barriers around them: the tensor
// memory accelerator (cp.async.bulk.tensor, driven by a tensor map the host encodes: harness/cuda/tensor_map.hpp),
// shared-memory transaction barriers (mbarrier), named barriers between warp roles, and register reallocation
// between them (setmaxnreg). Addresses of shared memory are 32-bit shared-window addresses (ft_smem_u32).
#pragma once

#include "ft/tensor_map.cuh"

// ---------------------------------------------------------------------------------------------
// mbarrier: a 64-bit barrier in shared memory that completes a phase when `count` arrivals have happened and
// the transaction bytes it expects have landed. Phases alternate parity 0, 1, 0, ...
__device__ __forceinline__ void ft_mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialized barriers visible to the async proxy (the TMA unit) before first use; then a block barrier.
__device__ __forceinline__ void ft_fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that also announces `bytes` of transactions (TMA copies completing on this barrier).
__device__ __forceinline__ void ft_mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ft_mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Blocks until the phase of parity `phase` has completed.
__device__ __forceinline__ void ft_mbarrier_wait(unsigned bar, unsigned phase) {
  asm volatile(
      "{\n.reg .pred done;\nft_mbarrier_wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra ft_mbarrier_wait_%=;\n}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}

// ---------------------------------------------------------------------------------------------
// TMA loads: the box of `map` at element coordinates (c0 innermost, ...) into shared memory at dst (aligned to
// 128 bytes, to 1024 with the 128-byte swizzle), completing `bar`'s transactions. Elements outside the tensor
// read as zero. One thread issues a copy.
__device__ __forceinline__ void ft_tma_load_2d(unsigned dst, const FtTensorMap& map, unsigned bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(&map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void ft_tma_load_4d(unsigned dst, const FtTensorMap& map, unsigned bar, int c0, int c1, int c2,
                                               int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(
          dst),
      "l"(&map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// TMA store: the box of `map` at (c0, ...) from shared memory at src (laid out as a load of that box would leave
// it: 128-byte aligned, 1024 with the 128-byte swizzle); elements outside the tensor are not written. The writes
// of every thread that filled src must be made visible to the async proxy first (ft_fence_proxy_async, then a
// barrier). One thread issues; it commits (ft_bulk_commit) and waits for the reads of src (ft_bulk_wait_read)
// before src is reused or the block exits.
__device__ __forceinline__ void ft_tma_store_4d(const FtTensorMap& map, unsigned src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(&map),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// Non-tensor bulk copies (no tensor map; `bytes` a multiple of 16, both addresses 16-byte aligned). ft_bulk_load:
// global -> shared, completing on mbarrier `bar` (count the bytes in its expect_tx), e.g. a tile's LSE and D rows
// beside its Q and dO boxes. ft_bulk_reduce_add_f32: shared fp32 -> global, each float added to its global
// counterpart at the L2 (atomically per element against other such adds), in the bulk group of the issuing
// thread: the backward's fp32 dQ (or GQA dK / dV) partial tiles. Its source may be reused after
// ft_bulk_wait_read; the sums are visible to later kernels (and to others after a full bulk wait + fence).
__device__ __forceinline__ void ft_bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void ft_bulk_reduce_add_f32(float* dst, unsigned src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
// ft_bulk_store: shared -> global, a plain copy in the same bulk group discipline (the backward's first writer of a
// dQ piece, whose store replaces the accumulator's zero fill).
__device__ __forceinline__ void ft_bulk_store(void* dst, unsigned src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ft_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void ft_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// The bulk groups of this thread beyond the newest kPending have completed entirely (their writes done, not only
// their reads of shared memory).
template <int kPending>
__device__ __forceinline__ void ft_bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Warp roles. Named barrier `id` (1..15; 0 is __syncthreads') over `threads` threads (a multiple of 32): sync
// waits for all, arrive signals without waiting (a producer telling consumers).
__device__ __forceinline__ void ft_named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void ft_named_barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Registers per thread of the calling warpgroup raised / lowered to kRegs (a multiple of 8 in 24..256): the
// producer gives its registers up so that the consumers can hold more.
template <int kRegs>
__device__ __forceinline__ void ft_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void ft_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
