// kernel_templates/attn_params.cuh: the parameter structs of the attention operations, one per operation
// (the forward; the backward's stages share one, as they share their tensors; the two baselines' kernels), plain C++ that both the
// kernels (NVRTC) and the host (harness/kernels) compile. A kernel takes its struct by value as
// `const __grid_constant__ FtAttnFwdParams<T> p` and nothing else; the host fills FtAttnFwdParams<void>
// (same layout: every member is a pointer or a number) and binds the pointers to its device buffers.
//
// Layout (DESIGN.md "Attention conventions"): Q, O, dO, dQ (batch, heads_q, seq_q, head_dim) and K, V, dK,
// dV (batch, heads_kv, seq_k, head_dim), head_dim contiguous, strides per batch / head / row [elements];
// LSE, D (batch, heads_q, seq_q) contiguous fp32, LSE in natural log; sinks, dsinks (heads_q) fp32.
#pragma once

#include "ft/tensor_map.cuh"

// Attention forward: O, LSE from Q, K, V (and the learned sink logits).
template <typename T>
struct FtAttnFwdParams {
  const T* q;
  const T* k;
  const T* v;
  const float* sinks;  // learned sink logits s_h; read only by kernels built with learned sinks
  T* o;
  float* lse;
  long long q_sb, q_sh, q_ss;  // [elements] Q strides per batch, head, row
  long long k_sb, k_sh, k_ss;  // [elements] K
  long long v_sb, v_sh, v_ss;  // [elements] V
  long long o_sb, o_sh, o_ss;  // [elements] O
  int heads_q, heads_kv, seq_q, seq_k;
  int window;          // keys a query sees back from the causal edge (kernels built with kWindow)
  int sink_tokens;     // leading keys every query sees under a window
  float scale_log2;    // softmax scale * log2(e)
};

// The TMA forward (attn_fwd_tma_kernel, attn_fwd_sm90_tma.cuh): the forward's members, then tensor maps of Q,
// K, V and O, each 4-D (head_dim, seq, heads, batch; innermost first) over the 16-bit tensor with the 128-byte
// swizzle, boxes of 64 columns: Q (64, block_m / pack_heads, pack_heads, 1), K and V (64, block_n, 1, 1), O (64,
// min(64, block_m / pack_heads), 64 / that, 1): one warpgroup's rows. The host encodes them per launch
// (ParamsArg::map) with the buffers' addresses.
template <typename T>
struct FtAttnFwdTmaParams {
  FtAttnFwdParams<T> a;
  FtTensorMap q_map, k_map, v_map, o_map;
  int batch;       // the kernel's 1-D grid walks (query block, heads, batch) units,
  int unit_group;  // in sections of this many (heads, batch) pairs (>= 1) whose K / V share the L2
  unsigned* sched;  // persistent 3: the dynamic scheduler's two counters (ft/schedule.cuh; zero between launches)
};

// Attention backward, every stage (preprocess D = rowsum(dO * O), dK / dV, dQ, dQ with D inline, the fused
// pass, the learned-sink gradient); each reads the members its stage needs. Q, O, dO and dQ share the q_
// strides, K, V, dK and dV the k_ strides.
template <typename T>
struct FtAttnBwdParams {
  const T* q;
  const T* k;
  const T* v;
  const T* o;
  const T* dout;
  const float* lse;
  float* delta;        // D: read by dkdv, dq, fused and dsink; written by preprocess and dq_delta
  const float* sinks;  // dsink only
  T* dq;
  T* dk;
  T* dv;
  float* dsinks;       // dsink only
  float* ws;           // dkdv: the sink-token or item split's fp32 partials; fused: the fp32 dQ accumulator
  long long q_sb, q_sh, q_ss;  // [elements] Q, O, dO, dQ strides per batch, head, row
  long long k_sb, k_sh, k_ss;  // [elements] K, V, dK, dV
  int batch, heads_q, heads_kv, seq_q, seq_k, window, sink_tokens;
  int sink_split;  // dkdv: blocks per sink-token key tile (1: no split)
  int item_split;  // dkdv (mma 80): blocks per key tile, each over a chunk of its items (1: no split)
  int reduce;      // dkdv: 0 = the main pass, 1 = add the split partials into dK, dV
  int convert;     // fused: 0 = the main pass, 1 = convert the fp32 dQ accumulator to dQ
  float scale;     // softmax scale
};

