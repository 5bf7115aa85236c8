// kernel_templates/attn_bwd_sm90_tma.cuh: the warp-specialized Hopper (sm_90a) backward kernel of the
// attn_bwd_fused family (its tunable mma = 91): dK, dV and dQ in one pass, TMA copies completing on mbarriers, a
// producer warpgroup and kConsumers consumer warpgroups on wgmma.
//
// attn_bwd_fused_tma_kernel: one block per (64 x kConsumers keys, kv head, batch), as attn_bwd_sm90.cuh's loop:
// the items (query head of the GQA group, query tile of kBlockM rows) that see the block's keys, in order. Warpgroup
// 0 is the producer: it gives its registers back (setmaxnreg); one thread issues every copy by TMA (tensor maps in
// FtAttnBwdTmaParams): K and V once, then per item Q and dO into a ring of kStages stages, while warp 1 loads the
// item's LSE and D rows into the stage by plain loads. A stage completes on its "full" mbarrier (the TMA bytes and
// warp 1's 32 arrivals) and is refilled once every consumer thread has freed it ("empty": each arrives after its
// warpgroup's last wgmma reading the stage, dK += dS^T Q, completed). Each consumer warpgroup
// owns 64 keys and runs the transposed products of ft/attn_bwd.cuh per item:
//   S^T = K Q^T, dP^T = V dO^T (ss), P^T from LSE, dV += P^T dO (rs, left running), dS^T = P^T (dP^T - D) into
//   fragments of its own, dS^T (as T) into a shared tile (two buffers, alternating per item), then dK += dS^T Q (rs).
// Every piece of dQ = dS K (ss, fp32) is consumer warpgroup 0's: once both warpgroups' rows are in, it issues its
// first piece, then dK, and stages the piece in shared memory while dK runs (one buffer per piece, "dq full" once
// its threads have written it; FlashAttention-3's order), then any further piece (a piece's fence and "dq full" come
// after the next piece is issued). Once dK and the last piece have
// completed (with one piece: before it is staged, dK no longer beside the staging), warpgroup 0 frees the stage and
// the dS^T buffer before it stages that piece (session 39, one H200: d64 causal -3 %). Warpgroup 1 only signals that
// its rows are in and goes on (named barriers 1 + buffer), waiting only before it overwrites a buffer that
// warpgroup 0's dQ of two items back may still read (named barriers 3 + buffer): it runs up to two items ahead,
// and the two warpgroups' softmax and wgmma phases interleave instead of meeting once per item (session 28: 1-3 %
// faster than one barrier for both and a piece each, same call on one H100). dK (times scale) and dV are stored
// at the end: from the registers (4-byte stores), or with kTmaEpilogue (the host's epilogue 2; blocks that are not
// split pieces) staged in the warpgroup's own rows of the V and K tiles and written by TMA stores (below).
// The producer's warps 2 and 3 are the dQ writers (FlashAttention-3's layout): warp 2 + (piece % 2) waits for a
// piece's "dq full", adds it into the fp32 accumulator p.ws by one bulk reduce-add (cp.reduce.async.bulk add.f32,
// lane 0) and frees the buffer ("dq empty") once the add has read it, so the consumers go on to the next item
// while the add runs. "dq full" and "dq empty" are named barriers (5 + piece, 5 + kDqPieces + piece) of warpgroup
// 0's 128 threads and the writer warp's 32, as FlashAttention-4 hands its dQ over: no mbarrier phases, no spin
// loops, fewer writer registers (spills 48 -> 20 B at d128). Session 38, one H200, against mbarriers in the same
// call: d128 non-causal -0.7 to -1.1 %, causal -1.1 to -1.4 %, Llama / d64 within their noise (docs/NOTES.md).
//
// 80-row items (kBlockM 80, head_dim 128, two consumer warpgroups; FlashAttention-4's non-causal tile): 80 is not a
// wgmma M, so dQ is computed transposed, dQ^T = K^T dS^T (ft_bwd_issue_dq_t: M = 64 head-dim columns, N = the 80
// rows), one piece per 64-column chunk, both still warpgroup 0's (session 44, one H200: a piece per warpgroup behind
// one barrier per item was 5 % slower than 64-row items, this 1-1.5 % faster at d128 non-causal, causal 1 % slower).
// The dS^T tile becomes dS (rows x keys, stmatrix.trans: dQ^T's K-major B operand); dV is issued after dS^T's math
// (ft_bwd_item_to_ds) and waited for before the first piece, so that the pieces fit the registers beside dK and dV
// (ptxas C7512 otherwise); the accumulator is in 80-row blocks of dQ^T fragment order.
//
// 128-row items (kBlockM 128, head_dim 64; FlashAttention-4's d64 tile): S^T and dP^T are m64n128 chains, dS^T is
// computed from the fp32 P^T before either is packed and dV is issued after both (ft_bwd_item_to_ds, as at 80 rows),
// and the two dQ pieces (64-row blocks) take registers of their own instead of S^T's: with S^T's, ptxas serialized
// every wgmma (C7511; session 24's attempt). Session 49, one H100, two rounds against 64-row items in one call: d64
// non-causal 0.931, causal 0.945 (cycles 0.887 / 0.921; fewer shared-memory operand bytes and half the per-item
// costs a row).
//
// dQ's order: with kDeterministic off, the adds into a row block land in whatever order the blocks reach it. With
// it on (bitwise-equal reruns), every piece of the accumulator has a turn counter, and the key blocks add into it
// in key-block order: a block's writer counts the earlier key blocks that visit the item's query tile
// (ft_bwd_blocks_before), waits until the counter reaches that count (ft/order.cuh), adds, frees the buffer once
// the add has read it, waits for the add to complete and passes the turn; the consumers wait for none of it. Each
// block then walks each head's query tiles from the last: under a causal mask every key block visits the last
// tile, so the blocks start together and move down in step (walking up, block n would wait for block 0 to climb to
// its first tile). A block only ever waits for lower key blocks of its own (kv head, batch) pair, which the block
// order (below) starts first. The counters follow the accumulator in p.ws: one int per (batch, query head, 64-row
// block, 64-column chunk), then one per (batch, kv head) pair, zeroed with it. In either order each writer warp,
// once all its adds are complete, counts itself done in its pair's counter (released).
//
// The convert launch (below) is launched programmatically (the host's cuda::launch_programmatic): every block of
// the pass executes griddepcontrol.launch_dependents first, so the convert's blocks start once the pass's last wave
// is resident, on the SMs that wave leaves idle. A convert block waits (acquire) until its pair's counter holds
// every writer of the pair's key blocks, then converts; its last block waits for the whole pass (griddepcontrol.wait)
// so that what follows in the stream sees dK and dV too. Session 33, one H100: -1.3 / -0.5 % on d128 non-causal,
// -1 % with dq_order 2, -3.6 % on GPT-OSS's mma 91 config, the causal shapes within their noise (docs/NOTES.md).
//
// Split tail (tp.tail_parts > 1, any dQ order but the deterministic one; the host's tail 2): 2 x 16 x 64 equal
// blocks on 132 SMs leave the last wave half empty. The host launches a 1-D grid: the blocks in launch order up to
// tp.tail_first, then the last partial wave's n blocks as tail_parts pieces each (piece j of split block t at
// launch index tail_first + j n + t), a piece running items [k j / parts, k (j + 1) / parts) of the block's k.
// Every role of a piece walks only its items; the last of a split block's pieces' dQ writers counts the block's
// writers done in its pair's counter (the convert's wait is a whole block's); its consumers leave fp32 partial dK, dV in the workspace
// and the last piece to finish (a counter per split block and thread) adds the others' and stores
// (ft_bwd_tail_combine).
//
// Block order: the grid (key blocks, heads_kv, batch) is walked in sections of tp.unit_group (kv head, batch)
// pairs, key block 0 of every pair of a section first, then key block 1, ... (ft_section_slot; unit_group 1: one
// pair's key blocks after another's). kMinBlocks: blocks per SM the kernel is compiled for.
//
// Deterministic dQ stores first: the host zeroes only the counters, not the accumulator; each piece's turn-0 writer
// stores it by a bulk copy (the others add after it, in turn) and the convert writes 0 for a piece whose turn
// counter is still 0 (no key block sees its rows). Session 36, one H100: -2.4 % on d128 non-causal dq_order 2. The
// same idea in any order (the piece's first writer by a ticket, the others waiting for its store) was 15 % slower
// there: the blocks of a pair reach a row block together and wait on its first store.
//
// The accumulator p.ws (zeroed before the launch except with deterministic dQ) holds dQ / scale in 64-row blocks
// (80-row items: 80-row blocks, kAccRows, each chunk a dQ^T piece in its fragment order; ft_bwd_convert_dq) per
// (batch, query head): block rb of head h, batch b starts at ((b heads_q + h) ceil(seq_q / 64) + rb) 64 head_dim
// floats; inside it, the dQ split's kDqSplit column chunks of 64 x kDqN floats follow one another, each in wgmma accumulator order with a
// thread's four floats of an 8-column tile together (one 16-byte store each): float 128 (w kDqN / 8 + nt) +
// 4 lane + 2 r + e is row 16 w + lane / 4 + 8 r, column 8 nt + 2 (lane % 4) + e of the chunk. A second launch of the kernel (convert = 1, ft_bwd_convert_dq) writes dQ = T(scale x accumulator).
//
// Shared memory (FtAttnSmem::bwd_tma), from the first 1024-byte boundary: K, V (kBlockN x kHeadDim each, 64-column
// slabs), kStages x [Q | dO | LSE | D] (each rounded up to 1 KiB), two dS^T tiles (kBlockN x kBlockM, 64-query
// slabs), the dQ staging tile (kBlockM x kHeadDim floats, pieces in the accumulator's order), the mbarriers: K / V
// full, per stage full and empty. Named barriers 1, 2: dS^T buffer 0, 1 full (both warpgroups' rows in; with one
// consumer warpgroup, barrier 1 is its four warps'); 3, 4: buffer 0, 1 free; 5.. per dQ piece staged, then per
// piece free (the writers, above).
#pragma once

