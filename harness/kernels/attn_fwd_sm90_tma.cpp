// harness/kernels/attn_fwd_sm90_tma.cpp: attn_fwd's warp-specialized Hopper variant (mma = 91,
// kernel_templates/attn_fwd_sm90_tma.cuh): a producer warpgroup loading Q, K, V by TMA into a ring of mbarrier-
// guarded stages, num_warps / 4 consumer warpgroups of 64 query rows on wgmma (block_m = 16 num_warps; the block
// has 128 more threads than num_warps says: the producer), register reallocation between them, and the tunables
// mma_pipe (P V of tile i - 1 beside the softmax of tile i), mma_sched (ping-pong between consumer warpgroups),
// epilogue (2: O stored by TMA) and pack_heads. Its arguments are the forward's parameter struct with the tensor
// maps of Q, K, V and O after it (FtAttnFwdTmaParams), encoded at launch over the buffers.
#include <algorithm>
#include <cstring>

#include "harness/kernels/attention.hpp"
#include "harness/kernels/attn_fwd.hpp"

namespace flashtune::kernels::attn {
namespace {

VariantInfo tma_info() {
  return {
      "sm90_tma",
      "attn_fwd_sm90_tma.cuh",
      {core::DType::f16, core::DType::bf16},
      91,
      "91 = TMA + warp-specialized wgmma (sm_90a; a producer warpgroup and num_warps / 4 consumer warpgroups of 64 "
      "query rows, head_dim a multiple of 64)",
      {
          {"mma_sched", {1, 2},
           "mma 91 only: 1 = each consumer warpgroup issues its GEMMs when its data is ready; 2 = the consumer "
           "warpgroups issue in turns (ping-pong: one's softmax under the others' GEMMs; needs mma_pipe 2 and 2+ "
           "consumer warpgroups)"},
          {"rescale", {1, 2},
           "mma 91 only: 1 = O rescaled after every key tile; 2 = FA4's lazy rescale (a row's running max moves only "
           "when it grows by more than 8 in log2 units; O rescaled only when a max moved)"},
          {"persistent", {1, 2, 3},
           "mma 91 only: 1 = one block per work unit (query block, heads, batch); 2 = a persistent grid of at most "
           "SMs x min_blocks blocks looping over the units (block b: units b, b + grid, ...), the next unit's loads "
           "under this one's epilogue; 3 = the same grid taking the units dynamically (an atomic ticket each, "
           "heaviest first: balances causal units)"},
          {"exp_poly", {1},
           "mma 91 only: 1 = every softmax exponential on the special-function unit; k >= 2 = one 8-key column tile "
           "in k of the interior tiles by a polynomial on the FMA pipe (offloads the SFU, the bottleneck at head_dim 64)"},
      },
      {"mma != 91 || (block_m == 16 * num_warps && num_warps % 4 == 0 && num_warps <= 12 && head_dim % 64 == 0)",
       "mma_sched == 1 || (mma == 91 && mma_pipe == 2 && num_warps >= 8)", "exp_poly == 1 || mma == 91", "rescale == 1 || mma == 91", "persistent == 1 || mma == 91"},
  };
}

class FwdTma final : public FwdVariant {
 public:
  FwdTma() : FwdVariant(tma_info()) {}

