// harness/kernels/attn_fwd.cpp: the attn_fwd family, FlashAttention-2 style fused attention forward
// (kernel_templates/attn_fwd.cuh). fp16 / bf16 on tensor cores: mma = 80, mma.sync m16n8k16 with ldmatrix
// and a cp.async pipeline of num_stages K/V tiles (sm_80+); mma = 90, Hopper warpgroup MMA (wgmma, sm_90a;
// attn_fwd_sm90.cuh). fp32 exact (FFMA) or on TF32 tensor cores (attn_fwd_f32.hpp).
// Causal, sliding window, sink tokens and learned sinks are compile-time switches; GQA is a head map.
#include <algorithm>
#include <cmath>

#include "harness/kernels/attention.hpp"
#include "harness/kernels/config_views.hpp"
#include "harness/kernels/attn_fwd_f32.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

const char* bool_arg(std::int64_t v) { return v ? "true" : "false"; }

class AttnFwd final : public attn::AttentionFamily {
 public:
  std::string name() const override { return "attn_fwd"; }
  std::string stage() const override { return "forward"; }
  std::string template_file() const override { return "attn_fwd.cuh"; }
  std::string description() const override {
    return "fused attention forward (O, LSE): causal / GQA / window / sink tokens / learned sinks; "
           "fp16, bf16 on tensor cores, fp32 exact or TF32";
  }

  std::vector<TunableSpec> tunables() const override {
    return {
        {"block_m", {16, 32, 64, 128}, "query rows per block"},
        {"block_n", {16, 32, 64, 128}, "keys per K/V tile"},
        {"num_warps", {1, 2, 4, 8}, "warps per block (fp16/bf16: each owns block_m / num_warps query rows)"},
        {"num_stages", {1, 2, 3}, "K/V tiles in flight (cp.async pipeline depth)"},
        {"mma", {80, 90},
         "fp16/bf16 tensor-core instructions: 80 = mma.sync (sm_80+), 90 = warpgroup wgmma (sm_90a; a "
         "warpgroup of 4 warps per 64 query rows, block_n 16, 32, 64 or 128, head_dim a multiple of 64)"},
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
    };
  }
  // Each warp owns one or two 16-row MMA tiles of the query block (mma.sync), or exactly one (wgmma:
  // 64 rows per warpgroup, S = Q K^T one m64nNk16 chain with N = block_n, rows of 128-byte slabs).
  std::vector<std::string> constraints() const override {
    return {"block_m % (16 * num_warps) == 0", "block_m / (16 * num_warps) <= 2", "mma == 80 || mma == 90",
            "mma == 80 || (block_m == 16 * num_warps && num_warps % 4 == 0 && (block_n == 16 || block_n == 32 || block_n == 64 || block_n == 128) && "
            "head_dim % 64 == 0)",
            "mma_pipe == 1 || (mma == 90 && mma_pipe == 2 && num_stages >= 2)", "min_blocks == 1 || mma == 90",
            "epilogue == 1 || mma == 90", "pack_heads == 1 || mma == 90", "block_m % pack_heads == 0"};
  }

  std::optional<std::string> can_run(const core::Config& config, const core::Problem& p,
                                     const core::DeviceLimits& d) const override {
    const attn::FwdConfig c(config);
    const attn::Shape s(p);
    const std::int64_t mma = c.mma;
    if (s.dtype == core::DType::f32)
      return mma == 80 && c.mma_pipe == 1 && c.min_blocks == 1 && c.epilogue == 1 && c.pack_heads == 1
                 ? attn_f32::can_run(c, s, d)
                 : std::optional<std::string>("mma 90 / mma_pipe 2 / min_blocks > 1 / epilogue 2 / pack_heads > 1 (wgmma) "
                                              "are fp16/bf16 options; fp32 uses mma 80, mma_pipe 1, min_blocks 1, "
                                              "epilogue 1, pack_heads 1");
    if (mma == 90) return wgmma_can_run(c, s, d);
    const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps;
    const std::int64_t stages = c.num_stages, hd = s.head_dim;
    if (bm % (16 * warps) != 0 || bm / (16 * warps) > 2)
      return "block_m " + std::to_string(bm) + " must be 16 or 32 rows per warp x num_warps " + std::to_string(warps);
    if (bn % 16 != 0) return "block_n must be a multiple of 16";
    if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
    if (c.mma_pipe != 1) return "mma_pipe " + std::to_string(c.mma_pipe) + " is a wgmma (mma 90) option; mma 80 takes 1";
    if (c.min_blocks != 1 || c.epilogue != 1 || c.pack_heads != 1)
      return "min_blocks, epilogue and pack_heads are wgmma (mma 90) options; mma 80 takes 1";
    if (d.sm_major < 8) return "needs sm_80 or newer (bf16 mma.sync, cp.async)";
    const std::int64_t smem = mma_smem(c, s);
    if (smem > d.max_shared_per_block_optin)
      return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B";
    // Registers per thread, roughly: O accumulators (rows/warp * hd / 32), S (rows/warp * bn / 32), Q
    // fragments (rows/warp * hd / 64 words). Far past 255 spills badly whatever the compiler does.
    const std::int64_t rows = bm / warps;
    const std::int64_t regs = rows * hd / 32 + rows * bn / 32 + rows * hd / 64 + 24;
    if (regs > 2 * d.max_regs_per_thread)
      return "about " + std::to_string(regs) + " registers per thread needed (limit " +
             std::to_string(d.max_regs_per_thread) + ")";
    (void)hd;
    return std::nullopt;
  }

