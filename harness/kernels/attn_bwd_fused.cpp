// harness/kernels/attn_bwd_fused.cpp: the attn_bwd_fused operation, dK, dV and dQ in one pass (sm_90a), and its
// variants, picked by the tunable mma: 90, the wgmma dkdv loop with cp.async (kernel_templates/attn_bwd_sm90.cuh),
// which also adds each item's dS K into an fp32 dQ accumulator (the workspace) with atomics; 91, the warp-
// specialized TMA kernel (attn_bwd_sm90_tma.cuh: a producer warpgroup, consumer warpgroups of 64 keys, dQ staged
// in shared memory and added by bulk reduce-adds, the accumulator in 64-row blocks of wgmma fragment order, 80-row
// blocks of dQ^T fragment order with block_m 80); 92, the
// windowed sweep (attn_bwd_sm90_sweep.cuh: causal sliding windows at head_dim 64, a block per chunk of query tiles,
// the window's key tiles held by its consumer warpgroups, dQ complete per item, no accumulator).
// launch() zeroes the accumulator (mma 91 with dq_order 2: only its counters), runs the pass, then the same kernel
// with convert = 1 (dq = scale * accumulator in the dtype), all three timed; mma 92 runs its pass and, with more
// than one chunk, the second launch that adds the key tiles two chunks share. dK and dV are deterministic; dQ is too with dq_order 2 (mma 91: the adds
// in key-block order, turn counters after the accumulator). The tuner's alternative to attn_bwd_dkdv + attn_bwd_dq: `flashtune query backward` takes whichever of the two sums is faster.
#include <algorithm>
#include <cstring>

#include "harness/cuda/buffer.hpp"
#include "harness/kernels/attn_bwd_stage.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

using namespace attn_bwd;

std::string n(std::int64_t v) { return std::to_string(v); }

// The accumulator's rows per (batch, query head): whole blocks of `block` rows: 64 (the mma 91 layout of 64- and
// 128-row items; mma 90 uses the first seq_q of them, row-major) or 80 (mma 91's 80-row items: dQ^T pieces).
std::int64_t acc_block_rows(const BwdConfig& c) { return c.mma == 91 && c.block_m == 80 ? 80 : 64; }
std::int64_t acc_rows(const Shape& s, std::int64_t block) { return (s.seq_q + block - 1) / block * block; }
std::int64_t acc_elements(const Shape& s, std::int64_t block) { return s.batch * s.heads_q * acc_rows(s, block) * s.head_dim; }
// mma 91's counters after the accumulator: deterministic dQ's turns, one per (batch, query head, row block, 64-column
// chunk), then one per (batch, kv head) pair counting its blocks' finished dQ writers (the convert launch waits on it).
std::int64_t turn_counters(const Shape& s, std::int64_t block) {
  return s.batch * s.heads_q * acc_rows(s, block) / block * std::max<std::int64_t>(1, s.head_dim / 64) + s.batch * s.heads_kv;
}
// The accumulator and its counters in the larger of the layouts the problem can take (80-row blocks: head_dim 128).
std::int64_t acc_workspace(const Shape& s) {
  std::int64_t most = acc_elements(s, 64) + turn_counters(s, 64);
  if (s.head_dim == 128) most = std::max(most, acc_elements(s, 80) + turn_counters(s, 80));
  return most;
}

// mma 91's split tail (tail 2): the last partial wave's blocks, at most kTailMaxBlocks of them, each run as 2 or 3
// pieces over ranges of their items (kernel_templates/attn_bwd_sm90_tma.cuh, ft_bwd_tail_combine). After the
// counters: one counter per (split block, consumer thread), one per split block for its pieces' dQ writers, then
// each piece's partial dK, dV (fp32, 16-byte aligned).
constexpr std::int64_t kTailMaxBlocks = 144, kTailMaxParts = 3, kTailThreads = 256;
// Pieces per split block for `blocks` equal blocks on `slots` resident at a time: the k in 2..3 that minimizes the
// last wave's rounds x (1 / k + 0.04 for a piece's start and its partials), if below the unsplit wave's 1; else 1.
std::int64_t tail_parts(std::int64_t blocks, std::int64_t slots) {
  const std::int64_t r = blocks % slots;
  if (r == 0 || r > kTailMaxBlocks) return 1;
  std::int64_t best = 1;
  double best_cost = 1.0;
  for (std::int64_t k = 2; k <= kTailMaxParts; ++k) {
    const double cost = double((k * r + slots - 1) / slots) * (1.0 / double(k) + 0.04);
    if (cost < best_cost) best = k, best_cost = cost;
  }
  return best;
}
// The split tail's floats after the accumulator's counters, for the largest plan (the counters and a 16-byte pad
// included): at most kTailMaxBlocks blocks split, and no more than the problem's blocks of 64 keys.
std::int64_t tail_workspace(const Shape& s) {
  const std::int64_t blocks = std::min(kTailMaxBlocks, (s.seq_k + 63) / 64 * s.heads_kv * s.batch);
  return blocks * (kTailThreads + 1) + 4 + blocks * kTailMaxParts * kTailThreads * s.head_dim;
}