#include "attn_params.cuh"
#include "ft/attn_bwd.cuh"
#include "ft/copy.cuh"
#include "ft/items.cuh"
#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/order.cuh"
#include "ft/schedule.cuh"
#include "ft/timeline.cuh"
#include "ft/tma.cuh"
#include "ft/wgmma.cuh"

// The second launch (convert = 1): dq = T(scale x accumulator) for every row below seq_q. Grid (ceil(quads /
// (threads FtBwdConvert::quads())), heads_q, batch), quads = ceil(seq_q / kAccRows) kAccRows head_dim / 4 per (batch,
// head) (ft_bwd_convert_quads): a quad is four consecutive accumulator floats, one thread's (r, e) of one 8-column
// accumulator tile. kAccRows 64: columns 8 nt + 2 (lane % 4) + e of rows 16 w + lane / 4 and that + 8, written as two
// pairs of T; 80 (dQ^T pieces): rows 8 nt + 2 (lane % 4) + e of columns 16 w + lane / 4 and that + 8, taken two quads
// at a time (FtBwdConvert::floats), so that each row's two adjacent columns are one pair of T.
// The counters after the accumulator in p.ws (n_rb = ceil(seq_q / kAccRows)): kHeadDim / 64 turns per (batch, query
// head, row block), then one per (batch, kv head) pair.
template <int kHeadDim, int kAccRows, typename T>
__device__ __forceinline__ int* ft_bwd_dq_counters(const FtAttnBwdParams<T>& p, long long n_rb) {
  return reinterpret_cast<int*>(p.ws + static_cast<long long>(p.batch) * p.heads_q * n_rb * kAccRows * kHeadDim);
}
// The per-pair counters after the turns (`turns`: ft_bwd_dq_counters' base): one per (batch, kv head), its blocks'
// finished dQ writers.
template <int kHeadDim, typename T>
__device__ __forceinline__ int* ft_bwd_pair_counters(int* turns, const FtAttnBwdParams<T>& p, long long n_rb) {
  return turns + static_cast<long long>(p.batch) * p.heads_q * n_rb * (kHeadDim / 64);
}

