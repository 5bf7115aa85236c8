// harness/kernels/cost_model.cpp: the analytic cost of an attention config (cost_model.hpp). Every figure is per SM
// and per clock; the tile footprints are the kernels' own (FtAttnSmem, kernel_templates/attn_params.cuh) and the
// register estimates those their can_run checks (attn::Registers, attention.hpp).
#include "harness/kernels/cost_model.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "harness/kernels/attention.hpp"

namespace flashtune::kernels {
namespace {

// Hopper (H100 SXM) per SM and clock. Tensor cores: 989 TFLOPS dense 16-bit / 132 SMs / 1.83 GHz = 4096 flops;
// mma.sync reaches about 2/3 of that (FlashAttention-3 paper, Shah et al. 2024, section 1). Special functions: 3.9
// TFLOPS (same paper) = 16 exp2; fp32 pipes 128; shared memory 128 bytes; L2 about 32 bytes (~7.7 TB/s at 1.83 GHz).
constexpr double kWgmmaFlops = 4096, kMmaSyncFlops = kWgmmaFlops * 2 / 3;
constexpr double kExp2 = 16, kFp32 = 128, kSmemBytes = 128, kL2Bytes = 32;
// Per score element the softmax runs one exp2 and ~8 fp32 operations (scale, max, subtract, sum, convert); the
// backward's dS = P (dP - D) adds 2.
constexpr double kSoftmaxOps = 8, kGradOps = 2;
// Chosen on the head_dim 128 surfaces of tests/data/tuner_surfaces.sqlite (docs/NOTES.md): the latency a block
// exposes per tile (barriers, a wgmma or mma chain drained before the softmax reads S), hidden by the other resident
// blocks; and per block its launch, the Q / O (dK, dV) tile traffic aside.
constexpr double kTileLatency = 800, kBlockLatency = 2000;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Residency {
  std::int64_t blocks = 1;  ///< resident blocks per SM
  double spill = 0;         ///< [clocks per tile] registers over a min_blocks cap, stored and reloaded each tile
};

// Blocks per SM from threads, shared memory (1 KiB reserved per block) and registers (allocated in 8s); min_blocks
// > 1 caps the registers at 65536 / (threads x min_blocks) and what the estimate exceeds the cap by spills.
Residency residency(std::int64_t threads, std::int64_t smem, double regs, std::int64_t min_blocks,
                    const core::DeviceLimits& d) {
  Residency r;
  std::int64_t k = std::min<std::int64_t>({2048 / threads, d.max_shared_per_sm / (smem + 1024), 32});
  if (min_blocks > 1) {
    const double cap = double(std::min<std::int64_t>(d.max_regs_per_thread, d.max_regs_per_block / (threads * min_blocks) / 8 * 8));
    r.spill = std::max(0.0, regs - cap) * double(threads) * 8 / kSmemBytes;
    regs = std::min(regs, cap);
  }
  const std::int64_t alloc = (std::int64_t(regs) + 7) / 8 * 8;
  k = std::min<std::int64_t>(k, d.max_regs_per_block / (alloc * threads));
  r.blocks = std::max<std::int64_t>(1, k);
  return r;
}

// wgmma m64nNk16 chains over an m x n x kk product: per instruction the larger of its flops and the operand bytes
// it reads from shared memory (A 64 x 16 when not in registers, B n x 16): a narrow N is operand bound.
double wgmma_time(double m, double n, double kk, bool a_in_registers) {
  const double steps = m / 64 * (kk / 16);
  return steps * std::max(2 * 64 * n * 16 / kWgmmaFlops, ((a_in_registers ? 0 : 64 * 16 * 2) + n * 16 * 2) / kSmemBytes);
}

// [clocks] the SM spends per tile of one block when `k` blocks are resident: the tensor cores (mma) and the
// softmax (sfu, on the fp32 and special-function pipes) overlap across blocks, and within one block only as far as
// the pipeline lets (mma_pipe 2: P V of the previous tile beside this tile's softmax, half the MMAs); loads overlap
// compute as far as the stages and the other blocks hide them; the per-tile latency is hidden by the other blocks.
double tile_time(std::int64_t k, double mma, double sfu, double load, std::int64_t pipe, std::int64_t stages) {
  const double overlap = std::max(mma, sfu);
  const double alone = mma + sfu - (pipe == 2 ? std::min(mma / 2, sfu) : 0.0);
  const double compute = overlap + (alone - overlap) / double(k);
  return std::max(compute, load) + std::min(compute, load) / double(k * stages) + kTileLatency / double(k);
}

// [clocks] the last block's end when blocks of `tiles` (in launch order) go to the first free of `slots` slots, each
// tile taking `per_tile` (the SM's time per tile x its resident blocks) and each block `per_block` more.
double makespan(const std::vector<std::int64_t>& tiles, std::int64_t slots, double per_tile, double per_block) {
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (std::int64_t i = 0; i < slots; ++i) free_at.push(0.0);
  double end = 0;
  for (const std::int64_t t : tiles) {
    const double done = free_at.top() + double(t) * per_tile + per_block;
    free_at.pop();
    free_at.push(done);
    end = std::max(end, done);
  }
  return end;
}

using Attn = attn::Shape;  // the problem's sizes and mask (problem_views.hpp)

// Key tiles each query block visits, in launch order: the kernels take the heaviest (causal: last) query block first
// (m_block = gridDim.x - 1 - blockIdx.x); `rows` query rows per head per block, bottom-right causal alignment.
std::vector<std::int64_t> query_block_tiles(const Attn& a, std::int64_t rows, std::int64_t bn) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = ceil_div(a.seq_q, rows) - 1; i >= 0; --i) {
    std::int64_t keys = a.seq_k;
    if (a.causal) keys = std::clamp<std::int64_t>((i + 1) * rows + a.seq_k - a.seq_q, 0, a.seq_k);
    out.push_back(ceil_div(keys, bn));
  }
  return out;
}