// Key tiles of block_n keys per (kv head, batch): the pass's blocks per pair.
std::int64_t key_blocks(const BwdConfig& c, const Shape& s) { return (s.seq_k + c.block_n - 1) / c.block_n; }

// floor(a / b), b > 0.
std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }

// The 64-key tiles a 64-row query tile sees under the causal window (the same for every tile: the band moves one tile
// per tile): those of its first row's first key through its last row's last.
std::int64_t sweep_tiles(const Shape& s) {
  const std::int64_t off = s.seq_k - s.seq_q;
  return floor_div(63 + off, 64) - floor_div(off - s.window + 1, 64) + 1;
}

// The most SMs the sweep's grid counts on (its workspace is sized for them; a device with more runs fewer chunks
// than blocks it could hold).
constexpr std::int64_t kSweepMaxSms = 264;

// The most chunks per (kv head, batch) pair on any device: every chunk at least `per_chunk` query tiles (so that a
// key tile is shared by two chunks at most), kSweepMaxSms blocks over all pairs.
std::int64_t sweep_max_chunks(const Shape& s, std::int64_t per_chunk) {
  const std::int64_t q_tiles = (s.seq_q + 63) / 64, pairs = std::max<std::int64_t>(1, s.heads_kv * s.batch);
  return std::max<std::int64_t>(1, std::min(q_tiles / std::max<std::int64_t>(1, per_chunk), kSweepMaxSms / pairs));
}

// Chunks per pair: one block per SM for the whole grid (a block takes most of an SM's shared memory).
std::int64_t sweep_chunks(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) {
  const std::int64_t pairs = std::max<std::int64_t>(1, s.heads_kv * s.batch);
  return std::clamp<std::int64_t>(d.num_sms / pairs, 1, sweep_max_chunks(s, c.warpgroups()));
}

// The sweep's workspace [floats]: the head and tail partials (at most 2 tiles of 64 x 64 a side) of every chunk, for
// dK and dV, at the most chunks (two consumer warpgroups); none where the sweep cannot run (no causal window at
// head_dim 64) or runs one chunk.
std::int64_t sweep_workspace(const Shape& s) {
  if (!s.causal || !s.has_window() || s.head_dim != 64) return 0;
  const std::int64_t chunks = sweep_max_chunks(s, 2);
  return chunks < 2 ? 0 : 2 * s.batch * s.heads_kv * chunks * 2 * 2 * 4096;
}

// The backward's parameter struct grown to FtAttnBwdTmaParams: the tensor maps (4-D, 64-column boxes) of Q and dO
// (q_rows-row boxes), K and V (kv_rows), O's as Q's where o_buffer >= 0, dK's and dV's (K's strides, 64-row boxes:
// one consumer warpgroup's keys) where dkdv_maps, and unit_group.
std::vector<KernelArg> tma_arguments(std::vector<KernelArg> shared, const Shape& s, std::int64_t q_rows, std::int64_t kv_rows,
                                     int o_buffer, std::int32_t unit_group, bool dkdv_maps = false) {
  auto& params = std::get<ParamsArg>(shared.at(0));
  BwdParams a;
  std::memcpy(&a, params.bytes.data(), sizeof a);
  using Tma = FtAttnBwdTmaParams<void>;
  params.grow(sizeof(Tma));
  attn::map_heads_tensor(params, offsetof(Tma, q_map), kQ, s, s.seq_q, s.heads_q, a.q_ss, a.q_sh, a.q_sb, q_rows);
  attn::map_heads_tensor(params, offsetof(Tma, do_map), kDout, s, s.seq_q, s.heads_q, a.q_ss, a.q_sh, a.q_sb, q_rows);
  attn::map_heads_tensor(params, offsetof(Tma, k_map), kK, s, s.seq_k, s.heads_kv, a.k_ss, a.k_sh, a.k_sb, kv_rows);
  attn::map_heads_tensor(params, offsetof(Tma, v_map), kV, s, s.seq_k, s.heads_kv, a.k_ss, a.k_sh, a.k_sb, kv_rows);
  if (o_buffer >= 0)
    attn::map_heads_tensor(params, offsetof(Tma, o_map), o_buffer, s, s.seq_q, s.heads_q, a.q_ss, a.q_sh, a.q_sb, q_rows);
  if (dkdv_maps) {
    attn::map_heads_tensor(params, offsetof(Tma, dk_map), kFusedDk, s, s.seq_k, s.heads_kv, a.k_ss, a.k_sh, a.k_sb, 64);
    attn::map_heads_tensor(params, offsetof(Tma, dv_map), kFusedDv, s, s.seq_k, s.heads_kv, a.k_ss, a.k_sh, a.k_sb, 64);
  }
  params.set(offsetof(Tma, unit_group), unit_group);
  return shared;
}

