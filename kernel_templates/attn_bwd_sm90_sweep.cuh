// kernel_templates/attn_bwd_sm90_sweep.cuh: the windowed sweep, the attn_bwd_fused family's tunable mma = 92
// (sm_90a): dK, dV and dQ of a causal sliding-window backward at head_dim 64 (GPT-OSS: window 128, 64 / 8 heads)
// in one pass, with no atomics, no fp32 dQ accumulator and no recomputed S or dP. Deterministic.
//
// Why a third way: under a window a 64-row query tile sees at most kSlots consecutive 64-key tiles (3 for a window
// of up to 129 keys when seq_k - seq_q is a multiple of 64), and a key tile is seen by kSlots consecutive query tiles.
// mma 91's key-tile blocks add every item's dQ into an fp32 accumulator (GPT-OSS: 268 MB zeroed, three adds a row,
// converted); dq_delta + dkdv recompute S and dP in a second pass. Here a block sweeps a chunk of query tiles in
// order for one (kv head, batch) pair, and its kSlots consumer warpgroups hold the key tiles the current query tile
// sees: warpgroup w holds the key tiles of local index lt = w, w + kSlots, w + 2 kSlots, ... (local: counted from the
// chunk's first key tile, kt0), each one's dK and dV in registers over the kSlots query tiles that see it, and
// writes it out when it leaves. Items (query tile li of the chunk, query head h of the GQA group), heads inner;
// per item n:
//   every consumer warpgroup, on its key tile: S^T = K Q^T, dP^T = V dO^T (ss), P^T from LSE, dV += P^T dO (rs),
//     dS^T = P^T (dP^T - D) (ft_bwd_item_to_ds), its 64 rows of dS^T into the item's dS^T tile (kSlots x 64 keys x
//     64 queries, 128-byte swizzle), dK += dS^T Q (rs);
//   the item's owner, warpgroup n % kSlots (dS^T tile n % kSlots is its own): dQ = dS K over the kSlots x 64 keys
//     (ss: the tile read M-major, every slot's K tile N-major), complete, stored as T (x scale) straight to dQ.
// Key tiles outside [0, seq_k) (at the sequence's ends) run on the zeros TMA fills in; their dS^T rows are stored
// as zeros and their dK, dV dropped.
//
// Chunks: the grid is (tp.chunks, heads_kv, batch); chunk c takes query tiles [c q_tiles / chunks, (c + 1) q_tiles /
// chunks), at least kSlots of them (the host's rule). The kSlots - 1 key tiles at each end of a chunk are shared with
// the neighbouring chunk: each side writes its fp32 partial into the workspace p.ws, and the second launch of the
// kernel (convert = 1) adds the two (earlier chunk first: the same bits on every run) and writes dK (x scale), dV.
// Workspace (FtSweepPlan::ws_tile): per (batch, kv head) pair, chunk and side (0: head tiles, shared with chunk c - 1;
// 1: tail tiles, shared with c + 1), kSlots - 1 tiles of 64 x 64 floats (key rows, row-major) for dK; then as many
// for dV. Every tile the second launch reads was written by the main pass: nothing to zero. Keys that no query
// sees (before the first query tile's window) get zeros from chunk 0.
//
// Roles: warpgroup 0 is the producer (setmaxnreg down). Thread 0 issues the TMA copies: the K and V tiles of a key
// tile as it enters (all kSlots at the chunk's first query tile, then one per query tile) into its slot's buffer
// (two per slot, alternating, "kv full" mbarrier each), and per item Q and dO into a ring of kStages stages
// (mbarriers "loaded", with the bytes, and "empty"). Warp 1 loads each item's LSE and D rows into the stage ("full").
// A K / V buffer is refilled (two of its slot's tiles later) only after the stage ring has moved past every item that
// read it: it is loaded for query tile li right after the wait for item li G - kStages's stage (G: the GQA group),
// and its previous tile's last reader was query tile li - kSlots - 1, items up to (li - kSlots) G - 1: done, as
// kStages <= kSlots <= kSlots G + 1.
// With D inline (kInlineDelta, attn_bwd_fused_delta) the producer also loads each item's O tile, and its warps 2
// and 3 sum D = rowsum(dO * O) of a row each from the stage's dO and O tiles once their bytes are in ("loaded"),
// into the stage (the consumers read it there) and to p.delta (attn_bwd_dsink reads it); a stage is "full" once the
// LSE (and D) rows are in, and the consumers wait for both.
// Handoffs between the consumer warpgroups, mbarriers per dS^T tile b: "ds full" (every consumer thread arrives after
// its rows, owner b waits) and "ds free" (owner b's threads arrive once its dQ has completed; the others wait before
// they next write the tile, kSlots items later). Neither side can complete a phase twice before the other has
// waited for it, and no warpgroup waits for another non-owner (named barriers made the two non-owners meet: 8.6 %
// of the samples, session 29's ncu).
//
// Shared memory (FtAttnSmem::bwd_sweep), from the first 1024-byte boundary: per slot two (K, V) buffers of 8 KiB
// tiles, kStages x [Q | dO | (O |) LSE | D] (rounded up to 1 KiB), kSlots dS^T tiles (kSlots x 8 KiB each), then the
// mbarriers: kv full per (slot, buffer); loaded, full and empty per stage; ds full and ds free per dS^T tile.
#pragma once