  Specialization specialize(const core::Config& config, const core::Problem& p) const override {
    const attn::FwdConfig c(config);
    const attn::Shape s(p);
    if (s.dtype == core::DType::f32) return {attn_f32::name_expression(c, s), {}};
    const std::string t = s.dtype == core::DType::f16 ? "ft_half" : "ft_bf16";
    if (c.mma == 90)
      return {"attn_fwd_wgmma_kernel<" + t + ", " + std::to_string(s.head_dim) + ", " +
                  std::to_string(c.block_n) + ", " + std::to_string(c.warpgroups()) + ", " +
                  std::to_string(c.num_stages) + ", " + std::to_string(c.mma_pipe) + ", " +
                  std::to_string(c.min_blocks) + ", " + std::to_string(c.epilogue) + ", " +
                  bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ", " + bool_arg(s.learned_sinks) +
                  (c.pack_heads > 1 ? ", " + std::to_string(c.pack_heads) : std::string()) + ">",
              {}};
    return {"attn_fwd_mma_kernel<" + t + ", " + std::to_string(s.head_dim) + ", " +
                std::to_string(c.block_m) + ", " + std::to_string(c.block_n) + ", " +
                std::to_string(c.num_warps) + ", " + std::to_string(c.num_stages) + ", " +
                bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ", " + bool_arg(s.learned_sinks) + ">",
            {}};
  }

  LaunchShape launch_shape(const core::Config& config, const core::Problem& p, const core::DeviceLimits&) const override {
    const attn::FwdConfig c(config);
    const attn::Shape a(p);
    LaunchShape s;
    s.grid[0] = unsigned((a.seq_q + c.rows_per_head() - 1) / c.rows_per_head());
    s.grid[1] = unsigned(a.heads_q / c.pack_heads);
    s.grid[2] = unsigned(a.batch);
    s.block[0] = unsigned(32 * c.num_warps);
    s.dynamic_smem_bytes = a.dtype == core::DType::f32 ? attn_f32::dynamic_smem_bytes(c, a)
                           : c.mma == 90           ? unsigned(wgmma_smem(c, a))
                                                       : unsigned(mma_smem(c, a));
    return s;
  }

  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    return {attn::fwd_params(attn::Shape(p))};
  }

 private:
  // Q tile, then num_stages (K tile, V tile) pairs, all block x head_dim elements.
  static std::int64_t mma_smem(const attn::FwdConfig& c, const attn::Shape& s) {
    return (c.block_m + 2 * c.num_stages * c.block_n) * s.head_dim *
           std::int64_t(core::dtype_size(s.dtype));
  }
  // The same tiles, plus 1 KiB to align them to the 1024-byte swizzle atoms wgmma reads.
  static std::int64_t wgmma_smem(const attn::FwdConfig& c, const attn::Shape& s) { return mma_smem(c, s) + 1024; }

  static std::optional<std::string> wgmma_can_run(const attn::FwdConfig& c, const attn::Shape& s,
                                                  const core::DeviceLimits& d) {
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
    if (pack < 1 || group % pack != 0)
      return "pack_heads " + std::to_string(pack) + " must divide the GQA group (heads_q / heads_kv = " +
             std::to_string(group) + ")";
    if (bm % pack != 0)
      return "pack_heads " + std::to_string(pack) + " must divide block_m " + std::to_string(bm);
    const std::int64_t smem = wgmma_smem(c, s);
    if (smem > d.max_shared_per_block_optin)
      return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B";
    // Registers per thread: O accumulators (hd / 2), S (bn / 2), P fragments (bn / 8; mma_pipe 2 keeps
    // them across the next S: bn / 4), ~30 others.
    const std::int64_t regs = hd / 2 + bn / 2 + bn / (pipe == 2 ? 4 : 8) + 30;
    if (regs > d.max_regs_per_thread)
      return "about " + std::to_string(regs) + " registers per thread needed (limit " +
             std::to_string(d.max_regs_per_thread) + ")";
    // min_blocks: the blocks must fit an SM together (threads, shared memory), and the register cap it
    // implies must leave the accumulators room (below it ptxas spills; the spill check prunes the rest).
    if (c.epilogue != 1 && c.epilogue != 2) return "epilogue must be 1 (direct) or 2 (staged)";
    const std::int64_t mb = c.min_blocks;
    if (mb < 1 || mb > 8) return "min_blocks must be in 1..8";
    if (mb > 1) {
      if (32 * warps * mb > 2048)  // threads per SM on every sm_90a GPU
        return "min_blocks " + std::to_string(mb) + " x " + std::to_string(32 * warps) + " threads > 2048 per SM";
      if ((smem + 1024) * mb > d.max_shared_per_sm)
        return "min_blocks " + std::to_string(mb) + " x " + std::to_string(smem) + " B of shared memory > " +
               std::to_string(d.max_shared_per_sm) + " B per SM";
      const std::int64_t cap = std::min<std::int64_t>(d.max_regs_per_thread, d.max_regs_per_block / (32 * warps * mb) / 8 * 8);
      // ptxas needs ~24 more than the accumulators, or it serializes the wgmma (C7512) and gives up.
      if (cap < hd / 2 + bn / 2 + 24)
        return "min_blocks " + std::to_string(mb) + " caps registers at " + std::to_string(cap) +
               " per thread, too few for the " + std::to_string(hd / 2 + bn / 2) + " accumulators and ~24 others";
    }
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_fwd_family() { return std::make_unique<AttnFwd>(); }

}  // namespace flashtune::kernels
