// harness/kernels/attn_bwd_dkdv.cpp: the attn_bwd_dkdv operation (dK, dV: one block per key tile over the query
// tiles and GQA heads that see it, no atomics) and its variants, picked by the tunable mma: 80, mma.sync (every GPU
// since sm_80, kernel_templates/attn_bwd.cuh); 90, Hopper wgmma (sm_90a, attn_bwd_sm90.cuh); fp32 problems run the
// fp32 kernel (exact or TF32, attn_bwd_f32.cuh). It launches itself: with sink_split > 1 (or item_split > 1) a
// second launch adds the split sink tiles' (or every tile's) fp32 partials.
#include <algorithm>

#include "harness/kernels/attn_bwd_f32.hpp"
#include "harness/kernels/attn_bwd_stage.hpp"
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {
namespace {

using namespace attn_bwd;

std::string n(std::int64_t v) { return std::to_string(v); }

constexpr std::int64_t kMaxSinkSplit = 64;
// Sink-token rows of K (the tiles the split serves); 0 without sink tokens seen through a window.
std::int64_t sink_rows(const Shape& s) { return s.has_sink_tiles() ? std::min(s.sink_tokens, s.seq_k) : 0; }
// The sink_split the kernel runs: the config's where there are sink tiles, else 1.
std::int64_t active_split(const BwdConfig& c, const Shape& s) { return s.has_sink_tiles() ? c.sink_split : 1; }

// The item split: at most kMaxItemSplit blocks per key tile, and only where its workspace, item_split x (dK and dV
// of every key row, fp32), stays within kItemSplitBytes (it is for grids of few key tiles x kv heads: MQA).
constexpr std::int64_t kMaxItemSplit = 16;
constexpr std::int64_t kItemSplitBytes = std::int64_t(64) << 20;
// [floats] one slot: dK and dV of every key row of every (batch, kv head).
std::int64_t item_slot_floats(const Shape& s) { return 2 * s.batch * s.heads_kv * s.seq_k * s.head_dim; }
// The largest item_split problem s admits (1: none).
std::int64_t max_item_split(const Shape& s) {
  const std::int64_t fit = kItemSplitBytes / (4 * std::max<std::int64_t>(1, item_slot_floats(s)));
  return std::clamp<std::int64_t>(fit, 1, kMaxItemSplit);
}

// One block per key tile (item split: item_split per key tile), plus sink_split per key tile holding sink tokens
// when that split is on; per kv head.
LaunchShape dkdv_launch(const BwdConfig& c, const Shape& s, std::int64_t smem) {
  const std::int64_t bn = c.block_n, split = active_split(c, s), tiles = (s.seq_k + bn - 1) / bn;
  const std::int64_t extra = split > 1 ? (sink_rows(s) + bn - 1) / bn * split : 0;
  return grad_launch(tiles * c.item_split + extra, s.heads_kv, c, s, smem);
}

// mma 80: each warp owns one or two 16-key MMA tiles.
class DkdvMma final : public GradVariant {
 public:
  DkdvMma()
      : GradVariant({"sm80_mma", "attn_bwd.cuh", {core::DType::f16, core::DType::bf16}, 80, "80 = mma.sync (sm_80+)",
                     {min_blocks_tunable()}, {}}) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (c.mma != 80) return "mma must be 80 (mma.sync) or 90 (wgmma), not " + n(c.mma);
    if (auto why = mma_sync_problem(c, d, c.block_n, "block_n", smem_bytes(c, s), registers(c, s))) return why;
    // dK and dV (head_dim / 2 each), S and dP (block_m / 2 each) per 16-key tile of a warp
    return min_blocks_problem(c, s, d, smem_bytes(c, s), c.block_n / (16 * c.num_warps) * (s.head_dim + c.block_m));
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    return mma_sync_name("attn_bwd_dkdv_kernel", c, s);
  }
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return dkdv_launch(c, s, smem_bytes(c, s));
  }

 private:
  // K and V tiles, then num_stages x (Q tile, dO tile, LSE and D of block_m rows).
  static std::int64_t smem_bytes(const BwdConfig& c, const Shape& s) {
    return FtAttnSmem::dkdv_mma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages));
  }
  // Per warp tile of 16 keys: dK and dV accumulators (head_dim / 2 each), S^T and dP^T (block_m / 2 each),
  // P^T fragments (block_m / 4), plus addresses, loop and pipeline state.
  static std::int64_t registers(const BwdConfig& c, const Shape& s) {
    return attn::Registers::dkdv_mma(s.head_dim, c.block_m, c.block_n, c.num_warps, c.num_stages);
  }
};