#include "attn_params.cuh"
#include "ft/attn_bwd.cuh"
#include "ft/copy.cuh"
#include "ft/mask.cuh"
#include "ft/mma.cuh"
#include "ft/tma.cuh"
#include "ft/wgmma.cuh"

// The sweep's geometry for one problem (64-row query tiles, 64-key tiles), shared by the main pass and the second
// launch.
template <int kSlots>
struct FtSweepPlan {
  int q_tiles, chunks, offset, window;
  __device__ __forceinline__ FtSweepPlan(int seq_q, int seq_k, int window_, int chunks_)
      : q_tiles((seq_q + 63) / 64), chunks(chunks_), offset(seq_k - seq_q), window(window_) {}
  // The first query tile of chunk c (c = chunks: one past the last).
  __device__ __forceinline__ int chunk_begin(int c) const { return int(static_cast<long long>(c) * q_tiles / chunks); }
  // The first key tile query tile i sees (may be negative): floor((64 i + offset - window + 1) / 64), the tile of the
  // window's first key for the tile's first row.
  __device__ __forceinline__ int first_key_tile(int i) const {
    const int a = 64 * i + offset - window + 1;
    return a >= 0 ? a / 64 : -((63 - a) / 64);
  }
  // The workspace tile (in tiles of 4096 floats from p.ws) of pair (b heads_kv + h_kv), chunk c, side, tile t.
  __device__ __forceinline__ long long ws_tile(int pair, int c, int side, int t) const {
    return ((static_cast<long long>(pair) * chunks + c) * 2 + side) * (kSlots - 1) + t;
  }
  // Floats from dK's workspace tiles to dV's.
  __device__ __forceinline__ long long ws_dv(int pairs) const { return static_cast<long long>(pairs) * chunks * 2 * (kSlots - 1) * 4096; }
};

// The second launch (convert = 1): dK (x scale) and dV of the key tiles two chunks share, tail partial of chunk c - 1
// plus head partial of chunk c. Grid (ceil((chunks - 1) (kSlots - 1) 1024 / threads), heads_kv, batch): one thread
// per four consecutive floats of a tile row.
template <typename T, int kSlots>
__device__ __forceinline__ void ft_bwd_sweep_reduce(const FtAttnBwdParams<T>& p, int chunks) {
  const FtSweepPlan<kSlots> plan(p.seq_q, p.seq_k, p.window, chunks);
  const int h_kv = blockIdx.y, b = blockIdx.z;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(chunks - 1) * (kSlots - 1) * 1024) return;
  const int j = int(i / 1024), e = int(i % 1024);
  const int c = 1 + j / (kSlots - 1), t = j % (kSlots - 1);
  const int kt = plan.first_key_tile(plan.chunk_begin(c)) + t;
  const int row = e / 16, col = (e % 16) * 4, key = kt * 64 + row;
  if (kt < 0 || key >= p.seq_k) return;
  const int pair = b * p.heads_kv + h_kv;
  const long long tail = plan.ws_tile(pair, c - 1, 1, t) * 4096 + row * 64 + col;
  const long long head = plan.ws_tile(pair, c, 0, t) * 4096 + row * 64 + col;
  const long long dv = plan.ws_dv(p.batch * p.heads_kv);
  const long long at = b * p.k_sb + h_kv * p.k_sh + key * p.k_ss + col;
  const float4 k0 = *reinterpret_cast<const float4*>(p.ws + tail), k1 = *reinterpret_cast<const float4*>(p.ws + head);
  const float4 v0 = *reinterpret_cast<const float4*>(p.ws + dv + tail), v1 = *reinterpret_cast<const float4*>(p.ws + dv + head);
  uint2 out;
  out.x = FtMma<T>::pack((k0.x + k1.x) * p.scale, (k0.y + k1.y) * p.scale);
  out.y = FtMma<T>::pack((k0.z + k1.z) * p.scale, (k0.w + k1.w) * p.scale);
  *reinterpret_cast<uint2*>(p.dk + at) = out;
  out.x = FtMma<T>::pack(v0.x + v1.x, v0.y + v1.y);
  out.y = FtMma<T>::pack(v0.z + v1.z, v0.w + v1.w);
  *reinterpret_cast<uint2*>(p.dv + at) = out;
}