// The TMA backward (attn_bwd_fused_tma_kernel, attn_bwd_sm90_tma.cuh): the backward's members, then tensor maps
// of Q, K, V and dO, each 4-D (head_dim, seq, heads, batch; innermost first) over the 16-bit tensor with the
// 128-byte swizzle, boxes of 64 columns x block_m rows (Q, dO) or block_n rows (K, V). The host encodes them per
// launch.
// unit_group: (kv head, batch) pairs per section of the block order (>= 1; ft_section_slot): inside a section the
// key blocks go in order over all of its pairs, key block 0 (causal: the heaviest) of every pair first.
// chunks: the windowed sweep (attn_bwd_fused_sweep_tma_kernel, mma 92): chunks of query tiles per (kv head, batch) pair,
// one block each (the main pass's gridDim.x; its second launch has another grid and reads it here).
// o_map: O, as Q's (the sweep with D inline, attn_bwd_fused_delta; unused elsewhere).
// dk_map, dv_map: dK and dV (K's strides) in 64-key boxes, for mma 91's epilogue 2 (TMA stores; unset elsewhere).
template <typename T>
struct FtAttnBwdTmaParams {
  FtAttnBwdParams<T> a;
  FtTensorMap q_map, k_map, v_map, do_map, o_map, dk_map, dv_map;
  int unit_group;
  int chunks;
  int tail_first;  // mma 91 split tail: launch-order index of the first split block (blocks before it run whole)
  int tail_parts;  // 1 = none; k = the n blocks from tail_first on each run as k pieces (item ranges): piece j of
                   // split block t is launch index tail_first + j n + t
};

// The materialized-score baselines' kernels (attn_naive, attn_eager: cuBLAS GEMMs around them).
// attn_naive_softmax_kernel: S (batch, heads_q, seq_q, seq_k) -> P in place, LSE per row.
template <typename T>
struct FtAttnNaiveParams {
  T* s;
  float* lse;
  const float* sinks;  // learned sink logits (kernels built with learned sinks)
  long long rows;      // batch * heads_q * seq_q
  int heads_q, seq_q, seq_k, window, sink_tokens;
};

// attn_eager_kernel: one elementwise or row op of eager attention (kEagerRepeatKv, ...) on a -> out (b: the op's
// second operand). a, b and out are the launch's buffers, bound per op; the shape members are the problem's.
struct FtAttnEagerParams {
  const void* a;
  const void* b;
  void* out;
  long long n;  // elements (or rows, for a row op) the op covers
  int op;
  int cols;     // row length of a row op
  int a_f32;    // 1: a is fp32 whatever the problem's dtype
  int heads_q, group, seq_q, seq_k, head_dim, window, sink_tokens;
  float scale;  // softmax scale (kEagerScale)
};

// Functions of template arguments that the host calls too.
#ifdef __CUDACC_RTC__
#define FT_HOST_DEVICE __host__ __device__
#else
#define FT_HOST_DEVICE
#endif

// The dQ split of the TMA backward (attn_bwd_fused_tma_kernel; the host's register estimate): a block_m x head_dim
// dQ tile is block_m / 64 row blocks x split() column chunks of head_dim / split() columns (64 or 128), its pieces
// all issued by the first consumer warpgroup (the kernel's comment says why); block_m 80: one row block of dQ^T
// pieces, as many chunks as consumer warpgroups (two: 64 columns each).
struct FtBwdDqSplit {
  static constexpr FT_HOST_DEVICE int split(int head_dim, int block_m, int consumers) {
    const int s = consumers / (block_m == 80 ? 1 : block_m / 64);  // 80 rows: one row block (dQ^T pieces)
    return s < 1 ? 1 : (s > head_dim / 64 ? head_dim / 64 : s);
  }
};