std::vector<std::int64_t> repeat(const std::vector<std::int64_t>& one, std::int64_t times) {
  std::vector<std::int64_t> out;
  out.reserve(one.size() * std::size_t(times));
  for (std::int64_t i = 0; i < times; ++i) out.insert(out.end(), one.begin(), one.end());
  return out;
}

double forward(const Attn& a, const core::Config& c, const core::DeviceLimits& d) {
  const std::int64_t bm = c.at("block_m"), bn = c.at("block_n"), warps = c.at("num_warps"), stages = c.at("num_stages");
  const std::int64_t mma = c.get("mma", 80), pipe = c.get("mma_pipe", 1), pack = c.get("pack_heads", 1);
  const double hd = double(a.head_dim);
  const int ihd = int(a.head_dim);
  const std::int64_t smem = mma == 90 ? FtAttnSmem::fwd_wgmma(ihd, int(bm), int(bn), int(stages))
                                      : FtAttnSmem::fwd_mma(ihd, int(bm), int(bn), int(stages));
  const double regs = double(mma == 90 ? attn::Registers::fwd_wgmma(a.head_dim, bn, pipe)
                                       : attn::Registers::fwd_mma(a.head_dim, bm, bn, warps));
  const Residency r = residency(32 * warps, smem, regs, c.get("min_blocks", 1), d);
  // S = Q K^T (both in shared memory) and O += P V (P in registers); mma.sync at its rate.
  const double mm = mma == 90 ? wgmma_time(double(bm), double(bn), hd, false) + wgmma_time(double(bm), hd, double(bn), true)
                              : 4 * double(bm * bn) * hd / kMmaSyncFlops;
  // Softmax per score, and per row per tile: O rescaled (bm x head_dim) and two row reductions.
  const double sfu = double(bm * bn) * (1 / kExp2 + kSoftmaxOps / kFp32) + (double(bm) * hd + 8 * double(bm)) / kFp32;
  const double t = tile_time(r.blocks, mm, sfu + r.spill, 4 * double(bn) * hd / kL2Bytes, pipe, stages);
  const auto tiles = repeat(query_block_tiles(a, bm / pack, bn), a.batch * a.heads_q / pack);
  return makespan(tiles, d.num_sms * r.blocks, t * double(r.blocks), kBlockLatency + 4 * double(bm) * hd / kL2Bytes);
}

