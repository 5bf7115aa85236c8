// harness/kernels/attn_fwd.cpp: the attn_fwd operation, FlashAttention-2 style fused attention forward, and its
// mma.sync variant. The variants (attn_fwd.hpp): fp16 / bf16 on tensor cores, mma = 80: mma.sync m16n8k16 with
// ldmatrix and a cp.async pipeline of num_stages K/V tiles (sm_80+, kernel_templates/attn_fwd.cuh); mma = 90:
// Hopper warpgroup MMA (wgmma, sm_90a; attn_fwd_sm90.cpp); fp32 exact (FFMA) or on TF32 tensor cores
// (attn_fwd_f32.cpp). Causal, sliding window, sink tokens and learned sinks are compile-time switches; GQA is a
// head map.
#include "harness/kernels/attn_fwd.hpp"

#include "harness/kernels/attention.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {

namespace attn {

std::vector<BufferSpec> fwd_op_buffers(const Shape& s) {
  auto b = fwd_buffers(s);
  b.push_back({"schedule", core::DType::f32, 2, BufferRole::workspace, 0, 0});  // two u32 counters
  return b;
}

LaunchShape fwd_launch(const FwdConfig& c, const Shape& s, std::int64_t smem) {
  LaunchShape l;
  l.grid[0] = unsigned((s.seq_q + c.rows_per_head() - 1) / c.rows_per_head());
  l.grid[1] = unsigned(s.heads_q / c.pack_heads);
  l.grid[2] = unsigned(s.batch);
  l.block[0] = unsigned(c.threads());
  l.dynamic_smem_bytes = unsigned(smem);
  return l;
}

std::int64_t fwd_tile_bytes(const FwdConfig& c, const Shape& s) {
  return FtAttnSmem::fwd_mma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages));  // 16-bit tiles
}

namespace {

// mma 80: each warp owns one or two 16-row MMA tiles of the query block.
class FwdMma final : public FwdVariant {
 public:
  FwdMma() : FwdVariant({"sm80_mma", "attn_fwd.cuh", {core::DType::f16, core::DType::bf16}, 80, "80 = mma.sync (sm_80+)", {}, {}}) {}

  std::optional<std::string> can_run(const FwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps;
    const std::int64_t stages = c.num_stages, hd = s.head_dim;
    if (bm % (16 * warps) != 0 || bm / (16 * warps) > 2)
      return "block_m " + std::to_string(bm) + " must be 16 or 32 rows per warp x num_warps " + std::to_string(warps);
    if (bn % 16 != 0) return "block_n must be a multiple of 16";
    if (stages < 1 || stages > 4) return "num_stages must be in 1..4";
    if (c.mma_pipe != 1) return "mma_pipe " + std::to_string(c.mma_pipe) + " is a wgmma (mma 90) option; mma 80 takes 1";
    if (c.min_blocks != 1 || c.epilogue != 1 || c.pack_heads != 1 || c.mma_sched != 1 || c.exp_poly != 1 ||
        c.rescale != 1 || c.persistent != 1)
      return "min_blocks, epilogue, pack_heads, mma_sched, exp_poly, rescale and persistent are wgmma (mma 90 / 91) "
             "options; mma 80 takes 1";
    if (d.sm_major < 8) return "needs sm_80 or newer (bf16 mma.sync, cp.async)";
    const std::int64_t smem = fwd_tile_bytes(c, s);
    if (smem > d.max_shared_per_block_optin)
      return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B";
    // Registers per thread, roughly (attn::Registers). Far past 255 spills badly whatever the compiler does.
    const std::int64_t regs = attn::Registers::fwd_mma(hd, bm, bn, warps);
    if (regs > 2 * d.max_regs_per_thread)
      return "about " + std::to_string(regs) + " registers per thread needed (limit " +
             std::to_string(d.max_regs_per_thread) + ")";
    return std::nullopt;
  }

  std::string name_expression(const FwdConfig& c, const Shape& s) const override {
    return "attn_fwd_mma_kernel<" + std::string(storage_type(s.dtype)) + ", " + std::to_string(s.head_dim) + ", " +
           std::to_string(c.block_m) + ", " + std::to_string(c.block_n) + ", " + std::to_string(c.num_warps) + ", " +
           std::to_string(c.num_stages) + ", " + bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ", " +
           bool_arg(s.learned_sinks) + ">";
  }

  LaunchShape launch_shape(const FwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return fwd_launch(c, s, fwd_tile_bytes(c, s));
  }
};

}  // namespace

std::unique_ptr<FwdVariant> make_fwd_mma_variant() { return std::make_unique<FwdMma>(); }

}  // namespace attn

namespace {

class AttnFwd final : public attn::AttentionOperation<attn::FwdConfig> {
 public:
  AttnFwd() : AttentionOperation(Selector{"mma", &attn::FwdConfig::mma, "fp16/bf16 tensor-core instructions: "}) {
    add_variant(attn::make_fwd_mma_variant());
    add_variant(attn::make_fwd_wgmma_variant());
    add_variant(attn::make_fwd_tma_variant());
    add_variant(attn::make_fwd_f32_variant());
  }

  std::string name() const override { return "attn_fwd"; }
  std::string stage() const override { return "forward"; }
  std::string template_file() const override { return "attn_fwd.cuh"; }
  std::string description() const override {
    return "fused attention forward (O, LSE): causal / GQA / window / sink tokens / learned sinks; "
           "fp16, bf16 on tensor cores, fp32 exact or TF32";
  }

  std::vector<BufferSpec> buffers(const core::Problem& p) const override { return attn::fwd_op_buffers(attn::Shape(p)); }

  // The forward's parameter struct, which a variant may extend (the TMA kernel's tensor maps).
  std::vector<KernelArg> arguments(const core::Config& config, const core::Problem& p) const override {
    const attn::FwdConfig c(config);
    const attn::Shape s(p);
    return variant_for(c, s).arguments(c, s, {attn::fwd_params(s)});
  }

 protected:
  std::vector<TunableSpec> shared_tunables() const override {
    return {
        {"block_m", {16, 32, 64, 128}, "query rows per block"},
        {"block_n", {16, 32, 64, 128}, "keys per K/V tile"},
        {"num_warps", {1, 2, 4, 8}, "warps per block (fp16/bf16: each owns block_m / num_warps query rows)"},
        {"num_stages", {1, 2, 3}, "K/V tiles in flight (cp.async pipeline depth)"},
    };
  }
  // Each warp owns one or two 16-row MMA tiles of the query block (mma.sync), or exactly one (wgmma).
  std::vector<std::string> shared_constraints() const override {
    return {"block_m % (16 * num_warps) == 0", "block_m / (16 * num_warps) <= 2"};
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_fwd_family() { return std::make_unique<AttnFwd>(); }

}  // namespace flashtune::kernels