// The tunables only mma 91 reads (its variants 90 and 92 run them at 1): the first one set otherwise, as the line
// that variant refuses the config with.
std::optional<std::string> mma91_option_set(const BwdConfig& c, std::int64_t mma) {
  for (const auto& [name, value] : {std::pair{"min_blocks", c.min_blocks}, std::pair{"unit_group", c.unit_group},
                                    std::pair{"tail", c.tail}, std::pair{"timeline", c.timeline},
                                    std::pair{"epilogue", c.epilogue}})
    if (value != 1) return std::string(name) + " is an mma 91 option; mma " + n(mma) + " takes 1";
  return std::nullopt;
}

class FusedWgmma final : public GradVariant {
 public:
  FusedWgmma()
      : GradVariant({"sm90_wgmma", "attn_bwd_sm90.cuh", {core::DType::f16, core::DType::bf16}, 90,
                     "90 = wgmma, cp.async, dQ by fp32 atomics (sm_90a)", {},
                     {"block_n == 16 * num_warps", "num_warps % 4 == 0",
                      "block_m == 64 || block_m == 128 || (mma == 91 && block_m == 80 && head_dim == 128 && num_warps == 8)",
                      "head_dim % 64 == 0"}}) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (c.mma != 90 && c.mma != 80)  // 80: a config recorded before the selector (this kernel ran it)
      return "mma must be 90 (wgmma, cp.async) or 91 (TMA, warp-specialized), not " + n(c.mma);
    if (c.dq_order != 1) return "mma 90 adds dQ by atomics in any order: dq_order 2 (deterministic) needs mma 91";
    if (auto why = mma91_option_set(c, 90)) return why;
    if (auto why = wgmma_problem(c, s, d, smem_bytes(c, s), registers(c, s))) return "attn_bwd_fused: " + *why;
    return std::nullopt;
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    return wgmma_name("attn_bwd_fused_wgmma_kernel", c, s);
  }
  // One block per key tile, per kv head.
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return grad_launch(key_blocks(c, s), s.heads_kv, c, s, smem_bytes(c, s));
  }

 private:
  // K and V tiles, the dS^T tile (block_n x block_m), the stages, and 1 KiB to align to the swizzle atoms (as the
  // wgmma dkdv).
  static std::int64_t smem_bytes(const BwdConfig& c, const Shape& s) {
    return FtAttnSmem::bwd_wgmma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages), true);
  }
  // Per thread: dK and dV (head_dim / 2 each), dP^T (block_m / 2), S^T or the dQ piece (whichever is larger;
  // dQ lives after S^T is spent), the A fragments (block_m / 4), ~28 others. The dQ piece has head_dim /
  // split columns, split = warpgroups per query row block (at most head_dim / 64).
  static std::int64_t registers(const BwdConfig& c, const Shape& s) {
    const std::int64_t hd = s.head_dim, bm = c.block_m, wg = c.warpgroups();
    const std::int64_t split = std::clamp<std::int64_t>(wg / std::max<std::int64_t>(bm / 64, 1), 1, std::max<std::int64_t>(hd / 64, 1));
    return hd + bm / 2 + std::max(bm / 2, hd / split / 2) + bm / 4 + 28;
  }
};