// mma 90: a warpgroup (4 warps) owns 64 keys, the query tile is the N (64 or 128) of S^T = K Q^T, rows of 128-byte
// slabs, no sink-token split.
class DkdvWgmma final : public GradVariant {
 public:
  DkdvWgmma()
      : GradVariant({"sm90_wgmma", "attn_bwd_sm90.cuh", {core::DType::f16, core::DType::bf16}, 90,
                     "90 = warpgroup wgmma (sm_90a; a warpgroup of 4 warps per 64 keys, block_m 64 or 128, head_dim a "
                     "multiple of 64, sink_split and item_split 1)",
                     {},
                     {"mma != 90 || (block_n == 16 * num_warps && num_warps % 4 == 0 && (block_m == 64 || block_m == 128) "
                      "&& head_dim % 64 == 0 && sink_split == 1 && item_split == 1)"}}) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (c.min_blocks != 1) return "min_blocks is an mma 80 option; mma 90 takes 1";
    if (active_split(c, s) != 1) return "mma 90 has no sink-token split: sink_split must be 1";
    if (c.item_split != 1) return "mma 90 has no item split: item_split must be 1";
    if (auto why = wgmma_problem(c, s, d, smem_bytes(c, s), registers(c, s))) return "mma 90: " + *why;
    return std::nullopt;
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    return wgmma_name("attn_bwd_dkdv_wgmma_kernel", c, s);
  }
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return dkdv_launch(c, s, smem_bytes(c, s));
  }

 private:
  // K and V tiles, the stages, and 1 KiB to align the tiles to the 1024-byte swizzle atoms wgmma reads.
  static std::int64_t smem_bytes(const BwdConfig& c, const Shape& s) {
    return FtAttnSmem::bwd_wgmma(int(s.head_dim), int(c.block_m), int(c.block_n), int(c.num_stages), false);
  }
  static std::int64_t registers(const BwdConfig& c, const Shape& s) { return attn::Registers::dkdv_wgmma(s.head_dim, c.block_m); }
};

// fp32 problems, FFMA or TF32 (mma 80 and no sink-token split only).
class DkdvF32 final : public GradVariant {
 public:
  DkdvF32() : GradVariant({"f32", "attn_bwd_f32.cuh", {core::DType::f32}, 80, "", {}, {}}) {}
  std::optional<std::string> can_run(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (c.mma != 80 || active_split(c, s) != 1 || c.item_split != 1)
      return "fp32 runs mma 80 (FFMA or TF32 mma.sync) without the sink-token or item split: mma 80, sink_split 1, "
             "item_split 1";
    if (auto why = attn_bwd_f32::can_run(attn_bwd_f32::Stage::dkdv, c, s, d)) return why;
    return min_blocks_problem(c, s, d, 0, 0);  // fp32 takes min_blocks 1
  }
  std::string name_expression(const BwdConfig& c, const Shape& s) const override {
    return attn_bwd_f32::name_expression(attn_bwd_f32::Stage::dkdv, c, s);
  }
  LaunchShape launch_shape(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    return dkdv_launch(c, s, attn_bwd_f32::smem_bytes(attn_bwd_f32::Stage::dkdv, c, s));
  }
};

class AttnBwdDkdv final : public GradStage {
 public:
  AttnBwdDkdv() : GradStage(Selector{"mma", &BwdConfig::mma, "tensor-core instructions: "}) {
    add_variant(std::make_unique<DkdvMma>());
    add_variant(std::make_unique<DkdvWgmma>());
    add_variant(std::make_unique<DkdvF32>());
  }
  std::string name() const override { return "attn_bwd_dkdv"; }
  std::string stage() const override { return "backward_dkdv"; }
  std::string description() const override {
    return "attention backward dK, dV: one block per key tile over the query tiles and GQA heads that see it, no atomics; "
           "sink-token tiles split over sink_split extra blocks, or every tile's items over item_split blocks, reduced in "
           "fixed order";
  }
  std::vector<KernelArg> arguments(const core::Config& config, const core::Problem& p) const override {
    const BwdConfig c(config);
    const Shape s(p);
    return {bwd_params(s, bindings(c, s))
                .set(offsetof(BwdParams, sink_split), std::int32_t(active_split(c, s)))
                .set(offsetof(BwdParams, item_split), std::int32_t(c.item_split))};
  }
  bool launches_itself() const override { return true; }
  // The main launch, then (split sink tiles, or the item split) the reduction of the partials: the same kernel
  // with reduce = 1, one thread per element of the split rows (the sink rows, or every key row) of a (kv head,
  // batch).
  void launch(const LaunchEnv& env, const core::Config& config, const core::Problem& p) const override {
    const BwdConfig c(config);
    const Shape s(p);
    attn::expect_buffers(env, std::size_t(kWorkspace + 1), name());
    auto args = arguments(config, p);
    launch_pass(env, args);
    if (active_split(c, s) == 1 && c.item_split == 1) return;
    const std::int64_t rows = c.item_split > 1 ? s.seq_k : sink_rows(s);
    const std::int64_t elems = rows * s.head_dim, threads = env.shape.threads_per_block();
    launch_second_pass(env, args, offsetof(BwdParams, reduce),
                       {unsigned((elems + threads - 1) / threads), env.shape.grid[1], env.shape.grid[2]});
  }
  /// S^T, dP^T, dK and dV recomputed or accumulated: 8 * head_dim per visible pair and query head.
  double flops(const core::Problem& p) const override { return visible_pair_flops(Shape(p), 8.0); }