// kStoredFirst (deterministic dQ): the accumulator was not zeroed, each piece's turn-0 writer stored it; a piece
// whose turn counter (after the accumulator) is still 0 had no writer and converts to 0.
template <typename T, int kHeadDim, int kDqN, int kAccRows, bool kStoredFirst>
__device__ __forceinline__ void ft_bwd_convert_dq(const FtAttnBwdParams<T>& p) {
  enum : int { kPieceFloats = kAccRows * kDqN, kBlockFloats = kAccRows * kHeadDim };
  const long long n_rb = (p.seq_q + kAccRows - 1) / kAccRows;
  const long long bh = static_cast<long long>(blockIdx.z) * p.heads_q + blockIdx.y;
  const float* const acc = p.ws + bh * n_rb * kBlockFloats;
  const int* const turns = ft_bwd_dq_counters<kHeadDim, kAccRows>(p, n_rb) + bh * n_rb * (kHeadDim / 64);
  T* const dq = p.dq + blockIdx.z * p.q_sb + blockIdx.y * p.q_sh;
  if constexpr (kAccRows == 64) {
    ft_bwd_convert_quads<FtBwdConvert::quads()>(
        n_rb * kBlockFloats / 4,
        [&](long long q) {
          if constexpr (kStoredFirst) {
            const long long rb = 4 * q / kBlockFloats;
            const int chunk = int(4 * q - rb * kBlockFloats) / kPieceFloats;
            if (__ldcg(turns + rb * (kHeadDim / 64) + chunk) == 0) return make_float4(0.f, 0.f, 0.f, 0.f);
          }
          return __ldcg(reinterpret_cast<const float4*>(acc + 4 * q));
        },
        [&](long long q, const float4& x) {
          const long long i = 4 * q;
          const long long rb = i / kBlockFloats;
          const int rem = int(i - rb * kBlockFloats);
          const int chunk = rem / kPieceFloats, f = rem % kPieceFloats;
          const int lane = (f / 4) % 32, at = f / 128, nt = at % (kDqN / 8), w = at / (kDqN / 8);
          const long long row = rb * 64 + w * 16 + lane / 4;
          T* const out = dq + chunk * kDqN + nt * 8 + 2 * (lane % 4);
          if (row < p.seq_q) *reinterpret_cast<unsigned*>(out + row * p.q_ss) = FtMma<T>::pack(x.x * p.scale, x.y * p.scale);
          if (row + 8 < p.seq_q)
            *reinterpret_cast<unsigned*>(out + (row + 8) * p.q_ss) = FtMma<T>::pack(x.z * p.scale, x.w * p.scale);
        });
  } else {
    // dQ^T pieces (kDqN head-dim columns as the M rows, kAccRows query rows as the N columns): a unit is the quads of
    // lanes l and l + 4 (l / 4 even) of one 128-float accumulator tile, head-dim columns d and d + 1 (and d + 8, d + 9)
    // of rows r and r + 1, written as four pairs of T.
    ft_bwd_convert_quads<FtBwdConvert::quads()>(
        n_rb * kBlockFloats / FtBwdConvert::floats(kAccRows),
        [&](long long u) {
          const long long tile = u / 16;
          const int j = int(u % 16), lane = 8 * (j / 4) + j % 4;
          if constexpr (kStoredFirst) {
            const long long rb = 128 * tile / kBlockFloats;
            const int chunk = int(128 * tile - rb * kBlockFloats) / kPieceFloats;
            if (__ldcg(turns + rb * (kHeadDim / 64) + chunk) == 0) return FtFloat8{};
          }
          const float4* at = reinterpret_cast<const float4*>(acc + 128 * tile) + lane;
          return FtFloat8{__ldcg(at), __ldcg(at + 4)};
        },
        [&](long long u, const FtFloat8& x) {
          const long long tile = u / 16, rb = 128 * tile / kBlockFloats;
          const int j = int(u % 16), lane = 8 * (j / 4) + j % 4;
          const int rem = int(128 * tile - rb * kBlockFloats);
          const int chunk = rem / kPieceFloats, at = (rem % kPieceFloats) / 128;
          const int nt = at % (kAccRows / 8), w = at / (kAccRows / 8);
          const long long row = rb * kAccRows + nt * 8 + 2 * (lane % 4);
          T* const out = dq + chunk * kDqN + w * 16 + lane / 4 + row * p.q_ss;
          const float sc = p.scale;
          if (row < p.seq_q) {
            *reinterpret_cast<unsigned*>(out) = FtMma<T>::pack(x.a.x * sc, x.b.x * sc);
            *reinterpret_cast<unsigned*>(out + 8) = FtMma<T>::pack(x.a.z * sc, x.b.z * sc);
          }
          if (row + 1 < p.seq_q) {
            *reinterpret_cast<unsigned*>(out + p.q_ss) = FtMma<T>::pack(x.a.y * sc, x.b.y * sc);
            *reinterpret_cast<unsigned*>(out + p.q_ss + 8) = FtMma<T>::pack(x.a.w * sc, x.b.w * sc);
          }
        });
  }
}

// The split tail's workspace after the accumulator's counters (the host's attn_bwd_fused tail_workspace): a
// counter per (split block, consumer thread), one per split block for its pieces' dQ writers, then, 16-byte
// aligned, slice (t, j) of split block t's piece j: float4 q of consumer thread i at ((t parts + j) kHeadDim / 4 + q)
// threads + i (dK's kHeadDim / 8 float4, then dV's). Returns the first counter (p.ws is 256-byte aligned).
template <int kHeadDim, int kAccRows, typename T>
__device__ __forceinline__ int* ft_bwd_tail_counters(const FtAttnBwdParams<T>& p) {
  const long long n_rb = (p.seq_q + kAccRows - 1) / kAccRows;
  return ft_bwd_pair_counters<kHeadDim>(ft_bwd_dq_counters<kHeadDim, kAccRows>(p, n_rb), p, n_rb) + p.batch * p.heads_kv;
}

