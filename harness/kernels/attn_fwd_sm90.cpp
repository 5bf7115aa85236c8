// harness/kernels/attn_fwd_sm90.cpp: attn_fwd's Hopper variant (mma = 90, kernel_templates/attn_fwd_sm90.cuh):
// warpgroup MMA (wgmma, sm_90a), a warpgroup of 4 warps per 64 query rows, S = Q K^T one m64nNk16 chain with
// N = block_n over rows of 128-byte swizzled slabs; its own tunables pipeline P V beside the softmax, cap
// registers for occupancy, stage the O epilogue and pack the query heads of a GQA group into one block.
#include <algorithm>

#include "harness/kernels/attention.hpp"
#include "harness/kernels/attn_fwd.hpp"

namespace flashtune::kernels::attn {
namespace {

VariantInfo wgmma_info() {
  return {
      "sm90_wgmma",
      "attn_fwd_sm90.cuh",
      {core::DType::f16, core::DType::bf16},
      90,
      "90 = warpgroup wgmma (sm_90a; a warpgroup of 4 warps per 64 query rows, block_n 16, 32, 64 or 128, "
      "head_dim a multiple of 64)",
      {
          {"mma_pipe", {1, 2},
           "mma 90 only: 1 = Q K^T, softmax and P V one after the other; 2 = P V of tile i - 1 on the tensor "
           "cores while the softmax of tile i runs (needs num_stages >= 2)"},
          // Defaults hold every value that has won a measured shape (docs/NOTES.md): min_blocks 2 (dense d128 /
          // d64 seq 8k), 5 and 6 (GPT-OSS), epilogue 2 (d128 seq 8k, session 18), pack_heads 4 (GPT-OSS).
          {"min_blocks", {1, 2, 5, 6},
           "mma 90 only: blocks per SM the compiler must fit (__launch_bounds__ minimum: registers capped at "
           "65536 / (32 num_warps min_blocks)); 1 = no cap. 2..8 trade registers for occupancy, for short, "
           "latency-bound rows such as sliding windows"},
          {"epilogue", {1, 2},
           "mma 90 only: 1 = O stored from the accumulators (4-byte stores); 2 = O staged in shared memory and "
           "stored in 16-byte rows"},
          {"pack_heads", {1, 2, 4, 8},
           "mma 90 only: query heads of one GQA group per block (a divisor of heads_q / heads_kv); the block's "
           "block_m rows are block_m / pack_heads queries of each head, so its K/V tiles serve pack_heads heads "
           "and a windowed band stays narrow"},
      },
      // 64 rows per warpgroup, S = Q K^T one m64nNk16 chain with N = block_n, rows of 128-byte slabs; the other
      // variants keep this one's tunables at 1.
      {"mma != 90 || (block_m == 16 * num_warps && num_warps % 4 == 0 && (block_n == 16 || block_n == 32 || "
       "block_n == 64 || block_n == 128) && head_dim % 64 == 0)",
       "mma_pipe == 1 || ((mma == 90 || mma == 91) && mma_pipe == 2 && num_stages >= 2)", "min_blocks == 1 || mma == 90 || mma == 91",
       "epilogue == 1 || mma == 90 || mma == 91", "pack_heads == 1 || mma == 90 || mma == 91", "block_m % pack_heads == 0"},
  };
}

class FwdWgmma final : public FwdVariant {
 public:
  FwdWgmma() : FwdVariant(wgmma_info()) {}

