// harness/kernels/attn_fwd_f32.cpp: attn_fwd's fp32 variant (kernel_templates/attn_fwd_f32.cuh): which configs
// can run (shared memory, a register estimate, the architecture), the name expression and the dynamic shared
// memory of one block.
#include "harness/kernels/attn_fwd_f32.hpp"

#include "harness/kernels/attention.hpp"
#include "harness/kernels/attn_fwd.hpp"

#include <cstdint>

namespace flashtune::kernels::attn_f32 {
using attn::bool_arg;

// [bytes] Q tile + num_stages (K, V) tiles, rows padded to head_dim + 4 floats; FFMA adds the P tile
// (block_m x (block_n + 8) floats). Must match the pointer layout at the top of attn_fwd_f32_kernel.
unsigned dynamic_smem_bytes(const attn::Tiles& c, const attn::Shape& s) {
  return unsigned(FtAttnSmem::fwd_f32(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages), s.tf32));
}

// Registers per thread, estimated from what one lane keeps across a K/V tile: the O accumulators
// (rows_per_warp * head_dim / 32) and the S tile (rows_per_warp * block_n / 32); FFMA weighs S by 1.25 (the
// K vectors of the dot products stay live with it) and adds the Q vectors of the lane's rows
// (rows_per_warp) and ~40 for addresses and the softmax state; TF32 adds the Q fragments when the kernel
// keeps them (rows_per_warp * head_dim <= 2048: as many as O) and ~64 for fragments and addresses.
// Calibrated on ptxas (NVRTC 13.0, sm_80 and sm_90a, every config of the default space with all mask
// switches on): every config this admits compiled without spills; FFMA spills from ~264 estimated, TF32
// from ~256 (232 in the old TF32 weighting); tests/kernels/attn_fwd_f32_test.cpp recompiles the heaviest.
static std::int64_t register_estimate(const attn::Tiles& c, const attn::Shape& s) {
  const std::int64_t rows = c.block_m / c.num_warps, hd = s.head_dim, bn = c.block_n;
  if (s.tf32) return rows * hd / 32 + rows * bn / 32 + (rows * hd <= 2048 ? rows * hd / 32 : 0) + 64;
  return rows * hd / 32 + rows * bn * 5 / 128 + rows + 40;
}

std::optional<std::string> can_run(const attn::Tiles& c, const attn::Shape& s, const core::DeviceLimits& d) {
  const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps;
  const std::int64_t stages = c.num_stages, hd = s.head_dim;
  if (warps < 1 || bm % (16 * warps) != 0 || bm / (16 * warps) > 2)
    return "block_m " + std::to_string(bm) + " must be 16 or 32 rows per warp x num_warps " + std::to_string(warps);
  if (bn < 16 || bn % 16 != 0) return "block_n must be a multiple of 16";
  if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
  if (hd % 16 != 0) return "head_dim must be a multiple of 16";
  if (d.sm_major < 8) return std::string("needs sm_80 or newer (cp.async") + (s.tf32 ? ", TF32 mma.sync)" : ")");
  const std::int64_t smem = dynamic_smem_bytes(c, s);
  if (smem > d.max_shared_per_block_optin)
    return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B";
  const std::int64_t regs = register_estimate(c, s);
  if (regs > d.max_regs_per_thread)
    return "about " + std::to_string(regs) + " registers per thread needed (limit " +
           std::to_string(d.max_regs_per_thread) + "): the O and S tiles of " + std::to_string(bm / warps) +
           " rows per warp would spill";
  if (regs * 32 * warps > d.max_regs_per_block)
    return "about " + std::to_string(regs) + " registers x " + std::to_string(32 * warps) + " threads > " +
           std::to_string(d.max_regs_per_block) + " per block";
  return std::nullopt;
}

std::string name_expression(const attn::Tiles& c, const attn::Shape& s) {
  return "attn_fwd_f32_kernel<" + std::to_string(s.head_dim) + ", " + std::to_string(c.block_m) + ", " +
         std::to_string(c.block_n) + ", " + std::to_string(c.num_warps) + ", " +
         std::to_string(c.num_stages) + ", " + bool_arg(s.tf32) + ", " + bool_arg(s.causal) + ", " +
         bool_arg(s.has_window()) + ", " + bool_arg(s.learned_sinks) + ">";
}

}  // namespace flashtune::kernels::attn_f32

namespace flashtune::kernels::attn {
namespace {

// The fp32 problems' kernel, whatever the config's mma (the only variant that takes f32); it takes the wgmma
// variant's tunables at 1.
class FwdF32 final : public FwdVariant {
 public:
  FwdF32() : FwdVariant({"f32", "attn_fwd_f32.cuh", {core::DType::f32}, 80, "", {}, {}}) {}

  std::optional<std::string> can_run(const FwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (c.mma == 80 && c.mma_pipe == 1 && c.min_blocks == 1 && c.epilogue == 1 && c.pack_heads == 1 && c.mma_sched == 1 &&
        c.exp_poly == 1 && c.rescale == 1 && c.persistent == 1)
      return attn_f32::can_run(c, s, d);
    return "mma 90 / 91, mma_pipe 2, min_blocks > 1, epilogue 2, pack_heads > 1, mma_sched 2, exp_poly > 1, rescale 2, persistent 2 (wgmma) are "
           "fp16/bf16 options; fp32 uses mma 80 and 1 for each of them";
  }
  std::string name_expression(const FwdConfig& c, const Shape& s) const override {
    return attn_f32::name_expression(c, s);
  }
  LaunchShape launch_shape(const FwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return fwd_launch(c, s, attn_f32::dynamic_smem_bytes(c, s));
  }
};

}  // namespace

std::unique_ptr<FwdVariant> make_fwd_f32_variant() { return std::make_unique<FwdF32>(); }

}  // namespace flashtune::kernels::attn