  std::optional<std::string> can_run(const FwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    const std::int64_t bm = c.block_m, bn = c.block_n, warps = c.num_warps, hd = s.head_dim;
    if (d.arch != "sm_90a") return "mma 91 (TMA, wgmma) needs sm_90a, not " + d.arch;
    if (warps % 4 != 0 || warps < 4 || warps > 12 || bm != 16 * warps)
      return "mma 91: num_warps " + std::to_string(warps) + " must be 4, 8 or 12 (consumer warpgroups) and block_m " +
             std::to_string(bm) + " 64 rows per warpgroup (16 x num_warps)";
    if (bn != 16 && bn != 32 && bn != 64 && bn != 128 && bn != 176 && bn != 192)
      return "mma 91: block_n must be 16, 32, 64, 128, 176 or 192 (one wgmma m64nNk16 chain)";
    if (hd % 64 != 0 || hd > 256) return "mma 91: head_dim must be 64, 128, 192 or 256 (128-byte swizzled rows)";
    if (c.num_stages < 1 || c.num_stages > 4) return "num_stages must be in 1..4";
    if (c.mma_pipe != 1 && c.mma_pipe != 2) return "mma_pipe must be 1 or 2";
    if (c.mma_sched != 1 && c.mma_sched != 2) return "mma_sched must be 1 or 2";
    if (c.exp_poly < 1 || c.exp_poly > 8) return "exp_poly must be in 1..8";
    if (c.rescale != 1 && c.rescale != 2) return "rescale must be 1 (every tile) or 2 (lazy)";
    if (c.persistent < 1 || c.persistent > 3)
      return "persistent must be 1 (a block per unit), 2 (a persistent grid, static) or 3 (persistent, dynamic)";
    if (c.mma_sched == 2 && (c.mma_pipe != 2 || warps < 8))
      return "mma_sched 2 (ping-pong) needs mma_pipe 2 and 2+ consumer warpgroups (num_warps 8 or 12)";
    const std::int64_t mb = c.min_blocks;
    if (mb < 1 || mb > 8 || (warps + 4) * 32 * mb > 2048)
      return "min_blocks " + std::to_string(mb) + " x " + std::to_string((warps + 4) * 32) + " threads > 2048 per SM (or not in 1..8)";
    if (c.epilogue != 1 && c.epilogue != 2) return "epilogue must be 1 (direct) or 2 (staged, TMA store)";
    const std::int64_t pack = c.pack_heads, rph = c.rows_per_head();
    if (pack < 1 || s.group() % pack != 0 || bm % pack != 0)
      return "pack_heads " + std::to_string(pack) + " must divide the GQA group (" + std::to_string(s.group()) +
             ") and block_m " + std::to_string(bm);
    if (rph % 64 != 0 && 64 % rph != 0)
      return "mma 91: block_m / pack_heads = " + std::to_string(rph) +
             " query rows per head must be a multiple or a divisor of 64 (a warpgroup's rows in one head or whole heads)";
    const std::int64_t smem = smem_bytes(c, s);
    if (smem > d.max_shared_per_block_optin)
      return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B";
    if (mb > 1 && (smem + 1024) * mb > d.max_shared_per_sm)
      return "min_blocks " + std::to_string(mb) + " x " + std::to_string(smem) + " B of shared memory > " +
             std::to_string(d.max_shared_per_sm) + " B per SM";
    // Consumer registers per thread: O accumulators (hd / 2), S (bn / 2), P fragments (bn / 8; mma_pipe 2 keeps
    // them across the next S: bn / 4), ~30 others; the kernel's cap after the producer gives its share back.
    const std::int64_t regs = hd / 2 + bn / 2 + bn / (c.mma_pipe == 2 ? 4 : 8) + 30;
    // ptxas needs the O accumulators and ~30 others within the launch share itself (C7602 below it, seen with
    // head_dim 128 at 80 registers: two consumers, 2 blocks per SM), whatever setmaxnreg adds later.
    const std::int64_t entry = FtWarpRoleRegs::entry(int(warps / 4), int(mb));
    if (entry < hd / 2 + 30)
      return "min_blocks " + std::to_string(mb) + " leaves " + std::to_string(entry) + " registers per thread at launch, "
             "fewer than the " + std::to_string(hd / 2) + " O accumulators and ~30 others ptxas needs there";
    const std::int64_t cap = FtWarpRoleRegs::consumer(int(warps / 4), int(mb));
    if (regs > cap)
      return "about " + std::to_string(regs) + " registers per consumer thread needed (" + std::to_string(warps / 4) +
             " consumer warpgroups get " + std::to_string(cap) + ")";
    return std::nullopt;
  }

