// kernel_templates/attn_fwd_sm90_tma.cuh: the warp-specialized Hopper (sm_90a) kernel of the attn_fwd family:
// TMA copies completing on mbarriers, a producer warpgroup, kConsumers consumer warpgroups on wgmma.
//
// fp16 / bf16: attn_fwd_tma_kernel. One block per (64 x kConsumers query rows, query heads, batch) with
// kConsumers + 1 warpgroups. Warpgroup 0 is the producer: it gives its registers back (setmaxnreg) and one of
// its threads issues every copy by TMA (tensor maps in FtAttnFwdTmaParams): the Q tile once, then each K and V
// tile into a ring of kStages stages, each copy completing on its own "full" mbarrier. The consumers free a
// stage's K once their Q K^T on it has completed and its V once their P V has ("empty" mbarriers, one arrival per
// consumer warp); the producer refills it. Each consumer warpgroup owns 64 query rows, as in attn_fwd_sm90.cuh:
// S = Q K^T with both operands in shared memory, the online softmax in registers (ft/softmax.cuh), O += P V with
// P from registers. kPipe 2 issues Q K^T of tile i together with P V of tile i - 1 and runs the softmax of tile i
// under the latter. kSched 2 (ping-pong, FA3's inter-warpgroup overlap): the consumer warpgroups issue their
// GEMMs in turns (named barriers), so that one's softmax runs while the others' GEMMs hold the tensor cores.
// kEpilogue 2 stages O in the warpgroup's rows of the Q tile and stores it by TMA. Chosen by the tunable mma = 91.
//
// Shared memory (FtAttnSmem::fwd_tma), from the first 1024-byte boundary: Q (FtSlabOffset<kBlockM>), kStages x
// (K, V) (FtSlabOffset<kBlockN> each), the mbarriers. Named barriers: 1..kConsumers the turns, then one per
// consumer warpgroup for its epilogue.
#pragma once

#include "attn_params.cuh"
#include "ft/copy.cuh"
#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/schedule.cuh"
#include "ft/softmax.cuh"
#include "ft/tma.cuh"
#include "ft/wgmma.cuh"

// kPackHeads: query heads of one GQA group per block (attn_fwd_sm90.cuh): block row r is query
// m0 + r % kRowsPerHead of head h0 + r / kRowsPerHead; a warpgroup's 64 rows lie in one head or span whole heads.
// kMinBlocks: blocks per SM the compiler must fit (__launch_bounds__): short windowed rows (GPT-OSS) want several.
// kExpPoly >= 2: one 8-key column tile in kExpPoly of the interior tiles takes its exponentials on the FMA pipe
// (ft/math.cuh ft_exp2_poly), offloading the SFU; 1: none.
// kRescale 2: FA4's lazy rescale (FtOnlineRow::advance): a row's max moves only when it grows by more than 8 (log2
// units), and O is rescaled only when some max of the thread moved; 1: every tile.
// kPersistent 2: a grid of at most SMs x kMinBlocks blocks, each looping over work units (query block, heads,
// batch) while its producer loads the next unit's Q and K / V under the current one's last tiles and epilogue;
// block b runs units b, b + gridDim.x, ... kPersistent 3: the same grid, the units dealt dynamically (ft/schedule.cuh:
// a global ticket counter, tp.sched; the producer passes each unit to the consumers through a mailbox), so that the
// heaviest-first order balances uneven (causal) units. 1: one block per unit. Always a 1-D grid, heaviest first.
template <typename T, int kHeadDim, int kBlockN, int kConsumers, int kStages, int kPipe, int kSched, int kEpilogue,
          bool kCausal, bool kWindow, bool kLearnedSinks, int kPackHeads = 1, int kMinBlocks = 1, int kExpPoly = 1, int kRescale = 1, int kPersistent = 1>