// kConsumers: consumer warpgroups = key-tile slots (2 or 3; the host requires the window's tiles per query tile to
// fit). block_m (64) and the template's argument order are attn_bwd_fused's (wgmma_name).
template <typename T, int kHeadDim, int kBlockM, int kConsumers, int kStages, bool kCausal, bool kWindow,
          bool kInlineDelta = false>
__global__ void __launch_bounds__((kConsumers + 1) * 128, 1)
    attn_bwd_fused_sweep_tma_kernel(const __grid_constant__ FtAttnBwdTmaParams<T> tp) {
  static_assert(kHeadDim == 64, "head_dim 64: a consumer warpgroup holds one key tile's dK and dV (32 + 32 registers)");
  static_assert(kBlockM == 64, "64-row query tiles against 64-key tiles");
  static_assert(kConsumers == 2 || kConsumers == 3, "2 or 3 key-tile slots");
  static_assert(kCausal && kWindow, "a causal sliding window: the band of key tiles the slots hold");
  static_assert(kStages >= 1 && kStages <= kConsumers, "1..kSlots stages (the K / V buffers' refill rule)");
  enum : int {
    kSlots = kConsumers,
    kTile = 64 * 64 * 2,  // [bytes] a 64 x 64 tile of T
    kStageBytes = int(FtAttnSmem::bwd_sweep_stage(kInlineDelta)),
    kLseAt = (kInlineDelta ? 3 : 2) * kTile,  // [bytes] in a stage: Q, dO, [O,] then LSE and D (64 floats each)
    kDsBytes = kSlots * kTile,
    kThreadsC = 128 * kConsumers,
    kRealloc = FtWarpRoleRegs::realloc(kConsumers, 1),
    kConsumerRegs = FtWarpRoleRegs::consumer(kConsumers, 1),
  };
  static_assert(FtAttnSmem::bwd_sweep(kSlots, kStages, kInlineDelta) ==
                    1024 + 4LL * kSlots * kTile + 1LL * kStages * kStageBytes + 1LL * kSlots * kDsBytes +
                        8LL * (4 * kSlots + 3 * kStages),
                "the host's shared memory size is this layout's");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const FtAttnBwdParams<T>& p = tp.a;
  if (p.convert) {
    ft_bwd_sweep_reduce<T, kSlots>(p, tp.chunks);
    return;
  }
  extern __shared__ unsigned char ft_smem_bwd_sweep[];
  const unsigned smem_raw = ft_smem_u32(ft_smem_bwd_sweep);
  const unsigned smem_kv = (smem_raw + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  const unsigned smem_stages = smem_kv + unsigned(4 * kSlots * kTile);
  const unsigned smem_ds = smem_stages + unsigned(kStages * kStageBytes);
  const unsigned bars = smem_ds + unsigned(kSlots * kDsBytes);
  auto k_buf = [&](int slot, int buf) { return smem_kv + unsigned((2 * slot + buf) * 2 * kTile); };  // V: + kTile
  auto kv_full = [&](int slot, int buf) { return bars + 8u * unsigned(2 * slot + buf); };
  auto loaded = [&](int st) { return bars + 8u * unsigned(2 * kSlots + st); };
  auto full = [&](int st) { return bars + 8u * unsigned(2 * kSlots + kStages + st); };
  auto empty = [&](int st) { return bars + 8u * unsigned(2 * kSlots + 2 * kStages + st); };
  auto ds_full = [&](int t) { return bars + 8u * unsigned(2 * kSlots + 3 * kStages + t); };
  auto ds_free = [&](int t) { return bars + 8u * unsigned(3 * kSlots + 3 * kStages + t); };
  auto stage = [&](int st) { return smem_stages + unsigned(st * kStageBytes); };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  const int c = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv;
  const FtSweepPlan<kSlots> plan(p.seq_q, p.seq_k, p.window, tp.chunks);
  const int c0 = plan.chunk_begin(c), n_tiles = plan.chunk_begin(c + 1) - c0;
  const int kt0 = plan.first_key_tile(c0);  // the key tile of local index 0
  const int n_items = n_tiles * group;
  // The local key tile slot w holds while query tile li is swept: the one of li .. li + kSlots - 1 that is w mod kSlots.
  auto slot_tile = [](int w, int li) { return li + (w - li % kSlots + kSlots) % kSlots; };

  if (threadIdx.x == 0) {
    for (int i = 0; i < 2 * kSlots; ++i) ft_mbarrier_init(kv_full(i / 2, i % 2), 1);
    for (int st = 0; st < kStages; ++st) {
      ft_mbarrier_init(loaded(st), 1);                         // the TMA thread, with the bytes
      ft_mbarrier_init(full(st), kInlineDelta ? 32 + 64 : 32);  // the LSE (/ D) warp; inline: the two D warps
      ft_mbarrier_init(empty(st), kThreadsC);                  // every consumer thread, after its last read of the stage
    }
    for (int i = 0; i < kSlots; ++i) {
      ft_mbarrier_init(ds_full(i), kThreadsC);  // every consumer thread, after its dS^T rows of the item
      ft_mbarrier_init(ds_free(i), 128);        // the owner's threads, once its dQ has completed
    }
    ft_fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // The producer (one branch of the role if / else: setmaxnreg takes effect only so, HOPPER.md).
    if constexpr (kRealloc) ft_setmaxnreg_dec<FtWarpRoleRegs::producer()>();
    if (threadIdx.x == 0) {
      for (int n = 0, li = 0, h = 0; n < n_items; ++n) {
        const int st = n % kStages;
        if (n >= kStages) ft_mbarrier_wait(empty(st), unsigned(n / kStages - 1) & 1u);
        if (h == 0) {  // the key tiles entering at query tile li (all kSlots at the first)
          for (int lt = li == 0 ? 0 : li + kSlots - 1; lt < li + kSlots; ++lt) {
            const int slot = lt % kSlots, buf = (lt / kSlots) & 1;
            ft_mbarrier_arrive_expect_tx(kv_full(slot, buf), unsigned(2 * kTile));
            ft_tma_load_4d(k_buf(slot, buf), tp.k_map, kv_full(slot, buf), 0, (kt0 + lt) * 64, h_kv, b);
            ft_tma_load_4d(k_buf(slot, buf) + kTile, tp.v_map, kv_full(slot, buf), 0, (kt0 + lt) * 64, h_kv, b);
          }
        }
        const int m0 = (c0 + li) * 64, hq = h_kv * group + h;
        ft_mbarrier_arrive_expect_tx(loaded(st), unsigned((kInlineDelta ? 3 : 2) * kTile));
        ft_tma_load_4d(stage(st), tp.q_map, loaded(st), 0, m0, hq, b);
        ft_tma_load_4d(stage(st) + kTile, tp.do_map, loaded(st), 0, m0, hq, b);
        if constexpr (kInlineDelta) ft_tma_load_4d(stage(st) + 2 * kTile, tp.o_map, loaded(st), 0, m0, hq, b);
        if (++h == group) h = 0, ++li;
      }
    } else if (warp == 1) {
      // LSE (and D, unless inline) of each item's rows (zeros past seq_q) by plain loads into the stage; every lane
      // arrives on the stage's full barrier after its stores (release; the consumers' wait acquires them).
      for (int n = 0, li = 0, h = 0; n < n_items; ++n) {
        const int st = n % kStages;
        if (n >= kStages) ft_mbarrier_wait(empty(st), unsigned(n / kStages - 1) & 1u);
        const int m0 = (c0 + li) * 64;
        const long long row0 = (static_cast<long long>(b) * p.heads_q + h_kv * group + h) * p.seq_q + m0;
        float* dst = reinterpret_cast<float*>(ft_smem_bwd_sweep + (stage(st) + kLseAt - smem_raw));
#pragma unroll
        for (int r = lane; r < 64; r += 32) {
          const bool in = m0 + r < p.seq_q;
          dst[r] = in ? p.lse[row0 + r] : 0.f;
          if constexpr (!kInlineDelta) dst[64 + r] = in ? p.delta[row0 + r] : 0.f;
        }
        ft_mbarrier_arrive(full(st));
        if (++h == group) h = 0, ++li;
      }
    } else if (kInlineDelta && warp >= 2) {
      // Warps 2 and 3, D inline: D = rowsum(dO * O) of row r = threadIdx.x - 64 of each item, in fp32, from the
      // stage's dO and O tiles once their bytes are in (row r's 16-byte chunk c sits at chunk c ^ (r % 8): the 128-byte
      // swizzle), into the stage and to p.delta (attn_bwd_dsink reads it); zero past seq_q (TMA's zero rows).
      const int r = threadIdx.x - 64;
      for (int n = 0, li = 0, h = 0; n < n_items; ++n) {
        const int st = n % kStages;
        ft_mbarrier_wait(loaded(st), unsigned(n / kStages) & 1u);
        const unsigned char* row = ft_smem_bwd_sweep + (stage(st) + unsigned(kTile + r * 128) - smem_raw);
        float d = 0.f;
#pragma unroll
        for (int ch = 0; ch < kHeadDim / 8; ++ch) {
          const int at = ((ch ^ (r % 8)) << 4);
          const FtVec<T, 8> x = *reinterpret_cast<const FtVec<T, 8>*>(row + at);
          const FtVec<T, 8> o = *reinterpret_cast<const FtVec<T, 8>*>(row + kTile + at);
#pragma unroll
          for (int e = 0; e < 8; ++e) d += to_float(x.v[e]) * to_float(o.v[e]);
        }
        reinterpret_cast<float*>(ft_smem_bwd_sweep + (stage(st) + kLseAt - smem_raw))[64 + r] = d;
        const int m0 = (c0 + li) * 64;
        if (m0 + r < p.seq_q) p.delta[(static_cast<long long>(b) * p.heads_q + h_kv * group + h) * p.seq_q + m0 + r] = d;
        ft_mbarrier_arrive(full(st));
        if (++h == group) h = 0, ++li;
      }
    }
  } else {
    if constexpr (kRealloc) ft_setmaxnreg_inc<kConsumerRegs>();
    const int w = ft_warp_uniform(wg - 1);
    const int g = lane / 4, t4 = lane % 4;
    const int row = (warp % 4) * 16 + g;  // this thread's key rows of its tile (and row + 8); query rows of dQ
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const FtAttnMask<kCausal, kWindow> mask(p.seq_q, p.seq_k, p.window, p.sink_tokens);
    const long long kv_head = b * p.k_sb + h_kv * p.k_sh;

    float dk_acc[kHeadDim / 2], dv_acc[kHeadDim / 2];
    ft_zero(dk_acc);
    ft_zero(dv_acc);
    // dK, dV of local key tile lt (this warpgroup's) as it leaves: to the workspace where a neighbouring chunk also
    // sees it (head: the first kSlots - 1 tiles, from chunk 1 on; tail: the tiles past the chunk's last query
    // tile's own, but in the last chunk), else to dK (x scale) and dV; nothing for tiles outside [0, seq_k).
    auto emit = [&](int lt) {
      const int n0 = (kt0 + lt) * 64;
      if (n0 < 0 || n0 >= p.seq_k) return;
      const bool head = c > 0 && lt <= kSlots - 2, tail = c + 1 < tp.chunks && lt >= n_tiles;
      if (!head && !tail) {
        ft_bwd_store_dkdv<T, kHeadDim>(p.dk, p.dv, dk_acc, dv_acc, kv_head, p.k_ss, n0 + row, min(n0 + 64, p.seq_k), p.scale, t4);
        return;
      }
      float* dst = p.ws + plan.ws_tile(b * p.heads_kv + h_kv, c, tail ? 1 : 0, tail ? lt - n_tiles : lt) * 4096;
      const long long dv = plan.ws_dv(p.batch * p.heads_kv);
      // The partial tile in the workspace's 64-column rows (the accumulators are one m64 tile's fragments).
      using Frag = const float(*)[1][kHeadDim / 8][4];
      ft_store_rows_f32<1, kHeadDim / 8>(dst, row - g, 64, *reinterpret_cast<Frag>(dk_acc));
      ft_store_rows_f32<1, kHeadDim / 8>(dst + dv, row - g, 64, *reinterpret_cast<Frag>(dv_acc));
    };

    for (int n = 0, li = 0, h = 0; n < n_items; ++n) {
      const int st = n % kStages, own = n % kSlots;  // the item's stage; its dQ's warpgroup and dS^T tile
      const int lt = slot_tile(w, li), buf = (lt / kSlots) & 1;
      const int n0 = (kt0 + lt) * 64, m0 = (c0 + li) * 64;
      const unsigned kb = k_buf(w, buf), smem_q = stage(st), smem_do = smem_q + unsigned(kTile);
      const unsigned ds = smem_ds + unsigned(own * kDsBytes);
      const float* lse_s = reinterpret_cast<const float*>(ft_smem_bwd_sweep + (smem_q + kLseAt - smem_raw));
      const float* d_s = lse_s + 64;
      ft_mbarrier_wait(kv_full(w, buf), unsigned(lt / (2 * kSlots)) & 1u);
      ft_mbarrier_wait(loaded(st), unsigned(n / kStages) & 1u);
      ft_mbarrier_wait(full(st), unsigned(n / kStages) & 1u);

      // The item in two halves of 32 queries (S^T, dP^T of N = 32: the registers of a half's S^T, dP^T and
      // fragments, 48, beside dK, dV and the rest fit the 160 a consumer has; the whole item's, 96, spilled and
      // serialized every wgmma, C7514). Each half: ft_bwd_item_to_ds (dV += P^T dO left running), its dS^T rows
      // into the tile's half, dK += dS^T Q of its 32 queries.
      const bool in_keys = n0 >= 0 && n0 < p.seq_k;
      // dS^T tile `own` is read last by the dQ of item n - kSlots (its owner's, which arrives on ds_free after it).
      if (n >= kSlots && w != own) ft_mbarrier_wait(ds_free(own), unsigned(n / kSlots - 1) & 1u);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const unsigned q_half = smem_q + unsigned(half * 32 * 128), do_half = smem_do + unsigned(half * 32 * 128);
        float s[16], dp[16];
        unsigned af[2][4], af_ds[2][4];
        ft_bwd_item_to_ds<T, kHeadDim, 32, 64, true>(s, dp, af, af_ds, dv_acc, kb, kb + unsigned(kTile), unsigned(kTile),
                                                     q_half, do_half, unsigned(kTile), mask, p.seq_q, m0 + 32 * half, n0,
                                                     n0 + row, lse_s + 32 * half, d_s + 32 * half, scale_log2, t4);
        // Keys outside [0, seq_k) take no share of dQ (their K rows are TMA's zeros, their P^T whatever the mask
        // says of negative keys); their dK, dV are never written.
        if (!in_keys) {
#pragma unroll
          for (int i = 0; i < 2; ++i) af_ds[i][0] = af_ds[i][1] = af_ds[i][2] = af_ds[i][3] = 0u;
        }
        if (half == 0) ft_bwd_store_ds_t<32, kTile, 0>(ds, af_ds, w * 64 + row, g, t4);
        else ft_bwd_store_ds_t<32, kTile, 4>(ds, af_ds, w * 64 + row, g, t4);
        ft_wgmma_regs_by_tile<T, kHeadDim, 2>(dk_acc, af_ds, q_half, unsigned(kTile));  // dK += dS^T Q
      }
      ft_fence_proxy_async();  // the dS^T stores, read next by wgmma
      ft_mbarrier_arrive(ds_full(own));  // this thread's rows are in (release)
      if (w == own) {
        ft_mbarrier_wait(ds_full(own), unsigned(n / kSlots) & 1u);  // every warpgroup's rows are in
        // dQ = dS K over the slots' keys: A = the dS^T tile M-major (16 keys = 2048 bytes a step), B = slot sl's K
        // tile N-major. The other slots' K tiles have landed (their warpgroups waited for them before their rows
        // came in; these waits pass at once and order the TMA writes for this thread).
#pragma unroll
        for (int sl = 0; sl < kSlots; ++sl) {
          const int lt_s = slot_tile(sl, li);
          if (sl != w) ft_mbarrier_wait(kv_full(sl, (lt_s / kSlots) & 1), unsigned(lt_s / (2 * kSlots)) & 1u);
        }
        float dq[kHeadDim / 2];
        ft_wgmma_fence();
        const unsigned long long da = ft_wgmma_desc(ds, unsigned(kTile), 1024);
#pragma unroll
        for (int sl = 0; sl < kSlots; ++sl) {
          const int lt_s = slot_tile(sl, li);
          const unsigned long long db = ft_wgmma_desc(k_buf(sl, (lt_s / kSlots) & 1), unsigned(kTile), 1024);
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
            FtWgmma<T, kHeadDim>::template ss<1, 1>(dq, ft_wgmma_desc_step(da, (sl * 4 + ks) * 2048),
                                                    ft_wgmma_desc_step(db, ks * 2048), sl + ks > 0);
        }
        ft_wgmma_commit();
        ft_wgmma_wait<0>();  // dQ, and dV, dK of the second half
        ft_fence_regs<kHeadDim / 2>(dq);
        ft_fence_regs<kHeadDim / 2>(dk_acc);
        ft_fence_regs<kHeadDim / 2>(dv_acc);
        const int hq = h_kv * group + h;
        T* const dq_out = p.dq + b * p.q_sb + hq * p.q_sh + 2 * t4;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int q_row = m0 + row + 8 * r;
          if (q_row >= p.seq_q) continue;
#pragma unroll
          for (int nt = 0; nt < kHeadDim / 8; ++nt)
            *reinterpret_cast<unsigned*>(dq_out + q_row * p.q_ss + nt * 8) =
                FtMma<T>::pack(dq[nt * 4 + 2 * r] * p.scale, dq[nt * 4 + 2 * r + 1] * p.scale);
        }
        if (n + kSlots < n_items) ft_mbarrier_arrive(ds_free(own));  // tile `own` free
      }
      ft_wgmma_wait<0>();
      ft_fence_regs<kHeadDim / 2>(dk_acc);
      ft_fence_regs<kHeadDim / 2>(dv_acc);
      ft_mbarrier_arrive(empty(st));  // Q, dO, LSE, D of the stage: this thread's reads are done
      // The key tile leaves the window after this query tile: written out, the accumulators start over (by
      // selects on every item: zeroed under the branch, ptxas serialized every wgmma, C7514).
      const bool leaves = h == group - 1 && lt == li;
      if (leaves) emit(lt);
#pragma unroll
      for (int i = 0; i < kHeadDim / 2; ++i) {
        dk_acc[i] = leaves ? 0.f : dk_acc[i];
        dv_acc[i] = leaves ? 0.f : dv_acc[i];
      }
      if (++h == group) h = 0, ++li;
    }
    if (n_items > 0) {
      const int lt = slot_tile(w, n_tiles - 1);
      if (lt != n_tiles - 1) emit(lt);  // still in the window of the next chunk's first tiles (or past the last)
    }
    // Keys before the first query tile's window: no query sees them.
    if (c == 0 && kt0 > 0) {
      const int rows = min(kt0 * 64, p.seq_k);
      for (int e = threadIdx.x - 128; e < rows * (kHeadDim / 2); e += kThreadsC) {
        const long long at = kv_head + (e / (kHeadDim / 2)) * p.k_ss + 2 * (e % (kHeadDim / 2));
        *reinterpret_cast<unsigned*>(p.dk + at) = 0u;
        *reinterpret_cast<unsigned*>(p.dv + at) = 0u;
      }
    }
  }
#else
  __trap();  // built for a target without wgmma / TMA: the host never launches this (can_run requires sm_90a)
#endif
}
