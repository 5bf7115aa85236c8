// tests/kernels/attn_fwd_f32_emulation.hpp: runs kernel_templates/attn_fwd_f32.cuh on the CPU, so its
// indexing, masks, pipeline and fragment layouts are checked against the reference without a GPU.
// Each CUDA thread of a block is a cooperative fiber (ucontext); __syncthreads and every warp-wide
// operation (shuffle, __syncwarp, mma, ldmatrix) are barriers at which fibers switch. The PTX wrappers
// are emulated strictly: cp.async copies land only when cp.async.wait_group retires their group (a
// missing wait reads stale data), addresses are checked against the block's dynamic shared memory and
// the registered global buffers, mma operands must already be tf32 (low 13 bits zero), all 32 lanes must
// take part in the same warp operation, and a barrier nobody can pass is reported as a deadlock.
// Include this header once, from the test that launches kernels; it defines the CUDA names as macros.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
struct FtEmuDim3 {
  unsigned x, y, z;
};

// The dynamic shared memory of the block being run (blocks run one at a time). The kernel declares it
// `extern __shared__ float4 ft_attn_f32_smem[]`, which names this array once __shared__ is erased.
inline constexpr std::size_t kFtEmuSmemFloat4s = 256 * 1024 / 16;
alignas(16) inline float4 ft_attn_f32_smem[kFtEmuSmemFloat4s];