__global__ void __launch_bounds__((kConsumers + 1) * 128, kMinBlocks)
    attn_fwd_tma_kernel(const __grid_constant__ FtAttnFwdTmaParams<T> tp) {
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "rows of whole 128-byte swizzle slabs");
  static_assert(kBlockN == 16 || kBlockN == 32 || kBlockN == 64 || kBlockN == 128 || kBlockN == 176 || kBlockN == 192,
                "S = Q K^T is one m64nNk16 chain, N = 16, 32, 64, 128, 176 or 192");
  static_assert(kConsumers >= 1 && kConsumers <= 3, "1 to 3 consumer warpgroups");
  static_assert(kStages >= 1 && kPipe >= 1 && kPipe <= 2, "a ring of kStages stages; kPipe 1 or 2");
  static_assert(kMinBlocks >= 1 && (kConsumers + 1) * 128 * kMinBlocks <= 2048, "threads per SM");
  static_assert(kSched == 1 || (kSched == 2 && kConsumers >= 2 && kPipe == 2),
                "ping-pong (kSched 2) takes turns between 2+ consumer warpgroups issuing Q K^T and P V together");
  static_assert(kEpilogue == 1 || kEpilogue == 2, "epilogue 1 (direct) or 2 (staged, TMA store)");
  static_assert(kPersistent >= 1 && kPersistent <= 3, "1 a block per unit, 2 persistent (static), 3 persistent (dynamic)");
  enum : int {
    kThreads = (kConsumers + 1) * 128,
    kBlockM = 64 * kConsumers,
    kRowsPerHead = kBlockM / kPackHeads,  // queries per head in the block
    kNTiles = kBlockN / 8,                // 8-key accumulator tiles of S
    kKSteps = kHeadDim / 16,              // k16 steps of Q K^T
    kPSteps = kBlockN / 16,               // k16 steps of P V
    kSlabs = kHeadDim / 64,               // 64-column slabs of a tile (one TMA box each)
    kTileBytes = kBlockN * kHeadDim * 2,
    kSlabK = kBlockN * 128,               // bytes between the slabs of a K or V tile
    kSlabQ = kBlockM * 128,               // bytes between the slabs of the Q tile
    kRealloc = FtWarpRoleRegs::realloc(kConsumers, kMinBlocks),  // registers per thread: attn_params.cuh
    kConsumerRegs = FtWarpRoleRegs::consumer(kConsumers, kMinBlocks),
    kOwnO = kPersistent >= 2 && kEpilogue == 2,  // the staged O has its own tile (FtAttnSmem::fwd_tma)
    kDynamic = kPersistent == 3,
  };
  static_assert(kPackHeads >= 1 && kBlockM % kPackHeads == 0 && (kRowsPerHead % 64 == 0 || 64 % kRowsPerHead == 0),
                "block rows split evenly over the heads, a warpgroup's 64 rows in one head or over whole heads");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const FtAttnFwdParams<T>& p = tp.a;
  extern __shared__ unsigned char ft_smem_tma[];
  const unsigned smem_q = (ft_smem_u32(ft_smem_tma) + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  const unsigned smem_kv = smem_q + unsigned(FtAttnSmem::fwd_kv(kHeadDim, kBlockM));
  // The staged O: the Q tile itself, or (persistent) its own tile after the K / V stages, so that the next work
  // unit's Q can load under this one's epilogue.
  const unsigned smem_o = kOwnO ? smem_kv + unsigned(2 * kStages * kTileBytes) : smem_q;
  const unsigned bars = smem_q + unsigned(FtAttnSmem::fwd_tma_barriers(kHeadDim, kBlockM, kBlockN, kStages, kOwnO));
  static_assert(FtAttnSmem::fwd_tma(kHeadDim, kBlockM, kBlockN, kStages, kOwnO, kDynamic) ==
                    1024 + FtAttnSmem::fwd_kv(kHeadDim, kBlockM) * (kOwnO ? 2 : 1) + 2LL * kStages * kTileBytes +
                        8LL * (2 + 4 * kStages) + (kDynamic ? FtUnitMailbox::kBytes : 0),
                "the host's shared memory size is this layout's");
  const unsigned q_full = bars, q_empty = bars + 8u;
  auto k_full = [&](int st) { return bars + 8u * unsigned(2 + st); };
  auto v_full = [&](int st) { return bars + 8u * unsigned(2 + kStages + st); };
  auto k_empty = [&](int st) { return bars + 8u * unsigned(2 + 2 * kStages + st); };
  auto v_empty = [&](int st) { return bars + 8u * unsigned(2 + 3 * kStages + st); };
  auto stage_k = [&](int st) { return smem_kv + unsigned(st * 2 * kTileBytes); };  // its V at + kTileBytes
  auto phase_of = [](int it) { return unsigned(it / kStages) & 1u; };              // K / V load `it`'s full barriers
  const FtUnitMailbox mailbox{bars + 8u * unsigned(2 + 4 * kStages), 128 * kConsumers};  // kDynamic only

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
  // Work units: (query block, group of kPackHeads heads, batch) = (m, hb). Sections of tp.unit_group hb's (as many
  // as share the L2 with their K / V: blocks running together read the same keys) follow one another; inside one,
  // the heaviest query blocks (causal: last) come first over its hb's. A block's first unit is blockIdx.x, the
  // next ones + gridDim.x each (kPersistent 2), its next ticket (3), or none (1).
  const int n_m = (p.seq_q + kRowsPerHead - 1) / kRowsPerHead, n_hb = p.heads_q / kPackHeads * tp.batch;
  const int n_units = n_m * n_hb, unit_step = kPersistent == 2 ? int(gridDim.x) : n_units;
  struct Unit {
    int m0, m1, h0, h_kv, b;
  };
  auto unit_of = [&](int u) {
    Unit w;
    const FtSectionSlot at = ft_section_slot(u, n_m, tp.unit_group, n_hb);
    const int hb = at.unit, hg = hb % (p.heads_q / kPackHeads);
    w.m0 = (n_m - 1 - at.inner) * kRowsPerHead;
    w.m1 = min(w.m0 + kRowsPerHead, p.seq_q);
    w.h0 = hg * kPackHeads;
    w.b = hb / (p.heads_q / kPackHeads);
    w.h_kv = int(unsigned(w.h0) / (unsigned(p.heads_q) / unsigned(p.heads_kv)));
    return w;
  };

  if (threadIdx.x == 0) {
    ft_mbarrier_init(q_full, 1);
    ft_mbarrier_init(q_empty, 4 * kConsumers);
    for (int st = 0; st < kStages; ++st) {
      ft_mbarrier_init(k_full(st), 1);
      ft_mbarrier_init(v_full(st), 1);
      ft_mbarrier_init(k_empty(st), 4 * kConsumers);
      ft_mbarrier_init(v_empty(st), 4 * kConsumers);
    }
    if constexpr (kDynamic) mailbox.init();
    ft_fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // The producer (one branch of the role if / else: setmaxnreg takes effect only so, HOPPER.md). Each unit's Q is
    // loaded once the consumers freed the previous one's (and always waited for: a staged epilogue may reuse its
    // memory); K / V load `it` (counted over the block's units) refills stage it % kStages once round
    // it / kStages - 1 of it has been freed.
    if constexpr (kRealloc) ft_setmaxnreg_dec<FtWarpRoleRegs::producer()>();
    if (threadIdx.x == 0) {
      int it = 0, j = 0, u = blockIdx.x;
      for (; u < n_units; ++j) {
        if constexpr (kDynamic) mailbox.put(j, u);
        const Unit w = unit_of(u);
        const FtAttnTiles<kCausal, kWindow> tiles(mask, w.m0, w.m1, kBlockN);
        if (j > 0) ft_mbarrier_wait(q_empty, unsigned(j - 1) & 1u);
        ft_mbarrier_arrive_expect_tx(q_full, unsigned(kBlockM * kHeadDim * 2));
#pragma unroll
        for (int s = 0; s < kSlabs; ++s)
          ft_tma_load_4d(smem_q + unsigned(s * kSlabQ), tp.q_map, q_full, 64 * s, w.m0, w.h0, w.b);
        for (int i = 0; i < tiles.count(); ++i, ++it) {
          const int st = it % kStages, n0 = tiles.tile(i) * kBlockN;
          const unsigned freed = unsigned(it / kStages - 1) & 1u;
          if (it >= kStages) ft_mbarrier_wait(k_empty(st), freed);
          ft_mbarrier_arrive_expect_tx(k_full(st), unsigned(kTileBytes));
#pragma unroll
          for (int s = 0; s < kSlabs; ++s)
            ft_tma_load_4d(stage_k(st) + unsigned(s * kSlabK), tp.k_map, k_full(st), 64 * s, n0, w.h_kv, w.b);
          if (it >= kStages) ft_mbarrier_wait(v_empty(st), freed);
          ft_mbarrier_arrive_expect_tx(v_full(st), unsigned(kTileBytes));
#pragma unroll
          for (int s = 0; s < kSlabs; ++s)
            ft_tma_load_4d(stage_k(st) + unsigned(kTileBytes + s * kSlabK), tp.v_map, v_full(st), 64 * s, n0, w.h_kv, w.b);
        }
        // The next unit. Dynamic: the ticket's latency is the producer's alone, which runs a unit ahead.
        u = kDynamic ? ft_next_unit(tp.sched) : u + unit_step;
      }
      if constexpr (kDynamic) {
        mailbox.put(j, u);  // past the last unit: the consumers stop
        ft_units_done(tp.sched);
      }
    }
  } else {
    // A consumer: warpgroup cw owns block rows [64 cw, 64 cw + 64); this thread rows lr0 and lr0 + 8, i.e. queries
    // packed.query(lr0 + 8 r) of heads packed.head(lr0 + 8 r).
    if constexpr (kRealloc) ft_setmaxnreg_inc<kConsumerRegs>();
    // Not ft_warp_uniform (the backward kernels' form): here it moved the Q descriptors into uniform registers and
    // ptxas then spilled 4-6 reloads into the tile loop of the d128 persistent 3 and d64 block_m 192 configs
    // (session 35, compile only); as a per-thread value the loop spills nothing.
    const int cw = wg - 1;
    const int g = lane / 4, t4 = lane % 4;
    const int lr0 = cw * 64 + (warp % 4) * 16 + g;
    const unsigned q_wg = smem_q + unsigned(cw * 64 * 128);  // this warpgroup's 64 rows in every Q slab
    auto issue_qk = [&](float* s, int st) { ft_wgmma_rows_by_rows<T, kBlockN, kKSteps>(s, q_wg, kSlabQ, stage_k(st), kSlabK); };
    auto pack_p = [&](const float* s, unsigned (*pf)[4]) {
      ft_pack_a_tile<T, kNTiles>(*reinterpret_cast<unsigned(*)[kPSteps][4]>(pf), *reinterpret_cast<const float(*)[kNTiles][4]>(s));
    };
    auto release = [&](unsigned bar) {  // after this warp's wgmma reading the stage completed
      if (lane == 0) ft_mbarrier_arrive(bar);
    };
    // Ping-pong: warpgroup cw issues on barrier 1 + cw once the previous one (cyclically) has issued. Per unit, the
    // last one opens the first turn, and warpgroup 0 takes the turn it passes after its last (every barrier phase
    // gets 128 syncing + 128 arriving threads).
    auto turn_wait = [&] {
      if constexpr (kSched == 2) ft_named_barrier_sync(1 + cw, 256);
    };
    auto turn_pass = [&] {
      if constexpr (kSched == 2) ft_named_barrier_arrive(1 + (cw + 1) % kConsumers, 256);
    };

    int it = 0, u = blockIdx.x;
    for (int j = 0;; ++j, u += kDynamic ? 0 : unit_step) {
      if constexpr (kDynamic) u = mailbox.take(j);
      if (u >= n_units) break;
      const Unit w = unit_of(u);
      const int m0 = w.m0, m1 = w.m1, b = w.b;
      const FtAttnTiles<kCausal, kWindow> tiles(mask, m0, m1, kBlockN);
      const int n_tiles = tiles.count();
      const FtPackedRows<kRowsPerHead> packed{m0, w.h0};  // block row -> query, head
      float acc[kHeadDim / 2];
      ft_zero(acc);
      FtOnlineRow rows[2];
      float sink_log2[2];
      ft_online_rows_init<kLearnedSinks>(rows, sink_log2, [&](int r) { return p.sinks[packed.head(lr0 + 8 * r)]; });
      auto issue_pv = [&](const unsigned (*pf)[4], int st) {
        ft_wgmma_regs_by_tile<T, kHeadDim, kPSteps>(acc, pf, stage_k(st) + unsigned(kTileBytes), kSlabK);
      };
      auto softmax = [&](float* s, int n0, float* alpha) {
        const bool need_mask = ft_attn_tile_needs_mask(mask, m0, m1, n0, kBlockN);
        ft_softmax_tile_if<false, kExpPoly, kRescale == 2>(need_mask, *reinterpret_cast<float(*)[kNTiles][4]>(s), rows, p.scale_log2,
                                  [&](int r, int key) { return mask.visible(packed.query(lr0 + 8 * r), n0 + key); },
                                  FtNoRounding{}, *reinterpret_cast<float(*)[2]>(alpha));
      };
      auto rescale = [&](const float (&alpha)[2]) {
        if (kRescale == 1 || alpha[0] != 1.f || alpha[1] != 1.f) ft_rescale_rows<kHeadDim>(acc, alpha);
      };
      if constexpr (kSched == 2)
        if (cw == kConsumers - 1 && n_tiles > 0) ft_named_barrier_arrive(1, 256);

      ft_mbarrier_wait(q_full, unsigned(j) & 1u);
      if constexpr (kPipe == 1) {
        for (int i = 0; i < n_tiles; ++i) {
          const int st = (it + i) % kStages;
          float s[kBlockN / 2];
          ft_mbarrier_wait(k_full(st), phase_of(it + i));
          issue_qk(s, st);
          ft_wgmma_wait<0>();
          ft_fence_regs<kBlockN / 2>(s);
          release(k_empty(st));
          float alpha[2];
          softmax(s, tiles.tile(i) * kBlockN, alpha);
          rescale(alpha);
          unsigned pf[kPSteps][4];
          pack_p(s, pf);
          ft_mbarrier_wait(v_full(st), phase_of(it + i));
          issue_pv(pf, st);
          ft_wgmma_wait<0>();
          ft_fence_regs<kHeadDim / 2>(acc);
          release(v_empty(st));
        }
      } else {
        unsigned pf[kPSteps][4];
        for (int i = 0; i < n_tiles; ++i) {
          const int st = (it + i) % kStages, sp = (it + i + kStages - 1) % kStages;  // tile i's stage, tile i - 1's
          float s[kBlockN / 2];
          // Both waits before the GEMMs: nothing but wgmma between their issue and the wait (else ptxas serializes them).
          ft_mbarrier_wait(k_full(st), phase_of(it + i));
          if (i > 0) ft_mbarrier_wait(v_full(sp), phase_of(it + i - 1));
          turn_wait();
          issue_qk(s, st);
          // S_i is done after the wait; P_{i-1} V_{i-1} may run on. One branch for the issue and the wait: with two,
          // ptxas sees a path waiting for 1 group with only S_i in flight, and serializes every wgmma.
          if (i > 0) {
            issue_pv(pf, sp);
            turn_pass();
            ft_wgmma_wait<1>();
          } else {
            turn_pass();
            ft_wgmma_wait<0>();
          }
          ft_fence_regs<kBlockN / 2>(s);
          release(k_empty(st));
          float alpha[2];
          softmax(s, tiles.tile(i) * kBlockN, alpha);
          ft_wgmma_wait<0>();  // unconditional: ptxas serializes the wgmma if a path reads acc with P V in flight
          ft_fence_regs<kHeadDim / 2>(acc);
          if (i > 0) release(v_empty(sp));
          rescale(alpha);
          pack_p(s, pf);
        }
        if constexpr (kSched == 2)
          if (cw == 0 && n_tiles > 0) turn_wait();
        if (n_tiles > 0) {
          const int sp = (it + n_tiles - 1) % kStages;
          ft_mbarrier_wait(v_full(sp), phase_of(it + n_tiles - 1));
          issue_pv(pf, sp);
          ft_wgmma_wait<0>();
          ft_fence_regs<kHeadDim / 2>(acc);
          release(v_empty(sp));
        }
      }
      it += n_tiles;
      if constexpr (kOwnO || kEpilogue == 1) release(q_empty);  // every Q K^T of this warp has completed

      // Epilogue: O = acc / l and the LSE (FtOnlineRow::finish; a learned sink joins l there).
      float inv[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float lse;
        inv[r] = rows[r].template finish<false, kLearnedSinks>(warp_sum<4>(rows[r].sum), sink_log2[r], lse);
        const int lr = lr0 + 8 * r, row = packed.query(lr), h = packed.head(lr);
        if (row < p.seq_q) {
          if (t4 == 0) p.lse[(static_cast<long long>(b) * p.heads_q + h) * p.seq_q + row] = lse;
          if (kEpilogue == 1) ft_store_acc_row<T, kHeadDim>(p.o + b * p.o_sb + h * p.o_sh + row * p.o_ss, acc, r, inv[r]);
        }
      }
      if constexpr (kEpilogue == 2) {
        // O in this warpgroup's 64 rows of the staging tile (the Q tile's layout: what a TMA store of the O map's box
        // reads; rows past seq_q are not written). The Q tile: every Q K^T of the warpgroup has completed. Its own
        // tile: the previous unit's store has read it (thread 0 waited before the first barrier).
        ft_named_barrier_sync(1 + kConsumers + cw, 128);
#pragma unroll
        for (int r = 0; r < 2; ++r) ft_stage_acc_row<T, kHeadDim, kBlockM>(smem_o, acc, lr0 + 8 * r, r, inv[r]);
        ft_fence_proxy_async();
        ft_named_barrier_sync(1 + kConsumers + cw, 128);
        if (threadIdx.x % 128 == 0) {
          const int row0 = m0 + (cw * 64) % kRowsPerHead, head = w.h0 + (cw * 64) / kRowsPerHead;
#pragma unroll
          for (int s = 0; s < kSlabs; ++s)
            ft_tma_store_4d(tp.o_map, smem_o + unsigned(cw * 64 * 128 + s * kSlabQ), 64 * s, row0, head, b);
          ft_bulk_commit();
          ft_bulk_wait_read<0>();
        }
        if constexpr (!kOwnO) {  // the store has read O out of the Q tile: the next unit's Q may land there
          ft_named_barrier_sync(1 + kConsumers + cw, 128);
          release(q_empty);
        }
      }
    }
  }
#else
  __trap();  // built for a target without wgmma / TMA: the host never launches this (can_run requires sm_90a)
#endif
}