 protected:
  std::vector<TunableSpec> shared_tunables() const override {
    auto t = GradStage::shared_tunables();
    t[0].values.push_back(128);  // block_m 128: mma 90 at head_dim 64
    t.push_back({"sink_split", {1, 4, 16, 64},
                 "extra blocks per key tile holding sink tokens (window only), each over a chunk of its far queries"});
    // Searched only where named (it multiplies every space; grids that fill the GPU gain nothing from it).
    t.push_back({"item_split", {1},
                 "mma 80: blocks per key tile, each over a chunk of its (GQA head, query tile) items, fp32 partials added "
                 "after (for grids of few key tiles x kv heads: MQA); 1..16, within a 64 MiB workspace"});
    return t;
  }
  // mma 80: each warp owns one or two 16-key MMA tiles (the wgmma variant adds its own).
  std::vector<std::string> shared_constraints() const override {
    return {"block_n % (16 * num_warps) == 0", "block_n / (16 * num_warps) <= 2"};
  }
  std::optional<std::string> check_config(const BwdConfig& c, const Shape& s, const core::DeviceLimits&) const override {
    if (c.sink_split < 1 || c.sink_split > kMaxSinkSplit) return "sink_split must be in 1.." + n(kMaxSinkSplit);
    if (c.sink_split > 1 && !s.has_sink_tiles())
      return "sink_split > 1 needs sink tokens and a window (no key tile sees every query)";
    if (c.item_split < 1 || c.item_split > kMaxItemSplit) return "item_split must be in 1.." + n(kMaxItemSplit);
    if (c.item_split > max_item_split(s))
      return "item_split " + n(c.item_split) + " needs " + n(c.item_split * item_slot_floats(s) * 4 >> 20) +
             " MiB of workspace, over its 64 MiB; this problem admits item_split <= " + n(max_item_split(s));
    if (c.item_split > 1 && active_split(c, s) > 1) return "item_split > 1 and sink_split > 1 exclude each other";
    return std::nullopt;
  }
  // The splits' fp32 partials, whatever the config (buffers() does not see it), the larger of:
  // the sink-token split's sink rows, (batch, heads_kv, kMaxSinkSplit + 1 slots, sink rows, head_dim) for dK and
  // again for dV, empty without sink tokens and a window; the item split's max_item_split(s) slots of dK and dV of
  // every key row, (batch, heads_kv, slots, seq_k, head_dim) each, empty where the problem admits no item split.
  void add_workspace(const Shape& s, std::vector<BufferSpec>& b) const override {
    const std::int64_t slots = s.has_sink_tiles() ? kMaxSinkSplit + 1 : 0;
    const std::int64_t sink = 2 * s.batch * s.heads_kv * slots * sink_rows(s) * s.head_dim;
    const std::int64_t items = max_item_split(s) > 1 ? max_item_split(s) * item_slot_floats(s) : 0;
    b.push_back({"split_partials", core::DType::f32, std::max(sink, items), BufferRole::workspace, 0, 0});
  }
  std::vector<std::pair<std::string, std::int64_t>> outputs(const Shape& s) const override {
    return {{"dk", s.elements_kv()}, {"dv", s.elements_kv()}};
  }
  std::vector<Binding> bindings(const BwdConfig&, const Shape&) const override {
    auto b = grad_inputs();
    b.insert(b.end(), {{offsetof(BwdParams, dk), kGradOut}, {offsetof(BwdParams, dv), kGradOut2},
                       {offsetof(BwdParams, ws), kWorkspace}});
    return b;
  }
  void rows_to_check(const Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const override {
    k_rows = key_rows_to_check(s);
    q_rows = {0};  // dQ is not this stage's: one row keeps the reference from computing it whole
  }
  void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>&,
            const std::vector<std::int64_t>& k_rows, const Shape& s) const override {
    take_dkdv(g, out[0], out[1], k_rows, s);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_attn_bwd_dkdv_family() { return std::make_unique<AttnBwdDkdv>(); }

}  // namespace flashtune::kernels