// The mma 91 backward's `timeline: 2` records (ft/timeline.cuh): slots() 64-bit words per launched block, in the order
// a block's phases run (the host's reader, python/flashtune/timeline.py, names them the same): 0 SM id << 32 | the
// block's items, 1 globaltimer at entry [ns], 2 clock64 at entry, 3 the consumers' K / V arrived (warpgroup 0), 4 its
// first item done, 5 its last item done, 6 dK, dV stored, 7 the dQ writer's adds complete (writer warp 2), 8
// warpgroup 1's last item done, 9 globaltimer after slot 6 [ns].
struct FtBwdTimeline {
  static constexpr FT_HOST_DEVICE int slots() { return 10; }
};

// The fused backward's convert launch (convert = 1 of attn_bwd_fused mma 90 / 91: dQ = T(scale x fp32
// accumulator)): quads (four accumulator floats) per thread, all loaded before any is stored. The launch runs the
// main kernel's blocks, which its registers hold to one or two an SM: one quad a thread left the memory pipe mostly
// idle (6 KB in flight per SM at 384 threads). The host sizes the grid by it.
struct FtBwdConvert {
  static constexpr FT_HOST_DEVICE int quads() { return 8; }
  // Accumulator floats per load (a "quad" of the launch's count): 4; 8 for 80-row blocks (two quads, a pair of T per
  // row and column pair).
  static constexpr FT_HOST_DEVICE int floats(int acc_rows) { return acc_rows == 80 ? 8 : 4; }
};