namespace ft_emu {

struct Barrier {
  int expected = 0, arrived = 0;
  unsigned generation = 0;
};

// What one lane hands to a warp operation, and what it gets back.
struct LaneIo {
  unsigned u[12] = {};
  const void* ptr = nullptr;
  int tag = 0;
};

struct Warp {
  Barrier bar;
  LaneIo in[2][32], out[2][32];  // double-buffered by barrier generation
};

struct Copy {
  float* dst;
  const float* src;
  bool valid;
};

struct Fiber {
  ucontext_t ctx{};
  std::vector<char> stack;
  unsigned tid = 0;
  bool done = false;
  std::vector<Copy> open;                 // cp.async issued since the last commit
  std::vector<std::vector<Copy>> groups;  // committed, oldest first
};

struct Range {
  const char* begin;
  std::size_t bytes;
};

struct Block {
  FtEmuDim3 idx{};
  int threads = 0;
  std::size_t smem_bytes = 0;
  Barrier bar;
  std::vector<Warp> warps;
  std::vector<Fiber> fibers;
  ucontext_t sched{};
  int current = 0;
  std::function<void()> body;
  unsigned long long progress = 0;
  std::string error;  // first problem found; the block stops at the next barrier
};

inline Block* g_block = nullptr;
inline FtEmuDim3 g_grid{1, 1, 1};    // gridDim of the launch being run; callers set it before run_block
inline std::vector<Range> g_inputs;  // global memory cp.async may read

inline Fiber& fiber() { return g_block->fibers[std::size_t(g_block->current)]; }
inline void fail(const std::string& what) {
  if (g_block->error.empty()) g_block->error = what + " (thread " + std::to_string(fiber().tid) + ")";
}
inline void yield() { swapcontext(&fiber().ctx, &g_block->sched); }

inline void sync_block() {
  Barrier& b = g_block->bar;
  const unsigned gen = b.generation;
  ++g_block->progress;
  if (++b.arrived == b.expected) {
    b.arrived = 0, ++b.generation;
    return;
  }
  while (b.generation == gen) yield();
}

// All 32 lanes of the warp call this with the same tag; the last to arrive runs `compute` over every
// lane's input, then each lane gets its output.
template <class F>
LaneIo warp_op(int tag, LaneIo in, F compute) {
  Warp& w = g_block->warps[fiber().tid / 32];
  const unsigned lane = fiber().tid % 32, gen = w.bar.generation, p = gen & 1;
  in.tag = tag;
  w.in[p][lane] = in;
  ++g_block->progress;
  if (++w.bar.arrived == 32) {
    for (int l = 0; l < 32; ++l)
      if (w.in[p][l].tag != tag) fail("lanes of one warp are in different warp operations");
    compute(w.in[p], w.out[p]);
    w.bar.arrived = 0, ++w.bar.generation;
  } else {
    while (w.bar.generation == gen) yield();
  }
  return w.out[p][lane];
}

inline bool in_smem(const void* p, std::size_t bytes) {
  const char* base = reinterpret_cast<const char*>(ft_attn_f32_smem);
  const char* c = static_cast<const char*>(p);
  return c >= base && c + bytes <= base + g_block->smem_bytes;
}
inline bool in_inputs(const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (const auto& r : g_inputs)
    if (c >= r.begin && c + bytes <= r.begin + r.bytes) return true;
  return false;
}
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

inline unsigned bits(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void fiber_entry() {
  g_block->body();
  Fiber& f = fiber();
  if (!f.open.empty() || !f.groups.empty()) fail("cp.async still in flight when the thread exits");
  f.done = true;
  ++g_block->progress;
}

/// Runs `body` (the kernel call) as every thread of block `idx`; "" when it completed, else the first
/// problem (deadlock, bad address, ...). Shared memory beyond smem_bytes is a poisoned guard zone.
inline std::string run_block(FtEmuDim3 idx, int threads, std::size_t smem_bytes, std::function<void()> body) {
  if (smem_bytes + 4096 > sizeof(ft_attn_f32_smem)) return "dynamic shared memory larger than the emulator's";
  Block b;
  b.idx = idx, b.threads = threads, b.smem_bytes = smem_bytes, b.body = std::move(body);
  b.bar.expected = threads;
  b.warps.resize(std::size_t((threads + 31) / 32));
  b.fibers.resize(std::size_t(threads));
  // Poison: uninitialized shared memory reads as NaN; the guard zone must stay untouched.
  std::fill_n(reinterpret_cast<unsigned*>(ft_attn_f32_smem), sizeof(ft_attn_f32_smem) / 4, 0x7fc0deadu);
  g_block = &b;
  for (int t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[std::size_t(t)];
    f.tid = unsigned(t);
    f.stack.resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &b.sched;
    makecontext(&f.ctx, fiber_entry, 0);
  }
  int live = threads;
  while (live > 0 && b.error.empty()) {
    const unsigned long long before = b.progress;
    for (int t = 0; t < threads && b.error.empty(); ++t) {
      if (b.fibers[std::size_t(t)].done) continue;
      b.current = t;
      swapcontext(&b.sched, &b.fibers[std::size_t(t)].ctx);
      if (b.fibers[std::size_t(t)].done) --live;
    }
    if (live > 0 && b.progress == before) b.error = "deadlock: every live thread waits at a barrier";
  }
  // Suspended fibers (after an error) are abandoned with their stacks; nothing on them owns resources.
  g_block = nullptr;
  if (!b.error.empty()) return b.error;
  const unsigned* guard = reinterpret_cast<const unsigned*>(ft_attn_f32_smem);
  for (std::size_t i = (smem_bytes + 3) / 4; i < sizeof(ft_attn_f32_smem) / 4; ++i)
    if (guard[i] != 0x7fc0deadu) return "shared memory written past the dynamic size, float " + std::to_string(i);
  return "";
}

inline FtEmuDim3 thread_idx() { return {fiber().tid, 0, 0}; }
inline FtEmuDim3 block_idx() { return g_block->idx; }
inline FtEmuDim3 grid_dim() { return g_grid; }

}  // namespace ft_emu

// ---------------------------------------------------------------------------------------------
// The CUDA names the kernel uses.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
#define __grid_constant__
#define threadIdx (ft_emu::thread_idx())
#define blockIdx (ft_emu::block_idx())
#define gridDim (ft_emu::grid_dim())

using std::max;
using std::min;

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float __uint_as_float(unsigned u) { return ft_emu::from_bits(u); }
inline unsigned __float_as_uint(float f) { return ft_emu::bits(f); }
inline void __syncthreads() { ft_emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  ft_emu::warp_op(1, {}, [](const ft_emu::LaneIo*, ft_emu::LaneIo*) {});
}
inline float __shfl_xor_sync(unsigned mask, float v, int offset, int = 32) {
  ft_emu::LaneIo in;
  in.u[0] = ft_emu::bits(v), in.u[1] = unsigned(offset), in.u[2] = mask;
  return ft_emu::from_bits(ft_emu::warp_op(2, in, [](const ft_emu::LaneIo* i, ft_emu::LaneIo* o) {
           for (int l = 0; l < 32; ++l) {
             if (i[l].u[1] != i[0].u[1] || i[l].u[2] != 0xffffffffu) ft_emu::fail("shfl_xor: lanes disagree");
             o[l].u[0] = i[l ^ int(i[0].u[1] % 32)].u[0];
           }
         }).u[0]);
}

// The PTX wrappers of attn_fwd_f32.cuh.
#define FT_ATTN_F32_HOST_PTX 1
namespace ft_attn_f32 {

inline void cp_async_16(float* smem, const float* gmem, bool valid) {
  if (!ft_emu::aligned16(smem) || !ft_emu::in_smem(smem, 16))
    ft_emu::fail("cp.async destination outside the dynamic shared memory or unaligned");
  if (valid && (!ft_emu::aligned16(gmem) || !ft_emu::in_inputs(gmem, 16)))
    ft_emu::fail("cp.async source outside the inputs or unaligned");
  ft_emu::fiber().open.push_back({smem, gmem, valid});
}
inline void cp_async_commit() {
  auto& f = ft_emu::fiber();
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
template <int kPending>
inline void cp_async_wait() {
  auto& f = ft_emu::fiber();
  while (f.groups.size() > std::size_t(kPending)) {
    for (const auto& c : f.groups.front()) {
      if (c.valid)
        std::memcpy(c.dst, c.src, 16);
      else
        std::memset(c.dst, 0, 16);
    }
    f.groups.erase(f.groups.begin());
  }
}
inline unsigned to_tf32(float x) {
  unsigned u = ft_emu::bits(x);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  // nearest, ties away from zero
  return u;
}
inline void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  ft_emu::LaneIo in;
  for (int i = 0; i < 4; ++i) in.u[i] = a[i], in.u[6 + i] = ft_emu::bits(d[i]);
  in.u[4] = b0, in.u[5] = b1;
  const auto out = ft_emu::warp_op(3, in, [](const ft_emu::LaneIo* i, ft_emu::LaneIo* o) {
    float A[16][8], B[8][8];
    for (int l = 0; l < 32; ++l) {
      for (int r = 0; r < 6; ++r)
        if (i[l].u[r] & 0x1fffu) ft_emu::fail("mma operand not rounded to tf32");
      const int g = l / 4, t = l % 4;
      A[g][t] = ft_emu::from_bits(i[l].u[0]), A[g + 8][t] = ft_emu::from_bits(i[l].u[1]);
      A[g][t + 4] = ft_emu::from_bits(i[l].u[2]), A[g + 8][t + 4] = ft_emu::from_bits(i[l].u[3]);
      B[t][g] = ft_emu::from_bits(i[l].u[4]), B[t + 4][g] = ft_emu::from_bits(i[l].u[5]);
    }
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int c = 0; c < 4; ++c) {
        const int row = g + 8 * (c / 2), col = 2 * t + c % 2;
        double acc = ft_emu::from_bits(i[l].u[6 + c]);
        for (int k = 0; k < 8; ++k) acc += double(A[row][k]) * double(B[k][col]);
        o[l].u[c] = ft_emu::bits(float(acc));
      }
    }
  });
  for (int c = 0; c < 4; ++c) d[c] = ft_emu::from_bits(out.u[c]);
}
inline void ldmatrix_x4(unsigned (&r)[4], const float* row) {
  if (!ft_emu::aligned16(row) || !ft_emu::in_smem(row, 16)) ft_emu::fail("ldmatrix row outside shared memory or unaligned");
  ft_emu::LaneIo in;
  in.ptr = row;
  const auto out = ft_emu::warp_op(4, in, [](const ft_emu::LaneIo* i, ft_emu::LaneIo* o) {
    for (int l = 0; l < 32; ++l)
      for (int m = 0; m < 4; ++m) o[l].u[m] = ft_emu::bits(static_cast<const float*>(i[8 * m + l / 4].ptr)[l % 4]);
  });
  for (int m = 0; m < 4; ++m) r[m] = out.u[m];
}

}  // namespace ft_attn_f32

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kernel_templates/attn_fwd_f32.cuh"
#pragma GCC diagnostic pop