  std::string name_expression(const FwdConfig& c, const Shape& s) const override {
    return "attn_fwd_tma_kernel<" + std::string(storage_type(s.dtype)) + ", " + std::to_string(s.head_dim) + ", " +
           std::to_string(c.block_n) + ", " + std::to_string(c.warpgroups()) + ", " + std::to_string(c.num_stages) +
           ", " + std::to_string(c.mma_pipe) + ", " + std::to_string(c.mma_sched) + ", " + std::to_string(c.epilogue) +
           ", " + bool_arg(s.causal) + ", " + bool_arg(s.has_window()) + ", " + bool_arg(s.learned_sinks) + ", " +
           std::to_string(c.pack_heads) + ", " + std::to_string(c.min_blocks) + ", " + std::to_string(c.exp_poly) + ", " + std::to_string(c.rescale) + ", " + std::to_string(c.persistent) + ">";
  }

  // A 1-D grid over the work units (query block, heads, batch): one block each, or (persistent) at most
  // SMs x min_blocks blocks looping over them; 128 threads more than num_warps says (the producer warpgroup).
  LaunchShape launch_shape(const FwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    LaunchShape l = fwd_launch(c, s, smem_bytes(c, s));
    const std::int64_t units = std::int64_t(l.grid[0]) * l.grid[1] * l.grid[2];
    l.grid[0] = unsigned(c.persistent >= 2 ? std::min<std::int64_t>(units, std::int64_t(d.num_sms) * c.min_blocks) : units);
    l.grid[1] = l.grid[2] = 1;
    l.block[0] += 128;
    return l;
  }

  // FtAttnFwdTmaParams: the forward's struct, then the four maps over its tensors with their strides.
  std::vector<KernelArg> arguments(const FwdConfig& c, const Shape& s, std::vector<KernelArg> shared) const override {
    auto& params = std::get<ParamsArg>(shared.at(0));
    FtAttnFwdParams<void> a;
    std::memcpy(&a, params.bytes.data(), sizeof a);
    using Tma = FtAttnFwdTmaParams<void>;
    params.grow(sizeof(Tma));
    const std::int64_t rph = c.rows_per_head(), o_rows = std::min<std::int64_t>(64, rph);
    map_heads_tensor(params, offsetof(Tma, q_map), kQ, s, s.seq_q, s.heads_q, a.q_ss, a.q_sh, a.q_sb, rph, c.pack_heads);
    map_heads_tensor(params, offsetof(Tma, k_map), kK, s, s.seq_k, s.heads_kv, a.k_ss, a.k_sh, a.k_sb, c.block_n);
    map_heads_tensor(params, offsetof(Tma, v_map), kV, s, s.seq_k, s.heads_kv, a.v_ss, a.v_sh, a.v_sb, c.block_n);
    map_heads_tensor(params, offsetof(Tma, o_map), kO, s, s.seq_q, s.heads_q, a.o_ss, a.o_sh, a.o_sb, o_rows, 64 / o_rows);
    params.set(offsetof(Tma, batch), int(s.batch));
    params.set(offsetof(Tma, unit_group), unit_group(c, s));
    params.bind(offsetof(Tma, sched), kSchedule);
    return shared;
  }

 private:
  static std::int64_t smem_bytes(const FwdConfig& c, const Shape& s) {
    return FtAttnSmem::fwd_tma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages),
                               c.persistent >= 2 && c.epilogue == 2, c.persistent == 3);
  }
  // How many (head group, batch) units a section of the kernel's unit order spans: as many as keep their K and V
  // within half an L2 of 50 MB (the H100's and H200's; the descriptor has no device here), the query heads
  // of one kv head counting once. At least 1; 1 is the order of one block per (query block) over each head in turn.
  static int unit_group(const FwdConfig& c, const Shape& s) {
    const std::int64_t kv_bytes = 2 * s.seq_k * s.head_dim * 2;  // K and V of one kv head
    const std::int64_t kv_heads = std::max<std::int64_t>(1, (25ll << 20) / std::max<std::int64_t>(1, kv_bytes));
    const std::int64_t per_kv = std::max<std::int64_t>(1, s.group() / c.pack_heads);  // units sharing one kv head
    const std::int64_t units = s.heads_q / c.pack_heads * s.batch;
    return int(std::clamp<std::int64_t>(kv_heads * per_kv, 1, units));
  }
};

}  // namespace

std::unique_ptr<FwdVariant> make_fwd_tma_variant() { return std::make_unique<FwdTma>(); }

}  // namespace flashtune::kernels::attn