// mma 91: the producer warpgroup (TMA) and num_warps / 4 consumer warpgroups of 64 keys each; the block has 128
// threads more than num_warps says.
class FusedTma final : public GradVariant {
 public:
  FusedTma()
      : GradVariant({"sm90_tma", "attn_bwd_sm90_tma.cuh", {core::DType::f16, core::DType::bf16}, 91,
                     "91 = TMA + warp-specialized wgmma (sm_90a; a producer warpgroup, num_warps / 4 <= 2 consumer "
                     "warpgroups of 64 keys, dQ by bulk fp32 reduce-adds; head_dim 64 or 128)",
                     {}, {"mma != 91 || (num_warps <= 8 && head_dim <= 128)"}}) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (c.num_warps > 8 || s.head_dim > 128)
      return "mma 91: at most 2 consumer warpgroups (num_warps 4 or 8) and head_dim 64 or 128";
    const int consumers = int(c.warpgroups());
    const std::int64_t smem = smem_bytes(c, s), mb = c.min_blocks;
    if (auto why = wgmma_problem(c, s, d, smem, 0, true)) return "mma 91: " + *why;
    if (c.block_m == 80 && (s.head_dim != 128 || consumers != 2))
      return "mma 91: block_m 80 needs head_dim 128 and two consumer warpgroups (num_warps 8, block_n 128): two dQ^T "
             "pieces of 64 head-dim columns";
    if (mb < 1 || mb > 4) return "mma 91: min_blocks must be in 1..4";
    if (auto why = attn::blocks_per_sm_problem(mb, (c.num_warps + 4) * 32, smem, d)) return "mma 91: " + *why;
    // ptxas needs the dK and dV accumulators (head_dim) and ~30 others within the launch share itself (the forward's
    // C7602), whatever setmaxnreg adds later.
    const std::int64_t entry = FtWarpRoleRegs::entry(consumers, int(mb));
    if (entry < s.head_dim + 30)
      return "mma 91: min_blocks " + n(mb) + " leaves " + n(entry) + " registers per thread at launch, fewer than the " +
             n(s.head_dim) + " dK, dV accumulators and ~30 others";
    const std::int64_t cap = FtWarpRoleRegs::consumer(consumers, int(mb)), regs = registers(c, s);
    if (regs > cap)
      return "mma 91: about " + n(regs) + " registers per consumer thread needed (" + n(consumers) +
             " consumer warpgroups get " + n(cap) + ")";
    if (c.tail == 2 && c.dq_order != 1)
      return "mma 91: tail 2 needs dq_order 1 (deterministic dQ orders whole key blocks)";
    if (c.timeline == 2 && c.tail != 1) return "mma 91: timeline 2 needs tail 1 (its records take the split tail's workspace)";
    return std::nullopt;
  }
  // dq_order 2, min_blocks, timeline 2 and epilogue 2 append the kernel's last template arguments, kDeterministic,
  // kMinBlocks, kTimeline and kTmaEpilogue, where they (or one after them) are not the defaults (false, 1, false, false).
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    std::string name = wgmma_name("attn_bwd_fused_tma_kernel", c, s);
    const bool timeline = c.timeline == 2, tma_epilogue = c.epilogue == 2, later = timeline || tma_epilogue;
    if (c.dq_order == 2 || c.min_blocks != 1 || later) name.insert(name.size() - 1, c.dq_order == 2 ? ", true" : ", false");
    if (c.min_blocks != 1 || later) name.insert(name.size() - 1, ", " + n(c.min_blocks));
    if (later) name.insert(name.size() - 1, timeline ? ", true" : ", false");
    if (tma_epilogue) name.insert(name.size() - 1, ", true");
    return name;
  }
  // One block per key tile, per kv head; the producer's 128 threads on top. tail 2: a 1-D grid, the blocks in launch
  // order, then the last partial wave's blocks' further pieces (tail_parts - 1 of each).
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    const std::int64_t blocks = key_blocks(c, s) * s.heads_kv * s.batch, slots = std::int64_t(d.num_sms) * c.min_blocks;
    const std::int64_t parts = c.tail == 2 ? tail_parts(blocks, slots) : 1;
    LaunchShape l = grad_launch(key_blocks(c, s), s.heads_kv, c, s, smem_bytes(c, s));
    l.block[0] += 128;
    if (parts > 1) {
      l.grid[0] = unsigned(blocks + blocks % slots * (parts - 1)), l.grid[1] = 1, l.grid[2] = 1;
      l.tail_parts = unsigned(parts);
    }
    return l;
  }
  // FtAttnBwdTmaParams: the maps of Q, dO (block_m-row boxes), K, V (block_n), with epilogue 2 dK's and dV's (64-key
  // boxes, the stores'), then the block order's section width (unit_group, at most the (kv head, batch) pairs).
  std::vector<KernelArg> arguments(const BwdConfig& c, const Shape& s, std::vector<KernelArg> shared) const override {
    return tma_arguments(std::move(shared), s, c.block_m, c.block_n, -1,
                         std::int32_t(std::clamp<std::int64_t>(c.unit_group, 1, s.heads_kv * s.batch)), c.epilogue == 2);
  }

 private:
  static std::int64_t smem_bytes(const BwdConfig& c, const Shape& s) {
    return FtAttnSmem::bwd_tma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages));
  }
  // Per consumer thread: dK and dV (head_dim / 2 each), dP^T (block_m / 2), S^T or the dQ piece (whichever is
  // larger), the A fragments (block_m / 4), ~32 others (session 22, NVRTC 13.0: at 248 by this count, head_dim 64
  // with 128-row items and one consumer warpgroup spilled 80-120 bytes; two warpgroups at head_dim 128, 240 by it,
  // spill 20-32 under their 240 cap). block_m 80 and 128: P^T and dS^T packed together after dS^T's math (the fp32
  // S^T and dP^T die as they are packed), a dQ piece of at most block_m / 2 (session 49: 128 rows at head_dim 64, 224
  // by this count, compile without C751x and spill 16-60 bytes).
  static std::int64_t registers(const BwdConfig& c, const Shape& s) {
    const std::int64_t hd = s.head_dim, bm = c.block_m;
    if (bm == 80 || bm == 128) return hd + bm + 32;
    const std::int64_t piece = hd / FtBwdDqSplit::split(int(hd), int(bm), int(c.warpgroups())) / 2;
    return hd + bm / 2 + std::max(bm / 2, piece) + bm / 4 + 32;
  }
};