// ---------------------------------------------------------------------------------------------
// Dynamic shared memory of the attention kernels [bytes] as functions of their template arguments: the host
// sizes each launch with them and the kernels lay their tiles out by them, so the two cannot drift. 16-bit
// tiles are rows x head_dim x 2 bytes; the fp32 kernels' rows are padded to head_dim + 4 floats.
struct FtAttnSmem {
  // attn_fwd_mma_kernel: the Q tile, then `stages` (K tile, V tile) pairs from offset fwd_kv.
  static constexpr FT_HOST_DEVICE long long fwd_kv(int hd, int bm) { return 2LL * bm * hd; }
  static constexpr FT_HOST_DEVICE long long fwd_mma(int hd, int bm, int bn, int stages) {
    return fwd_kv(hd, bm) + 4LL * stages * bn * hd;
  }
  // attn_fwd_wgmma_kernel: the same tiles from the first 1024-byte boundary (the 128-byte swizzle's atoms).
  static constexpr FT_HOST_DEVICE long long fwd_wgmma(int hd, int bm, int bn, int stages) {
    return fwd_mma(hd, bm, bn, stages) + 1024;
  }
  // attn_fwd_tma_kernel: from the first 1024-byte boundary the Q tile, `stages` (K tile, V tile) pairs, with
  // own_o an O tile (the persistent kernel's staged epilogue), then the mbarriers (8 bytes each): Q full, Q empty,
  // and per stage K full, V full, K empty, V empty; with `dynamic` then the unit mailbox (ft/schedule.cuh, 40 bytes).
  static constexpr FT_HOST_DEVICE long long fwd_tma_barriers(int hd, int bm, int bn, int stages, bool own_o) {
    return fwd_mma(hd, bm, bn, stages) + (own_o ? fwd_kv(hd, bm) : 0);  // offset from the aligned start
  }
  static constexpr FT_HOST_DEVICE long long fwd_tma(int hd, int bm, int bn, int stages, bool own_o, bool dynamic = false) {
    return 1024 + fwd_tma_barriers(hd, bm, bn, stages, own_o) + 8LL * (2 + 4 * stages) + (dynamic ? 40 : 0);
  }
  // attn_bwd_dkdv_kernel: the K and V tiles (bn rows), then `stages` x (Q, dO tiles, LSE, D of bm rows).
  static constexpr FT_HOST_DEVICE long long dkdv_stage(int hd, int bm) { return 4LL * bm * hd + 8LL * bm; }
  static constexpr FT_HOST_DEVICE long long dkdv_mma(int hd, int bm, int bn, int stages) {
    return 4LL * bn * hd + stages * dkdv_stage(hd, bm);
  }
  // attn_bwd_dq(_delta)_kernel: the Q, dO (and, with D inline, O) tiles, then `stages` (K, V) pairs from dq_kv.
  static constexpr FT_HOST_DEVICE long long dq_kv(int hd, int bm, bool inline_delta) {
    return (inline_delta ? 6LL : 4LL) * bm * hd;
  }
  static constexpr FT_HOST_DEVICE long long dq_mma(int hd, int bm, int bn, int stages, bool inline_delta) {
    return dq_kv(hd, bm, inline_delta) + 4LL * stages * bn * hd;
  }
  // The wgmma dK / dV pass (fused: with the dS^T tile, bn x bm): from the first 1024-byte boundary, the K and V
  // tiles, [dS^T], then `stages` x (Q, dO, LSE, D) each rounded up to 1 KiB.
  static constexpr FT_HOST_DEVICE long long bwd_wgmma_stage(int hd, int bm) { return (dkdv_stage(hd, bm) + 1023) / 1024 * 1024; }
  static constexpr FT_HOST_DEVICE long long bwd_wgmma(int hd, int bm, int bn, int stages, bool fused) {
    return 4LL * bn * hd + (fused ? 2LL * bn * bm : 0) + stages * bwd_wgmma_stage(hd, bm) + 1024;
  }
  // attn_bwd_fused_tma_kernel: from the first 1024-byte boundary the K and V tiles, `stages` x (Q, dO, LSE, D)
  // each rounded up to 1 KiB, two dS^T tiles (bn x bm), the fp32 dQ staging tile (bm x hd: its pieces), then the
  // mbarriers (8 bytes each): K / V full, per stage full, per stage empty (the dQ pieces' hand-over is by named
  // barriers). Where that layout passes the 227 KiB a block may opt into on sm_90 (kSm90OptIn) and the last stage's
  // rounding has room after its D row, the mbarriers sit there instead (bwd_tma_bars_in_stage: 80-row items at
  // head_dim 128, 40 bytes over otherwise).
  static constexpr long long kSm90OptIn = 232448;
  static constexpr FT_HOST_DEVICE int bwd_tma_dq_pieces(int hd, int bm, int bn) {
    return (bm == 80 ? 1 : bm / 64) * FtBwdDqSplit::split(hd, bm, bn / 64);
  }
  static constexpr FT_HOST_DEVICE long long bwd_tma_bars(int stages) { return 8LL * (1 + 2 * stages); }
  static constexpr FT_HOST_DEVICE long long bwd_tma_tiles(int hd, int bm, int bn, int stages) {
    return 1024 + 4LL * bn * hd + stages * bwd_wgmma_stage(hd, bm) + 4LL * bn * bm + 4LL * bm * hd;
  }
  static constexpr FT_HOST_DEVICE bool bwd_tma_bars_in_stage(int hd, int bm, int bn, int stages) {
    return bwd_tma_tiles(hd, bm, bn, stages) + bwd_tma_bars(stages) > kSm90OptIn &&
           bwd_wgmma_stage(hd, bm) - dkdv_stage(hd, bm) >= bwd_tma_bars(stages);
  }
  static constexpr FT_HOST_DEVICE long long bwd_tma(int hd, int bm, int bn, int stages) {
    return bwd_tma_tiles(hd, bm, bn, stages) + (bwd_tma_bars_in_stage(hd, bm, bn, stages) ? 0 : bwd_tma_bars(stages));
  }
  // attn_bwd_fused_sweep_tma_kernel (slots consumer warpgroups, head_dim 64, 64-row tiles): from the first 1024-byte
  // boundary two (K, V) buffers per slot (8 KiB tiles), `stages` x (Q, dO, [O,] LSE, D) each rounded up to 1 KiB,
  // one dS^T tile per slot (slots x 64 keys x 64 queries), then the mbarriers: per slot and buffer K / V full, per
  // stage loaded (the TMA bytes), full (LSE and D in), empty, per dS^T tile full and free.
  // With D inline each stage also holds the O tile; the mbarriers add one per stage (its TMA bytes "loaded").
  static constexpr FT_HOST_DEVICE long long bwd_sweep_stage(bool inline_delta) {
    return (dkdv_stage(64, 64) + (inline_delta ? 8192 : 0) + 1023) / 1024 * 1024;
  }
  static constexpr FT_HOST_DEVICE long long bwd_sweep(int slots, int stages, bool inline_delta = false) {
    return 1024 + 4LL * slots * 8192 + stages * bwd_sweep_stage(inline_delta) + 1LL * slots * slots * 8192 +
           8LL * (4 * slots + 3 * stages);
  }
  // attn_fwd_f32_kernel [floats x 4]: Q tile, `stages` (K, V) pairs, FFMA: the P tile (bm x (bn + 8)).
  static constexpr FT_HOST_DEVICE long long fwd_f32(int hd, int bm, int bn, int stages, bool tf32) {
    return 4LL * ((bm + 2LL * stages * bn) * (hd + 4) + (tf32 ? 0 : bm * (bn + 8LL)));
  }
  // attn_bwd_dkdv_f32_kernel: K, V; `stages` x (Q, dO, LSE, D); FFMA: P^T and dS^T (bn x (bm + 8) each).
  static constexpr FT_HOST_DEVICE long long dkdv_f32(int hd, int bm, int bn, int stages, bool tf32) {
    return 4LL * (2LL * bn * (hd + 4) + stages * (2LL * bm * (hd + 4) + 2LL * bm) + (tf32 ? 0 : 2LL * bn * (bm + 8)));
  }
  // attn_bwd_dq_f32_kernel: Q, dO; `stages` (K, V) pairs; FFMA: dS (bm x (bn + 8)).
  static constexpr FT_HOST_DEVICE long long dq_f32(int hd, int bm, int bn, int stages, bool tf32) {
    return 4LL * (2LL * bm * (hd + 4) + 2LL * stages * bn * (hd + 4) + (tf32 ? 0 : bm * (bn + 8LL)));
  }
};