double backward_dkdv(const Attn& a, const core::Config& c, const core::DeviceLimits& d) {
  const std::int64_t bm = c.at("block_m"), bn = c.at("block_n"), warps = c.at("num_warps"), stages = c.at("num_stages");
  const std::int64_t mma = c.get("mma", 80);
  const double hd = double(a.head_dim);
  const int ihd = int(a.head_dim);
  const std::int64_t stage_bytes = FtAttnSmem::dkdv_stage(ihd, int(bm));  // Q, dO, LSE, D of bm rows
  const std::int64_t smem = mma == 90 ? FtAttnSmem::bwd_wgmma(ihd, int(bm), int(bn), int(stages), false)
                                      : FtAttnSmem::dkdv_mma(ihd, int(bm), int(bn), int(stages));
  const double regs = double(mma == 90 ? attn::Registers::dkdv_wgmma(a.head_dim, bm)
                                       : attn::Registers::dkdv_mma(a.head_dim, bm, bn, warps, stages));
  const Residency r = residency(32 * warps, smem, regs, c.get("min_blocks", 1), d);
  // Four products per tile: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q.
  const double flops = 8 * double(bm * bn) * hd;
  const double mm = mma == 90 ? 2 * wgmma_time(double(bn), double(bm), hd, false) + 2 * wgmma_time(double(bn), hd, double(bm), true)
                              : flops / kMmaSyncFlops;
  const double sfu = double(bm * bn) * (1 / kExp2 + (kSoftmaxOps + kGradOps) / kFp32);
  const double t = tile_time(r.blocks, mm, sfu + r.spill, double(stage_bytes) / kL2Bytes, 1, stages);
  // One block per key tile and kv head; it visits the query tiles of every head of its GQA group (causal: those at
  // or after its keys). Key block 0 is the heaviest and goes first.
  std::vector<std::int64_t> per;
  const std::int64_t group = a.heads_q / a.heads_kv;
  for (std::int64_t j = 0; j < ceil_div(a.seq_k, bn); ++j) {
    const std::int64_t first = a.causal ? std::max<std::int64_t>(0, j * bn - (a.seq_k - a.seq_q)) : 0;
    per.push_back(first < a.seq_q ? group * ceil_div(a.seq_q - first, bm) : 0);
  }
  return makespan(repeat(per, a.batch * a.heads_kv), d.num_sms * r.blocks, t * double(r.blocks),
                  kBlockLatency + 8 * double(bn) * hd / kL2Bytes);
}

double backward_dq(const Attn& a, const core::Config& c, const core::DeviceLimits& d) {
  const std::int64_t bm = c.at("block_m"), bn = c.at("block_n"), warps = c.at("num_warps"), stages = c.at("num_stages");
  const std::int64_t pack = c.get("pack_heads", 1);
  const double hd = double(a.head_dim);
  const std::int64_t smem = FtAttnSmem::dq_mma(int(a.head_dim), int(bm), int(bn), int(stages), false);  // D not inline
  const double regs = double(attn::Registers::dq_mma(a.head_dim, bm, bn, warps, stages));
  const Residency r = residency(32 * warps, smem, regs, c.get("min_blocks", 1), d);
  // Three products per tile: S = Q K^T, dP = dO V^T, dQ += dS K.
  const double mm = 6 * double(bm * bn) * hd / kMmaSyncFlops;
  const double sfu = double(bm * bn) * (1 / kExp2 + (kSoftmaxOps + kGradOps) / kFp32);
  const double t = tile_time(r.blocks, mm, sfu + r.spill, 4 * double(bn) * hd / kL2Bytes, 1, stages);
  const auto tiles = repeat(query_block_tiles(a, bm / pack, bn), a.batch * a.heads_q / pack);
  return makespan(tiles, d.num_sms * r.blocks, t * double(r.blocks), kBlockLatency + 8 * double(bm) * hd / kL2Bytes);
}

}  // namespace

std::optional<double> estimate_cost(const std::string& family, const core::Config& c, const core::Problem& p,
                                    const core::DeviceLimits& d) {
  if (family != "attn_fwd" && family != "attn_bwd_dkdv" && family != "attn_bwd_dq") return std::nullopt;
  if (p.dtype != core::DType::f16 && p.dtype != core::DType::bf16) return std::nullopt;
  std::optional<Attn> view;
  try {
    core::Problem full = p;
    attn::complete_problem(full);  // heads_kv and seq_k default to heads_q and seq_q
    view.emplace(full);
  } catch (const core::Error&) {  // a dim missing: not an attention problem this model reads
    return std::nullopt;
  }
  const Attn& a = *view;
  // Windows, sink tokens and learned sinks change which tiles a block visits: not modelled.
  if (a.window > 0 || a.sink_tokens > 0 || a.learned_sinks) return std::nullopt;
  const std::int64_t mma = c.get("mma", 80);
  if (mma != 80 && mma != 90) return std::nullopt;  // the TMA kernels (91) have their own schedules
  if (c.get("item_split", 1) != 1 || c.get("persistent", 1) != 1) return std::nullopt;
  for (const char* name : {"block_m", "block_n", "num_warps", "num_stages"})
    if (c.get(name, 0) < 1) return std::nullopt;
  if (a.batch < 1 || a.heads_q < 1 || a.heads_kv < 1 || a.seq_q < 1 || a.seq_k < 1 || a.head_dim < 1 ||
      a.heads_q % a.heads_kv != 0 || d.num_sms < 1)
    return std::nullopt;
  const std::int64_t pack = c.get("pack_heads", 1);
  if (pack < 1 || c.at("block_m") % pack != 0 || a.heads_q % pack != 0) return std::nullopt;
  if (family == "attn_fwd") return forward(a, c, d);
  if (family == "attn_bwd_dkdv") return backward_dkdv(a, c, d);
  return backward_dq(a, c, d);
}

}  // namespace flashtune::kernels