// mma 92, the windowed sweep (attn_bwd_sm90_sweep.cuh): the producer warpgroup and num_warps / 4 consumer warpgroups,
// one 64-key slot each (block_n = 64 per slot, as the wgmma loop's rule); a block per chunk of query tiles per (kv
// head, batch) pair. Causal sliding windows at head_dim 64, no sink tokens.
// inline_delta: attn_bwd_fused_delta's (O in, D computed in the pass and written out).
class FusedSweep final : public GradVariant {
 public:
  explicit FusedSweep(bool inline_delta)
      : GradVariant({"sm90_sweep", "attn_bwd_sm90_sweep.cuh", {core::DType::f16, core::DType::bf16}, 92,
                     std::string("92 = the windowed sweep (sm_90a, causal sliding windows at head_dim 64): a block per chunk of "
                                 "query tiles, num_warps / 4 = 2 or 3 consumer warpgroups each holding one 64-key tile of the "
                                 "window, dQ complete per item, no atomics (deterministic)") +
                         (inline_delta ? "; D = rowsum(dO * O) by the producer's warps 2 and 3" : ""),
                     {}, {"mma != 92 || (head_dim == 64 && block_m == 64 && num_warps >= 8 && num_warps <= 12 && 4 * num_stages <= num_warps)"}}),
        m_inline(inline_delta) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (s.head_dim != 64 || c.block_m != 64) return "mma 92: head_dim 64 and block_m 64 only";
    if (c.num_warps != 8 && c.num_warps != 12)
      return "mma 92: num_warps must be 8 or 12 (2 or 3 consumer warpgroups, one 64-key tile of the window each)";
    if (!s.causal || !s.has_window()) return "mma 92 sweeps a causal sliding window; this problem has none";
    if (s.sink_tokens != 0) return "mma 92: no sink tokens (every query sees them: they are not in the band)";
    const std::int64_t consumers = c.warpgroups(), tiles = sweep_tiles(s);
    if (tiles > consumers)
      return "mma 92: a 64-row query tile sees " + n(tiles) + " 64-key tiles under window " + n(s.window) +
             " (seq_k - seq_q " + n(s.seq_k - s.seq_q) + "), more than the " + n(consumers) + " consumer warpgroups";
    if (c.num_stages > consumers) return "mma 92: num_stages must be at most the consumer warpgroups (" + n(consumers) + ")";
    if (auto why = mma91_option_set(c, 92)) return why;
    if (auto why = wgmma_problem(c, s, d, smem_bytes(c), 0)) return "mma 92: " + *why;
    return std::nullopt;
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    std::string name = wgmma_name("attn_bwd_fused_sweep_tma_kernel", c, s);
    if (m_inline) name.insert(name.size() - 1, ", true");
    return name;
  }
  // A block per chunk of query tiles, per kv head; the producer's 128 threads on top.
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    LaunchShape l = grad_launch(sweep_chunks(c, s, d), s.heads_kv, c, s, smem_bytes(c));
    l.block[0] += 128;
    return l;
  }
  // FtAttnBwdTmaParams: the maps of Q, dO [, O] (64-row boxes), K and V (64-key boxes: one slot's tile); chunks is
  // the launch's (AttnBwdFused::launch sets it from the grid).
  std::vector<KernelArg> arguments(const BwdConfig& c, const Shape& s, std::vector<KernelArg> shared) const override {
    auto args = tma_arguments(std::move(shared), s, c.block_m, 64, m_inline ? kFdO : -1, 1);
    std::get<ParamsArg>(args.at(0)).set(offsetof(FtAttnBwdTmaParams<void>, chunks), std::int32_t(1));
    return args;
  }

 private:
  std::int64_t smem_bytes(const BwdConfig& c) const {
    return FtAttnSmem::bwd_sweep(int(c.warpgroups()), int(c.num_stages), m_inline);
  }
  bool m_inline;
};