// A split block's piece ends here: each consumer thread leaves its partial dK, dV (kHeadDim floats) in the
// workspace, then counts itself in the counter of (split block, thread); the thread that counts last (the last
// piece to get there) adds the other pieces' partials into its registers and returns true (it stores dK, dV).
template <int kHeadDim, int kAccRows, typename T>
__device__ __forceinline__ bool ft_bwd_tail_combine(float* dk_acc, float* dv_acc, const FtAttnBwdParams<T>& p, int n_tail,
                                                    int tail, int part, int parts, int thread, int threads) {
  int* const counters = ft_bwd_tail_counters<kHeadDim, kAccRows>(p);
  float4* const slices = reinterpret_cast<float4*>(
      (reinterpret_cast<unsigned long long>(counters + static_cast<long long>(n_tail) * (threads + 1)) + 15) & ~15ULL);
  auto at = [&](int piece, int q) {
    return slices + (static_cast<long long>(tail * parts + piece) * (kHeadDim / 4) + q) * threads + thread;
  };
#pragma unroll
  for (int q = 0; q < kHeadDim / 8; ++q) {
    __stcg(at(part, q), make_float4(dk_acc[4 * q], dk_acc[4 * q + 1], dk_acc[4 * q + 2], dk_acc[4 * q + 3]));
    __stcg(at(part, kHeadDim / 8 + q), make_float4(dv_acc[4 * q], dv_acc[4 * q + 1], dv_acc[4 * q + 2], dv_acc[4 * q + 3]));
  }
  __threadfence();
  if (atomicAdd(counters + static_cast<long long>(tail) * threads + thread, 1) != parts - 1) return false;
  __threadfence();
  for (int j = 0; j < parts; ++j) {
    if (j == part) continue;
#pragma unroll
    for (int q = 0; q < kHeadDim / 8; ++q) {
      const float4 k = __ldcg(at(j, q)), v = __ldcg(at(j, kHeadDim / 8 + q));
      dk_acc[4 * q] += k.x, dk_acc[4 * q + 1] += k.y, dk_acc[4 * q + 2] += k.z, dk_acc[4 * q + 3] += k.w;
      dv_acc[4 * q] += v.x, dv_acc[4 * q + 1] += v.y, dv_acc[4 * q + 2] += v.z, dv_acc[4 * q + 3] += v.w;
    }
  }
  return true;
}

// kMinBlocks: blocks per SM the kernel is compiled to fit (__launch_bounds__); with one consumer warpgroup, 2 puts
// two blocks' consumers on an SM, unsynchronized (one's softmax beside the other's wgmma).
// kTimeline (the host's timeline 2, with tail 1; a diagnostic): each block records when its phases ran
// (ft/timeline.cuh) in FtBwdTimeline::slots() words at launch index x slots() after the accumulator's counters,
// 16-byte aligned (the split tail's workspace, unused without it).
// kTmaEpilogue (the host's epilogue 2): dK, dV of a block that is not a split piece leave through shared memory.
// Session 46's timeline (one H100): the register stores took ~7,200 cycles a block at d128 non-causal, about half of
// the per-block fixed cost.
template <typename T, int kHeadDim, int kBlockM, int kConsumers, int kStages, bool kCausal, bool kWindow,
          bool kDeterministic = false, int kMinBlocks = 1, bool kTimeline = false, bool kTmaEpilogue = false>