// Registers per thread of a warp-specialized kernel with one producer warpgroup and `consumers` consumer
// warpgroups, `min_blocks` blocks per SM (attn_fwd_tma_kernel's setmaxnreg; the host's can_run and register
// estimates read the same numbers). At launch each thread has the __launch_bounds__ share of the 64 K registers
// (a multiple of 8, at most 255); below 240 the producer drops to 24 and the consumers take what it frees (a
// multiple of 8, at most 240); from 240 on (one consumer, one block per SM) nobody moves.
struct FtWarpRoleRegs {
  static constexpr FT_HOST_DEVICE int producer() { return 24; }
  static constexpr FT_HOST_DEVICE int entry(int consumers, int min_blocks) {
    const int share = 65536 / ((consumers + 1) * 128 * min_blocks) / 8 * 8;
    return share < 255 ? share : 255;
  }
  static constexpr FT_HOST_DEVICE bool realloc(int consumers, int min_blocks) { return entry(consumers, min_blocks) < 240; }
  static constexpr FT_HOST_DEVICE int consumer(int consumers, int min_blocks) {
    const int e = entry(consumers, min_blocks);
    if (!realloc(consumers, min_blocks)) return e;
    const int taken = (e + (e - producer()) / consumers) / 8 * 8;
    return taken < 240 ? taken : 240;
  }
};


#ifndef __CUDACC_RTC__
static_assert(sizeof(FtAttnFwdParams<void>) == 6 * 8 + 12 * 8 + 7 * 4 + 4, "FtAttnFwdParams: 172 bytes of members, padded to 8");
static_assert(sizeof(FtAttnFwdTmaParams<void>) == 192 + 4 * 128 + 64, "FtAttnFwdTmaParams: the forward's 176 bytes padded to 64, 4 maps, batch, unit_group and sched padded to 64");
static_assert(sizeof(FtAttnBwdParams<void>) == 13 * 8 + 6 * 8 + 11 * 4 + 4, "FtAttnBwdParams: 200 bytes, no padding");
static_assert(sizeof(FtAttnBwdTmaParams<void>) == 256 + 7 * 128 + 64, "FtAttnBwdTmaParams: the backward's 200 bytes padded to 64, 7 maps, unit_group, chunks, tail_first and tail_parts padded to 64");
static_assert(sizeof(FtAttnNaiveParams<void>) == 4 * 8 + 5 * 4 + 4, "FtAttnNaiveParams: 52 bytes of members, padded to 8");
static_assert(sizeof(FtAttnEagerParams) == 4 * 8 + 10 * 4 + 4 + 4, "FtAttnEagerParams: 76 bytes of members, padded to 8");
#endif