class AttnBwdFused : public GradStage {
 public:
  AttnBwdFused() : GradStage(Selector{"mma", &BwdConfig::mma, "tensor-core kernel: "}) {
    add_variant(std::make_unique<FusedWgmma>());
    add_variant(std::make_unique<FusedTma>());
    add_variant(std::make_unique<FusedSweep>(false));
  }
  std::string name() const override { return "attn_bwd_fused"; }
  std::string template_file() const override { return "attn_bwd_sm90.cuh"; }
  std::string stage() const override { return "backward_fused"; }
  std::string description() const override {
    return "attention backward dK, dV and dQ in one pass (sm_90a wgmma): attn_bwd_dkdv's key-tile loop, dQ added "
           "into an fp32 accumulator (zeroed in the launch, timed), then converted";
  }
  std::vector<core::DType> dtypes() const override { return {core::DType::f16, core::DType::bf16}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (p.dtype == core::DType::f32) return "attn_bwd_fused supports f16 and bf16 only (fp32: attn_bwd_dkdv + attn_bwd_dq)";
    return GradStage::check_problem(p);
  }
  bool launches_itself() const override { return true; }
  // The accumulator zeroed (mma 91 with dq_order 2: its counters only, each piece's first writer stores), the pass,
  // the conversion (grid over the accumulator's 64-row blocks, four floats a thread): all in the timed launch, as a
  // caller of the backward pays them.
  // mma 92 (the sweep) zeroes nothing: its pass, then (with more than one chunk) the second launch that adds the
  // chunks' shared key tiles, grid over their floats, four a thread.
  void launch(const LaunchEnv& env, const core::Config& config, const core::Problem& p) const override {
    const Shape s(p);
    attn::expect_buffers(env, launch_buffers(), name());
    const BwdConfig c(config);
    if (c.mma == 92) {
      auto args = arguments(config, p);
      const unsigned chunks = env.shape.grid[0];
      std::get<ParamsArg>(args.at(0)).set(offsetof(FtAttnBwdTmaParams<void>, chunks), std::int32_t(chunks));
      launch_pass(env, args);
      if (chunks > 1) {
        const std::int64_t quads = std::int64_t(chunks - 1) * (c.warpgroups() - 1) * 1024, threads = env.shape.threads_per_block();
        launch_second_pass(env, args, offsetof(BwdParams, convert),
                           {unsigned((quads + threads - 1) / threads), unsigned(s.heads_kv), unsigned(s.batch)});
      }
      return;
    }
    // mma 91 with deterministic dQ: each piece's first writer stores it; only the counters after the accumulator
    // start at 0.
    // The split tail (launch_shape's tail_parts): its first block in launch order; its counters after the others.
    const std::int64_t parts = env.shape.tail_parts, blocks = key_blocks(c, s) * s.heads_kv * s.batch;
    const std::int64_t split = parts > 1 ? (std::int64_t(env.shape.grid[0]) - blocks) / (parts - 1) : 0;
    const std::int64_t rows = acc_block_rows(c), skip = c.mma == 91 && c.dq_order == 2 ? acc_elements(s, rows) : 0;
    cuda::fill_u32(env.buffers.at(kFusedAcc) + CUdeviceptr(4 * skip),
                   std::size_t(acc_elements(s, rows) - skip + turn_counters(s, rows) + split * (kTailThreads + 1)), 0u,
                   static_cast<CUstream>(env.stream));
    auto args = arguments(config, p);
    if (parts > 1) {
      auto& params = std::get<ParamsArg>(args.at(0));
      params.set(offsetof(FtAttnBwdTmaParams<void>, tail_first), std::int32_t(blocks - split));
      params.set(offsetof(FtAttnBwdTmaParams<void>, tail_parts), std::int32_t(parts));
    }
    launch_pass(env, args);
    // FtBwdConvert::quads() quads a thread (the kernel's registers allow one or two blocks an SM). mma 91's convert
    // starts beside the pass (programmatic launch) and converts a (kv head, batch) pair's rows once the pair's dQ
    // writers have counted their adds complete, on the SMs the pass's last wave leaves idle.
    const std::int64_t quads = acc_rows(s, rows) * s.head_dim / FtBwdConvert::floats(int(rows)), per_block = env.shape.threads_per_block() * FtBwdConvert::quads();
    launch_second_pass(env, args, offsetof(BwdParams, convert),
                       {unsigned((quads + per_block - 1) / per_block), unsigned(s.heads_q), unsigned(s.batch)}, c.mma == 91);
  }
  /// S^T, dP^T, dV, dK and dQ: 10 * head_dim per visible pair and query head (the whole backward's count).
  double flops(const core::Problem& p) const override { return visible_pair_flops(Shape(p), 10.0); }