__global__ void __launch_bounds__((kConsumers + 1) * 128, kMinBlocks)
    attn_bwd_fused_tma_kernel(const __grid_constant__ FtAttnBwdTmaParams<T> tp) {
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 128, "rows of whole 128-byte swizzle slabs, head_dim 64 or 128");
  static_assert(kBlockM == 64 || kBlockM == 80 || kBlockM == 128, "S^T = K Q^T is one m64nNk16 chain, N = 64, 80 or 128");
  static_assert(kBlockM != 80 || (kHeadDim == 128 && kConsumers == 2),
                "80-row items: two consumer warpgroups, head_dim 128 (two dQ^T pieces of 64 head-dim columns)");
  static_assert(kConsumers == 1 || kConsumers == 2, "1 or 2 consumer warpgroups of 64 keys");
  static_assert(kStages >= 1 && kStages <= 4, "1..4 stages");
  enum : int {
    kSwapDq = kBlockM == 80,  // dQ^T = K^T dS^T, a piece per 64-column chunk (80 is not a wgmma M)
    kAccRows = kSwapDq ? kBlockM : 64,  // rows of an accumulator block
    kBlockN = 64 * kConsumers,
    kPSteps = kBlockM / 16,         // k16 steps of P^T dO, dS^T Q
    kSlabs = kHeadDim / 64,         // 64-column slabs of a tile (one TMA box each)
    kKvBytes = kBlockN * kHeadDim * 2,
    kTileBytes = kBlockM * kHeadDim * 2,
    kStageBytes = int(FtAttnSmem::bwd_wgmma_stage(kHeadDim, kBlockM)),
    kSlabKv = kBlockN * 128,
    kSlabQ = kBlockM * 128,
    kDsBytes = kBlockN * kBlockM * 2,
    kSlabDs = (kSwapDq ? kBlockM : kBlockN) * 128,  // dS^T: 64-query slabs of the keys; dS (kSwapDq): 64-key slabs of the rows
    kDqSplit = FtBwdDqSplit::split(kHeadDim, kBlockM, kConsumers),
    kDqN = kHeadDim / kDqSplit,
    kDqPieces = (kBlockM / kAccRows) * kDqSplit,
    kPieceFloats = kAccRows * kDqN,
    kPieceRegs = kPieceFloats / 128,  // a piece's accumulators per consumer thread
    kDqWriters = kDqPieces < 2 ? kDqPieces : 2,  // producer warps 2, 3
    kRealloc = FtWarpRoleRegs::realloc(kConsumers, kMinBlocks),
    kConsumerRegs = FtWarpRoleRegs::consumer(kConsumers, kMinBlocks),
    kBarDqFull = 5,                     // named barriers 5.. per dQ piece: staged (warpgroup 0 + its writer warp)
    kBarDqEmpty = kBarDqFull + kDqPieces,  // then per piece: the writer's add has read the buffer
    kDqBarThreads = 128 + 32,              // each of them: warpgroup 0's threads and the piece's writer warp
    kBarEpi = 13,  // kTmaEpilogue: 13 = warpgroup 0's reads of K are done (both consumers), 14 + cw = a warpgroup's rows staged
  };
  static_assert(kBarDqEmpty + kDqPieces <= (kTmaEpilogue ? kBarEpi : 16), "16 named barriers");
  static_assert(kDqN == 64 || kDqN == 128, "a dQ piece is one m64n64 or m64n128 chain");
  static_assert(kDqPieces == FtAttnSmem::bwd_tma_dq_pieces(kHeadDim, kBlockM, kBlockN), "the host's dQ pieces");
  enum : bool { kBarsInStage = FtAttnSmem::bwd_tma_bars_in_stage(kHeadDim, kBlockM, kBlockN, kStages) };
  static_assert(FtAttnSmem::bwd_tma(kHeadDim, kBlockM, kBlockN, kStages) ==
                    1024 + 2LL * kKvBytes + 1LL * kStages * kStageBytes + 2LL * kDsBytes + 4LL * kBlockM * kHeadDim +
                        (kBarsInStage ? 0 : 8LL * (1 + 2 * kStages)),
                "the host's shared memory size is this layout's");
  static_assert(!kBarsInStage || 2 * kTileBytes + 8 * kBlockM + 8 * (1 + 2 * kStages) <= kStageBytes,
                "the mbarriers fit in the last stage's rounding");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const FtAttnBwdParams<T>& p = tp.a;
  if (p.convert) {
    // Launched programmatically beside the pass (the host): wait until every block of this (kv head, batch) pair has
    // finished its dQ adds (each writer warp counts itself once its adds are complete, see the writers).
    if (threadIdx.x == 0) {
      const long long n_rb = (p.seq_q + kAccRows - 1) / kAccRows;
      const int* done = ft_bwd_pair_counters<kHeadDim>(ft_bwd_dq_counters<kHeadDim, kAccRows>(p, n_rb), p, n_rb) +
                        blockIdx.z * p.heads_kv + blockIdx.y / (p.heads_q / p.heads_kv);
      ft_wait_turn(done, kDqWriters * ((p.seq_k + kBlockN - 1) / kBlockN));
    }
    __syncthreads();
    ft_bwd_convert_dq<T, kHeadDim, kDqN, kAccRows, kDeterministic>(p);
    // The grid completes after the pass (one block waits for it): what follows in the stream sees dK, dV too.
    if (blockIdx.x + 1 == gridDim.x && blockIdx.y + 1 == gridDim.y && blockIdx.z + 1 == gridDim.z) ft_wait_prerequisites();
    return;
  }
  const unsigned long long t_entry = kTimeline ? ft_clock64() : 0ull;
  ft_launch_dependents();  // the convert launch may start once every block of the pass runs (see above)
  extern __shared__ unsigned char ft_smem_bwd_tma[];
  const unsigned smem_raw = ft_smem_u32(ft_smem_bwd_tma);
  const unsigned smem_k = (smem_raw + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  const unsigned smem_v = smem_k + kKvBytes;
  const unsigned smem_stages = smem_v + kKvBytes;
  const unsigned smem_ds = smem_stages + unsigned(kStages * kStageBytes);  // two tiles, item i in tile i % 2
  const unsigned smem_dq = smem_ds + unsigned(2 * kDsBytes);
  // The mbarriers: after the dQ staging tile, or where that passes 227 KiB, after the last stage's D row.
  const unsigned bars = kBarsInStage ? smem_stages + unsigned((kStages - 1) * kStageBytes + 2 * kTileBytes + 8 * kBlockM)
                                     : smem_dq + unsigned(4 * kBlockM * kHeadDim);
  const unsigned kv_full = bars;
  auto full = [&](int st) { return bars + 8u * unsigned(1 + st); };
  auto empty = [&](int st) { return bars + 8u * unsigned(1 + kStages + st); };
  auto stage = [&](int st) { return smem_stages + unsigned(st * kStageBytes); };
  auto staged = [&](int piece) { return smem_dq + unsigned(piece * kPieceFloats * 4); };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  // The block's (key block, kv head, batch): the grid (key blocks, heads_kv, batch) walked in sections of
  // tp.unit_group (kv head, batch) pairs, key blocks in order over each section's pairs (ft_section_slot). A block
  // only ever follows blocks of its pair with lower key blocks (deterministic dQ's turns rely on it).
  // Split tail (tp.tail_parts > 1): launch index tail_first + j n + t is piece j of split block t.
  const int n_kb = (p.seq_k + kBlockN - 1) / kBlockN, n_pairs = p.heads_kv * p.batch;
  const int n_tail = n_kb * n_pairs - tp.tail_first;  // split blocks (with tp.tail_parts > 1)
  int lin = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)), tail = -1, part = 0;
  if (tp.tail_parts > 1 && lin >= tp.tail_first) {
    tail = (lin - tp.tail_first) % n_tail;
    part = (lin - tp.tail_first) / n_tail;
    lin = tp.tail_first + tail;
  }
  unsigned long long* const rec =
      kTimeline ? reinterpret_cast<unsigned long long*>(
                      (reinterpret_cast<unsigned long long>(ft_bwd_tail_counters<kHeadDim, kAccRows>(p)) + 15) & ~15ULL) +
                      static_cast<long long>(lin) * FtBwdTimeline::slots()
                : nullptr;
  const FtSectionSlot slot = ft_section_slot(lin, n_kb, tp.unit_group, n_pairs);
  const int n_block = slot.inner, h_kv = slot.unit % p.heads_kv, b = slot.unit / p.heads_kv;
  const int group = p.heads_q / p.heads_kv;
  const int n0 = n_block * kBlockN;
  const int n1 = min(n0 + kBlockN, p.seq_k);
  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  const FtAttnQueryRange<kCausal, kWindow> rows(mask, n0, n1);
  const int t_first = rows.lo / kBlockM;  // query tiles [t_first, t_first + t_count) of each head of the group
  const int t_count = rows.hi > rows.lo ? (rows.hi + kBlockM - 1) / kBlockM - t_first : 0;
  // A piece of a split block runs items [first, first + n_items) of the block's group * t_count.
  const int first = tail < 0 ? 0 : group * t_count * part / tp.tail_parts;
  const int n_items = tail < 0 ? group * t_count : group * t_count * (part + 1) / tp.tail_parts - first;
  // Item (at.head, at.tile) of the block's range: query head h and first row m0 (deterministic: tiles from the last).
  auto item_rows = [&](const FtItemCursor& at, int& h, int& m0) {
    h = h_kv * group + at.head;
    m0 = (t_first + (kDeterministic ? t_count - 1 - at.tile : at.tile)) * kBlockM;
  };

  if (kTimeline && threadIdx.x == 0) {
    rec[0] = (static_cast<unsigned long long>(ft_smid()) << 32) | unsigned(n_items);
    rec[1] = ft_globaltimer();
    rec[2] = t_entry;
  }
  if (threadIdx.x == 0) {
    ft_mbarrier_init(kv_full, 1);
    for (int st = 0; st < kStages; ++st) {
      ft_mbarrier_init(full(st), 1 + 32);  // the TMA thread (with the bytes) and the LSE / D warp
      ft_mbarrier_init(empty(st), 128 * kConsumers);  // every consumer thread, after its last read of the stage
    }
    ft_fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // The producer (one branch of the role if / else: setmaxnreg takes effect only so, HOPPER.md).
    if constexpr (kRealloc) ft_setmaxnreg_dec<FtWarpRoleRegs::producer()>();
    if (threadIdx.x == 0 && n_items > 0) {
      ft_mbarrier_arrive_expect_tx(kv_full, unsigned(2 * kKvBytes));
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
        ft_tma_load_4d(smem_k + unsigned(s * kSlabKv), tp.k_map, kv_full, 64 * s, n0, h_kv, b);
        ft_tma_load_4d(smem_v + unsigned(s * kSlabKv), tp.v_map, kv_full, 64 * s, n0, h_kv, b);
      }
      FtItemCursor at(first, t_count);
      for (int i = 0; i < n_items; ++i, at.next()) {
        const int st = i % kStages;
        int h, m0;
        item_rows(at, h, m0);
        if (i >= kStages) ft_mbarrier_wait(empty(st), unsigned(i / kStages - 1) & 1u);
        ft_mbarrier_arrive_expect_tx(full(st), unsigned(2 * kTileBytes));
#pragma unroll
        for (int s = 0; s < kSlabs; ++s) {
          ft_tma_load_4d(stage(st) + unsigned(s * kSlabQ), tp.q_map, full(st), 64 * s, m0, h, b);
          ft_tma_load_4d(stage(st) + unsigned(kTileBytes + s * kSlabQ), tp.do_map, full(st), 64 * s, m0, h, b);
        }
      }
    } else if (warp == 1 && n_items > 0) {
      // LSE (times log2 e) and D of each item's rows (zeros past seq_q) by plain loads into the stage; every lane
      // arrives on the stage's full barrier after its stores (release; the consumers' wait acquires them).
      FtItemCursor at(first, t_count);
      for (int i = 0; i < n_items; ++i, at.next()) {
        const int st = i % kStages;
        int h, m0;
        item_rows(at, h, m0);
        if (i >= kStages) ft_mbarrier_wait(empty(st), unsigned(i / kStages - 1) & 1u);
        const long long row0 = (static_cast<long long>(b) * p.heads_q + h) * p.seq_q + m0;
        float* dst = reinterpret_cast<float*>(ft_smem_bwd_tma + (stage(st) + 2 * kTileBytes - smem_raw));
#pragma unroll
        for (int r = lane; r < kBlockM; r += 32) {
          const bool in = m0 + r < p.seq_q;
          dst[r] = in ? p.lse[row0 + r] * 1.4426950408889634f : 0.f;  // LSE log2 e (ft_bwd_probs_t's kLseLog2)
          dst[kBlockM + r] = in ? p.delta[row0 + r] : 0.f;
        }
        ft_mbarrier_arrive(full(st));
      }
    } else if (warp >= 2 && warp - 2 < kDqWriters) {
      // dQ writer of pieces warp - 2, warp, ...: each item's piece into the accumulator, in turn when deterministic.
      const int n_rb = (p.seq_q + kAccRows - 1) / kAccRows;  // row blocks of the accumulator per (batch, head)
      int* const turns = ft_bwd_dq_counters<kHeadDim, kAccRows>(p, n_rb);  // turns (deterministic), then one per pair
      FtItemCursor at(first, t_count);
      for (int i = 0; i < n_items; ++i, at.next()) {
        int h, m0;
        item_rows(at, h, m0);
        int turn = 0;  // the earlier key blocks' adds into this tile (the whole warp counts them)
        if constexpr (kDeterministic) turn = ft_bwd_blocks_before<kBlockM, kBlockN>(mask, p.seq_k, n_block, m0 / kBlockM);
        for (int piece = warp - 2; piece < kDqPieces; piece += 2) {
          ft_named_barrier_sync(kBarDqFull + piece, kDqBarThreads);  // the piece is staged (warpgroup 0 arrives)
          const int rb = piece / kDqSplit, chunk = piece % kDqSplit;
          int* counter = nullptr;
          if (lane == 0) {
            const long long acc_block = (static_cast<long long>(b) * p.heads_q + h) * n_rb + m0 / kAccRows + rb;
            if (m0 / kAccRows + rb < n_rb) {  // rows past seq_q (block_m 128): nothing to add
              counter = turns + acc_block * (kHeadDim / 64) + chunk;
              float* const dst = p.ws + acc_block * (1LL * kAccRows * kHeadDim) + chunk * kPieceFloats;
              if constexpr (kDeterministic) {
                ft_wait_turn(counter, turn);
                ft_fence_proxy_async_global();
              }
              // Deterministic: the first key block's writer (turn 0) stores the piece, the accumulator not zeroed.
              if (kDeterministic && turn == 0) ft_bulk_store(dst, staged(piece), unsigned(kPieceFloats * 4));
              else ft_bulk_reduce_add_f32(dst, staged(piece), unsigned(kPieceFloats * 4));
              ft_bulk_commit();
              ft_bulk_wait_read<0>();
            }
          }
          __syncwarp();
          if (i + 1 < n_items) ft_named_barrier_arrive(kBarDqEmpty + piece, kDqBarThreads);  // the buffer is free
          if constexpr (kDeterministic) {
            if (lane == 0 && counter != nullptr) {
              ft_bulk_wait<0>();  // the add is complete in global memory before the next block's turn
              ft_fence_proxy_async_global();
              ft_pass_turn(counter);
            }
            __syncwarp();  // the warp converged again before the next piece's bar.sync (an aligned barrier)
          }
        }
      }
      // The adds are complete before the block's shared memory goes; then the writer counts itself done in its pair's
      // counter (released: the convert launch acquires it).
      if (lane == 0) {
        ft_bulk_wait<0>();
        if (kTimeline && warp == 2) rec[7] = ft_clock64();
        ft_fence_proxy_async_global();
        int* const pair_done = ft_bwd_pair_counters<kHeadDim>(turns, p, n_rb) + b * p.heads_kv + h_kv;
        if (tail < 0) {
          ft_pass_turn(pair_done);
        } else {  // a split block's pieces: the last of their writers counts the block's kDqWriters for all of them
          int* const pieces_done = ft_bwd_tail_counters<kHeadDim, kAccRows>(p) +
                                   static_cast<long long>(n_tail) * 128 * kConsumers + tail;
          __threadfence();
          if (atomicAdd(pieces_done, 1) == tp.tail_parts * kDqWriters - 1) {
            __threadfence();
            ft_add_release(pair_done, kDqWriters);
          }
        }
      }
    }
  } else {
    if constexpr (kRealloc) ft_setmaxnreg_inc<kConsumerRegs>();
    const int cw = ft_warp_uniform(wg - 1);
    const int g = lane / 4, t4 = lane % 4;
    const unsigned k_wg = smem_k + unsigned(cw * 64 * 128);  // this warpgroup's 64 keys in every K / V slab
    const unsigned v_wg = smem_v + unsigned(cw * 64 * 128);
    const int key0 = n0 + cw * 64 + (warp % 4) * 16 + g;  // this thread's keys: key0 and key0 + 8
    const float kLog2e = 1.4426950408889634f;
    const float scale_log2 = p.scale * kLog2e;

    float dk_acc[kHeadDim / 2], dv_acc[kHeadDim / 2];
    ft_zero(dk_acc);
    ft_zero(dv_acc);
    auto issue_regs_by_tile = [&](float* acc, const unsigned (*af)[4], unsigned smem_b) {
      ft_wgmma_regs_by_tile<T, kHeadDim, kPSteps>(acc, af, smem_b, kSlabQ);
    };

    if (n_items > 0) ft_mbarrier_wait(kv_full, 0);
    if (kTimeline && threadIdx.x == 128) rec[3] = ft_clock64();
    FtItemCursor at(first, t_count);
    for (int i = 0; i < n_items; ++i, at.next()) {
      const int st = i % kStages;
      int h, m0;
      item_rows(at, h, m0);
      const unsigned smem_q = stage(st), smem_do = smem_q + unsigned(kTileBytes);
      const unsigned ds = smem_ds + unsigned((i & 1) * kDsBytes);
      const float* lse_s = reinterpret_cast<const float*>(ft_smem_bwd_tma + (smem_q + 2 * kTileBytes - smem_raw));
      const float* d_s = lse_s + kBlockM;
      ft_mbarrier_wait(full(st), unsigned(i / kStages) & 1u);

      float s[kBlockM / 2], dp[kBlockM / 2];
      unsigned af[kPSteps][4], af_ds[kPSteps][4];
      ft_bwd_item_to_ds<T, kHeadDim, kBlockM, kBlockN, true, true, true>(s, dp, af, af_ds, dv_acc, k_wg, v_wg, kSlabKv, smem_q, smem_do, kSlabQ, mask,
                                                        p.seq_q, m0, n0, key0, lse_s, d_s, scale_log2, t4);
      // The dS^T tile of item i (buffer i % 2) was last read by item i - 2's dQ, which only warpgroup 0 issues
      // (every piece is its own): warpgroup 1 waits for its "free" signal before writing, then signals "full"
      // without waiting, so that it runs ahead of warpgroup 0 by up to two items and the two warpgroups' softmax
      // and wgmma phases interleave instead of meeting once per item. Named barriers 1 + buffer (full: warpgroup 1
      // arrives, 0 waits) and 3 + buffer (free: 0 arrives after the item's last dQ has completed, 1 waits); one
      // pair per buffer, so that neither side can arrive twice at a barrier before the other has used it.
      if (kConsumers == 2 && cw == 1 && i >= 2) ft_named_barrier_sync(3 + (i & 1), 256);
      // 80-row items (kSwapDq): the tile is dS (rows x keys, stmatrix.trans), dQ^T's B operand.
      if constexpr (kSwapDq) ft_bwd_stsm_ds<kBlockM, kSlabDs>(ds, af_ds, key0 - n0 - g, lane);
      else ft_bwd_stsm_ds_t<kBlockM, kSlabDs>(ds, af_ds, key0 - n0 - g, lane);
      ft_fence_proxy_async();  // the dS^T stores, read next by wgmma
      if constexpr (kConsumers == 2) {
        if (cw == 1) ft_named_barrier_arrive(1 + (i & 1), 256);
        else ft_named_barrier_sync(1 + (i & 1), 256);  // every warpgroup's rows are in
      } else {
        ft_named_barrier_sync(1, 128);  // the warpgroup's four warps' rows are in
      }
      // FlashAttention-3's order: this warpgroup's first dQ piece, then dK += dS^T Q (it reads the dS^T fragments
      // and Q, which dQ does not touch), so that the piece is staged while dK runs. dV (issued before the barrier)
      // and the piece complete at the first wait; dK, and with it the stage's last read, at the next full wait.
      // 80-row items: dV is waited for here, so that P^T's fragments are free before a dQ^T piece takes S^T's
      // registers (with both live, ptxas serialized every wgmma for lack of registers, C7512); dV has had dS^T's
      // stores and the barrier to run.
      if constexpr (kSwapDq) {
        ft_wgmma_wait<0>();
        ft_fence_regs<kHeadDim / 2>(dv_acc);
      }
      bool dk_issued = false;
      // Every piece is warpgroup 0's (warpgroup 1 skips the loop); the loop's last piece frees the stage.
      const bool owns_dq = kConsumers == 1 || cw == 0;
#pragma unroll
      for (int piece = owns_dq ? 0 : kDqPieces; piece < kDqPieces; ++piece) {
        const int rb = piece / kDqSplit, chunk = piece % kDqSplit;
        // S^T is spent: its registers take the piece where it fits, but at 128 rows (C7511 with them; see the top)
        constexpr bool kInS = kPieceRegs <= kBlockM / 2 && kBlockM != 128;
        float dq_own[kInS ? 1 : kPieceRegs];
        float* dq = kInS ? s : dq_own;
        if constexpr (kSwapDq)
          ft_bwd_issue_dq_t<T, kBlockM, kBlockN, kSlabDs, kSlabKv>(dq, ds, smem_k + unsigned(chunk * kSlabKv));
        else
          ft_bwd_issue_dq<T, kDqN, kBlockN, kSlabDs, kSlabKv>(dq, ds + unsigned(rb * kSlabDs),
                                                              smem_k + unsigned(chunk * (kDqN / 64) * kSlabKv));
        if (piece > 0) {
          // The previous piece's staging stores are made visible to the bulk add (fence) and handed to its writer
          // only now, after this piece is issued: the chain no longer waits behind the fence while the stores drain
          // (ncu, session 41: 2.7 % of the warp samples at that fence, d128 non-causal). Session 41, one H200, three
          // rounds against the fence before the issue: d128 causal -1.7 %, non-causal -0.8 %, Llama-like -0.7 %
          // (the shapes with two pieces; d64 and GPT-OSS, one piece, unchanged).
          ft_fence_proxy_async();
          ft_named_barrier_arrive(kBarDqFull + piece - 1, kDqBarThreads);
        }
        if (!dk_issued) {
          issue_regs_by_tile(dk_acc, af_ds, smem_q);  // dK += dS^T Q
          dk_issued = true;
          if constexpr (kDqPieces == 1) ft_wgmma_wait<0>();  // dV, the piece and dK
          else ft_wgmma_wait<1>();                           // dV and the piece; dK runs on
          ft_fence_regs<kHeadDim / 2>(dv_acc);
        } else {
          ft_wgmma_wait<0>();
        }
        if (piece == kDqPieces - 1) {
          // dK and every piece have completed: the stage (Q, dO, LSE, D) and the item's dS^T buffer are read. Both are
          // freed here, before the staging waits for the writer (session 39, two H200s, against freeing them after
          // the staging: d64 causal -2.5 %, d128 non-causal -0.9 %, d128 causal and Llama at par).
          ft_fence_regs<kHeadDim / 2>(dk_acc);
          ft_mbarrier_arrive(empty(st));
          if (kConsumers == 2 && i + 2 < n_items) ft_named_barrier_arrive(3 + (i & 1), 256);
        }
        ft_fence_regs<kPieceRegs>(dq);
        // Stage the piece in accumulator order once the writer's add of the previous item has read the buffer,
        // then hand it to the writer (every item stages every piece, rows past seq_q too: each use of a barrier
        // pairs kDqBarThreads threads, the writer freeing the buffer after every item but the last).
        if (i > 0) ft_named_barrier_sync(kBarDqEmpty + piece, kDqBarThreads);
#pragma unroll
        for (int nt = 0; nt < kPieceRegs / 4; ++nt) {
          const unsigned at_f = unsigned(128 * ((warp % 4) * (kPieceRegs / 4) + nt) + 4 * lane);
          asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(staged(piece) + 4 * at_f), "f"(dq[nt * 4]),
                       "f"(dq[nt * 4 + 1]), "f"(dq[nt * 4 + 2]), "f"(dq[nt * 4 + 3])
                       : "memory");
        }
        if (piece == kDqPieces - 1) {
          ft_fence_proxy_async();  // the stores, read next by the bulk add (async proxy)
          ft_named_barrier_arrive(kBarDqFull + piece, kDqBarThreads);
        }
      }
      if (!dk_issued) issue_regs_by_tile(dk_acc, af_ds, smem_q);  // a warpgroup without a dQ piece
      ft_wgmma_wait<0>();  // dK (and dV); nothing left in flight for warpgroup 0 (ptxas needs the wait on every path)
      ft_fence_regs<kHeadDim / 2>(dk_acc);
      ft_fence_regs<kHeadDim / 2>(dv_acc);
      if (!owns_dq) ft_mbarrier_arrive(empty(st));  // warpgroup 1: its reads of the stage are done
      if (kTimeline && i == 0 && threadIdx.x == 128) rec[4] = ft_clock64();
    }
    if (kTimeline && (threadIdx.x == 128 || threadIdx.x == 256)) rec[threadIdx.x == 128 ? 5 : 8] = ft_clock64();
    if (kTmaEpilogue && tail < 0) {
      // dV into the warpgroup's 64 rows of the V tile (read only by its own dP^T, complete), its TMA stores issued;
      // then dK (times scale) into its rows of the K tile once warpgroup 0's dQ has read them (every dQ reads all of
      // K: warpgroup 1 waits on 13, which warpgroup 0 passes at once), stored the same way. One thread of the
      // warpgroup issues (64-key boxes; rows past seq_k are not written) and waits for the reads before it exits.
      const int lr = key0 - n0;  // this thread's first row of the tiles
      const bool issuer = threadIdx.x % 128 == 0, rows_in = n0 + cw * 64 < p.seq_k;
      // acc (times mul) into this warpgroup's rows of `tile` (wg_tile: their first), then its boxes stored by `map`.
      auto stage_and_store = [&](unsigned tile, unsigned wg_tile, const float* acc, float mul, const FtTensorMap& map) {
#pragma unroll
        for (int r = 0; r < 2; ++r) ft_stage_acc_row<T, kHeadDim, kBlockN>(tile, acc, lr + 8 * r, r, mul);
        ft_fence_proxy_async();
        ft_named_barrier_sync(kBarEpi + 1 + cw, 128);
        if (issuer && rows_in) {
#pragma unroll
          for (int s = 0; s < kSlabs; ++s) ft_tma_store_4d(map, wg_tile + unsigned(s * kSlabKv), 64 * s, n0 + cw * 64, h_kv, b);
          ft_bulk_commit();
        }
      };
      stage_and_store(smem_v, v_wg, dv_acc, 1.f, tp.dv_map);
      if constexpr (kConsumers == 2) {
        if (cw == 0) ft_named_barrier_arrive(kBarEpi, 256);
        else ft_named_barrier_sync(kBarEpi, 256);
      }
      stage_and_store(smem_k, k_wg, dk_acc, p.scale, tp.dk_map);
      if (issuer && rows_in) ft_bulk_wait_read<0>();
    } else if (tail < 0 || ft_bwd_tail_combine<kHeadDim, kAccRows>(dk_acc, dv_acc, p, n_tail, tail, part, tp.tail_parts,
                                                                 threadIdx.x - 128, 128 * kConsumers)) {
      // A split block's pieces: each leaves its partial dK, dV; the last to finish adds the others' and stores.
      ft_bwd_store_dkdv<T, kHeadDim>(p.dk, p.dv, dk_acc, dv_acc, b * p.k_sb + h_kv * p.k_sh, p.k_ss, key0, n1, p.scale, t4);
    }
    if (kTimeline && threadIdx.x == 128) {
      rec[6] = ft_clock64();
      rec[9] = ft_globaltimer();
    }
  }
#else
  __trap();  // built for a target without wgmma / TMA: the host never launches this (can_run requires sm_90a)
#endif
}

