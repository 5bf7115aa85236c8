// harness/kernels/attn_bwd_f32.cpp: the fp32 kernels of attn_bwd_dkdv and attn_bwd_dq
// (kernel_templates/attn_bwd_f32.cuh): which configs can run (warp tiles, shared memory, a register
// estimate, the architecture), the name expression and the dynamic shared memory of one block.
#include "harness/kernels/attn_bwd_f32.hpp"

#include "kernel_templates/attn_params.cuh"

#include <algorithm>

namespace flashtune::kernels::attn_bwd_f32 {
namespace {

const char* bool_arg(std::int64_t v) { return v ? "true" : "false"; }
std::string n(std::int64_t v) { return std::to_string(v); }

}  // namespace

// [floats] S = head_dim + 4 per row. dkdv: K, V (block_n rows each), num_stages x (Q, dO: block_m rows
// each; LSE, D: block_m each), FFMA also P^T and dS^T (block_n x (block_m + 8) each). dq: Q, dO (block_m
// rows each), num_stages x (K, V: block_n rows each), FFMA also dS (block_m x (block_n + 8)). Must match
// the pointer layout at the top of the kernels.
std::int64_t smem_bytes(Stage stage, const attn::Tiles& c, const attn::Shape& s) {
  const int hd = int(s.head_dim), bm = int(c.block_m), bn = int(c.block_n), stages = int(c.num_stages);
  return stage == Stage::dkdv ? FtAttnSmem::dkdv_f32(hd, bm, bn, stages, s.tf32) : FtAttnSmem::dq_f32(hd, bm, bn, stages, s.tf32);
}

// What one lane keeps across a tile. FFMA (R = the warp's rows / 4 rows per lane): the head-dim
// accumulators (dK and dV, or dQ: head_dim / 8 per row each), the two score tiles (block_m / 8 or
// block_n / 8 per row each), the A row vectors (4 per row), ~33 addresses and loop state. TF32 (T = the
// warp's rows / 16 tiles): the accumulators (head_dim / 2 per tile each), the two score tiles (columns / 2
// per tile each), the A fragments (4 per tile), ~25 others. Calibrated on ptxas (NVRTC 13, sm_80 and sm_90a,
// every config of the default spaces with causal, window and sink tokens, FT_BWD_F32_ALL_CONFIGS=1 in
// tests/attention/attn_bwd_f32_test.cpp): of 1298 kernels none within 224 spills; 42 beyond it would not.
std::int64_t registers(Stage stage, const attn::Tiles& c, const attn::Shape& s) {
  const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps, hd = s.head_dim;
  const std::int64_t rows = (stage == Stage::dkdv ? bn : bm) / warps;  // the warp's own rows
  const std::int64_t cols = stage == Stage::dkdv ? bm : bn;            // the other side of the score tiles
  const std::int64_t accs = stage == Stage::dkdv ? 2 : 1;
  if (s.tf32) {
    const std::int64_t t = rows / 16;
    return t * (accs * hd / 2 + cols + 4) + 25;
  }
  const std::int64_t r = rows / 4;
  return r * (accs * hd / 8 + cols / 4 + 4) + 33;
}

std::optional<std::string> can_run(Stage stage, const attn::Tiles& c, const attn::Shape& s, const core::DeviceLimits& d) {
  const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps, stages = c.num_stages;
  const std::int64_t own = stage == Stage::dkdv ? bn : bm;
  const char* owned = stage == Stage::dkdv ? "block_n" : "block_m";
  if (warps < 1 || own % (16 * warps) != 0 || own / (16 * warps) > 2)
    return std::string(owned) + " " + n(own) + " must be 16 or 32 rows per warp x num_warps " + n(warps);
  if (bm % 16 != 0 || bn % 16 != 0) return "block_m and block_n must be multiples of 16";
  if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
  if (s.head_dim % 16 != 0) return "head_dim must be a multiple of 16";
  if (d.sm_major < 8) return std::string("needs sm_80 or newer (cp.async") + (s.tf32 ? ", TF32 mma.sync)" : ")");
  const std::int64_t smem = smem_bytes(stage, c, s);
  if (smem > d.max_shared_per_block_optin)
    return "shared memory " + n(smem) + " B > " + n(d.max_shared_per_block_optin) + " B";
  const std::int64_t regs = registers(stage, c, s);
  const std::int64_t limit = std::min<std::int64_t>(224, d.max_regs_per_thread);
  if (regs > limit)
    return "about " + n(regs) + " registers per thread needed (limit " + n(limit) + " without spills)";
  return std::nullopt;
}

std::string name_expression(Stage stage, const attn::Tiles& c, const attn::Shape& s) {
  return std::string(stage == Stage::dkdv ? "attn_bwd_dkdv_f32_kernel<" : "attn_bwd_dq_f32_kernel<") +
         n(s.head_dim) + ", " + n(c.block_m) + ", " + n(c.block_n) + ", " + n(c.num_warps) +
         ", " + n(c.num_stages) + ", " + bool_arg(s.tf32) + ", " + bool_arg(s.causal) + ", " +
         bool_arg(s.has_window()) + ">";
}

}  // namespace flashtune::kernels::attn_bwd_f32