 protected:
  std::vector<TunableSpec> shared_tunables() const override {
    return {
        // 80: mma 91 at head_dim 128 with two consumer warpgroups only (the constraints prune it elsewhere);
        // FlashAttention-4's non-causal tile (session 44: d128 non-causal -1.5 to -2 %, causal +1 %).
        {"block_m", {64, 80, 128}, "query rows per item (the N of S^T = K Q^T); 80: mma 91 at head_dim 128, num_warps 8 "
                                   "(dQ^T = K^T dS^T in 64-column pieces)"},
        {"block_n", {64, 128}, "keys per block: 64 per warpgroup"},
        {"num_warps", {4, 8}, "warps per block (a warpgroup = 4 warps)"},
        {"num_stages", {1, 2}, "items in flight (pipeline depth: cp.async stages, mma 91 TMA stages)"},
        // Searched only where named: a caller's requirement, not a speed choice.
        {"dq_order", {1}, "1 = dQ adds in whatever order blocks reach them; 2 = in key-block order, the same bits on "
                          "every run (deterministic; mma 91)"},
        // Searched only where named (session 23: tried at head_dim 64, one consumer warpgroup).
        {"min_blocks", {1}, "mma 91: blocks per SM it is compiled to fit (__launch_bounds__; 2: two one-consumer blocks "
                            "share an SM)"},
        // Searched only where named (session 23).
        {"unit_group", {1}, "mma 91: (kv head, batch) pairs per section of the block order; inside a section key block 0 "
                            "(causal: the heaviest) of every pair goes first, then key block 1..."},
        // Searched only where named (session 37, one H200: d128 b2 h16 8k non-causal -1.0 to -1.5 %, causal and GQA
        // within their noise; docs/NOTES.md).
        {"tail", {1}, "mma 91, dq_order 1: 1 = every block runs whole; 2 = the blocks of the last partial wave run as 2 or 3 "
                      "pieces over their items each (the launch plans it from the SM count), the last piece of a block "
                      "adding the others' fp32 dK, dV partials"},
        // A diagnostic, named only by its probe (attn_bwd_gpu_test's timeline test; python -m flashtune.timeline).
        {"timeline", {1}, "mma 91, tail 1: 2 = each block records clock64 / globaltimer stamps of its phases (entry, K / V in, "
                          "first and last item, dK / dV stored, dQ adds complete) into the workspace; fused_timeline_words"},
        // Searched only where named; the tuned yamls name 2 (session 47, one H100: -1.3 to -2.2 % on the dense bf16
        // shapes at d128 and d64; the block's fixed cost -36 %). GPT-OSS's one-consumer config not measured with 2.
        {"epilogue", {1}, "mma 91: 1 = dK, dV stored from the registers; 2 = staged in the K / V tiles and written by TMA "
                          "stores (blocks that are not split-tail pieces)"},
    };
  }
  std::optional<std::string> check_config(const BwdConfig& c, const Shape&, const core::DeviceLimits&) const override {
    if (c.dq_order != 1 && c.dq_order != 2) return "dq_order must be 1 (any order) or 2 (deterministic), not " + n(c.dq_order);
    if (c.unit_group < 1) return "unit_group must be >= 1, not " + n(c.unit_group);
    if (c.timeline != 1 && c.timeline != 2) return "timeline must be 1 (off) or 2 (each block records its phases), not " + n(c.timeline);
    if (c.epilogue != 1 && c.epilogue != 2)
      return "epilogue must be 1 (dK, dV from the registers) or 2 (staged, TMA stores), not " + n(c.epilogue);
    return std::nullopt;
  }
  std::vector<Binding> bindings(const BwdConfig&, const Shape&) const override {
    auto b = grad_inputs();
    b.insert(b.end(), {{offsetof(BwdParams, dq), kFusedDq}, {offsetof(BwdParams, dk), kFusedDk},
                       {offsetof(BwdParams, dv), kFusedDv}, {offsetof(BwdParams, ws), kFusedAcc}});
    return b;
  }
  // The fp32 accumulator, then mma 91's turn counters (int32, in the same buffer and zeroed with it).
  void add_workspace(const Shape& s, std::vector<BufferSpec>& b) const override {
    b.push_back({"dq_accum", core::DType::f32,
                 std::max(acc_workspace(s) + tail_workspace(s), sweep_workspace(s)),
                 BufferRole::workspace, 0, 0});
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs(const Shape& s) const override {
    return {{"dq", s.elements_q()}, {"dk", s.elements_kv()}, {"dv", s.elements_kv()}};
  }
  /// The buffers launch() is given (buffers()'s count, without building them on the launch path).
  virtual std::size_t launch_buffers() const { return std::size_t(kFusedAcc) + 1; }
  struct NoVariants {};
  explicit AttnBwdFused(NoVariants) : GradStage(Selector{"mma", &BwdConfig::mma, "tensor-core kernel: "}) {}  // a subclass registers its own
  void rows_to_check(const Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const override {
    q_rows = query_rows_to_check(s);
    k_rows = key_rows_to_check(s);
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
            const std::vector<std::int64_t>& k_rows, const Shape& s) const override {
    take_dq(g, out[0], q_rows, s);
    take_dkdv(g, out[1], out[2], k_rows, s);
  }
};

// attn_bwd_fused_delta: the fused pass with the preprocess fused in (as attn_bwd_dq_delta is dq's): O in D's place,
// D = rowsum(dO * O) computed in the pass and written out (attn_bwd_dsink reads it). Its one variant is the
// windowed sweep (mma 92).
class AttnBwdFusedDelta final : public AttnBwdFused {
 public:
  AttnBwdFusedDelta() : AttnBwdFused(NoVariants{}) { add_variant(std::make_unique<FusedSweep>(true)); }
  std::string name() const override { return "attn_bwd_fused_delta"; }
  std::string stage() const override { return "backward_fused_delta"; }
  std::string template_file() const override { return "attn_bwd_sm90_sweep.cuh"; }
  std::string description() const override {
    return "attention backward dK, dV, dQ and D = rowsum(dO * O) in one pass (the preprocess fused in; sm_90a, causal "
           "sliding windows at head_dim 64: the windowed sweep)";
  }
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (p.dtype == core::DType::f32) return "attn_bwd_fused_delta supports f16 and bf16 only (fp32: attn_bwd_dkdv + attn_bwd_dq)";
    return GradStage::check_problem(p);
  }
  // fused's buffers with O (input) in D's place and D appended as an output: q, k, v, dout, lse, o in; dq, dk, dv
  // out; the sweep's workspace; delta out.
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const Shape s(p);
    auto b = AttnBwdFused::buffers(p);
    b[kFdO] = {"o", s.dtype, s.elements_q(), BufferRole::input, -1.0, 1.0};
    b.push_back({"delta", core::DType::f32, s.rows(), BufferRole::output, 0, 0});
    return b;
  }
  /// fused's 10 * head_dim per visible pair and query head, and 2 per element of O for D.
  double flops(const core::Problem& p) const override { return AttnBwdFused::flops(p) + 2.0 * double(Shape(p).elements_q()); }
  /// The gradients from the naive backward given this O (its D = rowsum(dO * O)), sampled rows when large; D whole.
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override {
    const Shape s(p);
    if (in.size() != 6 || out.size() != 4) throw core::Error(name() + ".reference: expects q, k, v, dout, lse, o -> dq, dk, dv, delta");
    naive_gradients(s, in, precision, &in[kFdO].values, out);
    out[3].values = delta_of(s, in[kFdO].values, in[kDout].values, precision);
    out[3].checked.clear();
  }