  std::optional<std::string> can_run(const FwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps;
    const std::int64_t stages = c.num_stages, hd = s.head_dim;
    if (d.arch != "sm_90a") return "mma 90 (wgmma) needs sm_90a, not " + d.arch;
    if (warps % 4 != 0 || bm != 16 * warps)
      return "mma 90: block_m " + std::to_string(bm) + " must be 64 rows per warpgroup (16 x num_warps " +
             std::to_string(warps) + ")";
    if (bn != 16 && bn != 32 && bn != 64 && bn != 128) return "mma 90: block_n must be 16, 32, 64 or 128";
    if (hd % 64 != 0) return "mma 90: head_dim must be a multiple of 64 (128-byte swizzled rows)";
    if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
    const std::int64_t pipe = c.mma_pipe;
    if (pipe != 1 && pipe != 2) return "mma_pipe must be 1 or 2";
    if (pipe == 2 && stages < 2) return "mma_pipe 2 keeps two K/V tiles resident: num_stages >= 2";
    const std::int64_t pack = c.pack_heads, group = s.group();
    if (c.mma_sched != 1 || c.exp_poly != 1 || c.rescale != 1 || c.persistent != 1)
      return "mma_sched, exp_poly, rescale and persistent are TMA kernel (mma 91) options; mma 90 takes 1";
    if (pack < 1 || group % pack != 0)
      return "pack_heads " + std::to_string(pack) + " must divide the GQA group (heads_q / heads_kv = " +
             std::to_string(group) + ")";
    if (bm % pack != 0) return "pack_heads " + std::to_string(pack) + " must divide block_m " + std::to_string(bm);
    const std::int64_t smem = smem_bytes(c, s);
    if (smem > d.max_shared_per_block_optin)
      return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B";
    const std::int64_t regs = attn::Registers::fwd_wgmma(hd, bn, pipe);  // per thread
    if (regs > d.max_regs_per_thread)
      return "about " + std::to_string(regs) + " registers per thread needed (limit " +
             std::to_string(d.max_regs_per_thread) + ")";
    // min_blocks: the blocks must fit an SM together (threads, shared memory), and the register cap it
    // implies must leave the accumulators room (below it ptxas spills; the spill check prunes the rest).
    if (c.epilogue != 1 && c.epilogue != 2) return "epilogue must be 1 (direct) or 2 (staged)";
    const std::int64_t mb = c.min_blocks;
    if (mb < 1 || mb > 8) return "min_blocks must be in 1..8";
    if (mb > 1) {
      if (auto why = blocks_per_sm_problem(mb, 32 * warps, smem, d)) return why;
      const std::int64_t cap = std::min<std::int64_t>(d.max_regs_per_thread, d.max_regs_per_block / (32 * warps * mb) / 8 * 8);
      // ptxas needs ~24 more than the accumulators, or it serializes the wgmma (C7512) and gives up.
      if (cap < hd / 2 + bn / 2 + 24)
        return "min_blocks " + std::to_string(mb) + " caps registers at " + std::to_string(cap) +
               " per thread, too few for the " + std::to_string(hd / 2 + bn / 2) + " accumulators and ~24 others";
    }
    return std::nullopt;
  }

  std::string name_expression(const FwdConfig& c, const Shape& s) const override {
    return "attn_fwd_wgmma_kernel<" + std::string(storage_type(s.dtype)) + ", " + std::to_string(s.head_dim) + ", " +
           std::to_string(c.block_n) + ", " + std::to_string(c.warpgroups()) + ", " + std::to_string(c.num_stages) +
           ", " + std::to_string(c.mma_pipe) + ", " + std::to_string(c.min_blocks) + ", " + std::to_string(c.epilogue) +
           ", " + bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ", " + bool_arg(s.learned_sinks) +
           (c.pack_heads > 1 ? ", " + std::to_string(c.pack_heads) : std::string()) + ">";
  }

  LaunchShape launch_shape(const FwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return fwd_launch(c, s, smem_bytes(c, s));
  }

 private:
  // The tiles of the mma.sync kernel, plus 1 KiB to align them to the 1024-byte swizzle atoms wgmma reads.
  static std::int64_t smem_bytes(const FwdConfig& c, const Shape& s) {
    return FtAttnSmem::fwd_wgmma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages));
  }
};

}  // namespace

std::unique_ptr<FwdVariant> make_fwd_wgmma_variant() { return std::make_unique<FwdWgmma>(); }

}  // namespace flashtune::kernels::attn