 protected:
  // The sweep's shapes: 64-row tiles, two or three consumer warpgroups of 64 keys, 1-2 stages (three do not fit
  // beside the O tiles at three warpgroups).
  std::vector<TunableSpec> shared_tunables() const override {
    auto t = AttnBwdFused::shared_tunables();
    for (auto& spec : t) {
      if (spec.name == "block_m") spec.values = {64};
      if (spec.name == "block_n") spec.values = {128, 192};
      if (spec.name == "num_warps") spec.values = {8, 12};
    }
    return t;
  }
  std::vector<Binding> bindings(const BwdConfig& c, const Shape& s) const override {
    auto b = AttnBwdFused::bindings(c, s);
    b[kDelta] = {offsetof(BwdParams, delta), kFdDelta};
    b.push_back({offsetof(BwdParams, o), kFdO});
    return b;
  }
  std::size_t launch_buffers() const override { return std::size_t(kFdDelta) + 1; }
  // Only the sweep's chunk-shared tiles (at least one float: a buffer is never empty).
  void add_workspace(const Shape& s, std::vector<BufferSpec>& b) const override {
    b.push_back({"sweep_partials", core::DType::f32, std::max<std::int64_t>(1, sweep_workspace(s)), BufferRole::workspace, 0, 0});
  }
};

}  // namespace

namespace attn_bwd {

std::int64_t fused_timeline_words(const core::Config& config, const core::Problem& p) {
  const Shape s(p);
  const std::int64_t rows = acc_block_rows(BwdConfig(config));
  return (acc_elements(s, rows) + turn_counters(s, rows) + 3) / 4 * 4;  // the kernel's 16-byte alignment (ws: 256)
}

}  // namespace attn_bwd

std::unique_ptr<KernelFamily> make_attn_bwd_fused_family() { return std::make_unique<AttnBwdFused>(); }
std::unique_ptr<KernelFamily> make_attn_bwd_fused_delta_family() { return std::make_unique<AttnBwdFusedDelta>(); }

}  // namespace flashtune::kernels
