// harness/kernels/config_views.hpp: typed views of a core::Config, one per operation's search space, built once
// at the top of a descriptor's method. A config of an operation carries every tunable of its space, whichever
// variant it selects; each variant reads the fields it owns. A tunable added after configs were recorded has
// the value those configs ran as its default here, so an old config keeps its meaning. The constructors
// (config_views.cpp) are the only places in harness/kernels that look a tunable up by name; a required
// tunable that is missing throws core::Error.
#pragma once

#include <cstdint>

#include "harness/core/types.hpp"

namespace flashtune::kernels {

namespace attn {

/// The tiles every attention kernel of attn_fwd and the backward's gradient stages is built from.
struct Tiles {
  std::int64_t block_m = 0;     ///< query rows per block (forward) or per tile (backward)
  std::int64_t block_n = 0;     ///< keys per K/V tile
  std::int64_t num_warps = 0;   ///< warps per block
  std::int64_t num_stages = 0;  ///< tiles in flight (cp.async pipeline depth)

  explicit Tiles(const core::Config& c);
  std::int64_t threads() const { return 32 * num_warps; }
  std::int64_t warpgroups() const { return num_warps / 4; }  ///< wgmma: 4 warps each
};

/// attn_fwd's config. Tunables added after the first configs were recorded default to the kernel those
/// configs ran: mma 80 (mma.sync), and the wgmma kernels' mma_pipe, min_blocks, epilogue, pack_heads, mma_sched,
/// exp_poly, rescale, persistent at 1.
struct FwdConfig : Tiles {
  std::int64_t mma = 80;         ///< the variant: 80 mma.sync, 90 wgmma, 91 TMA + warp-specialized wgmma (fp32: mma 80)
  std::int64_t mma_pipe = 1;     ///< wgmma: 1 = S, softmax, P V in order; 2 = P V of tile i - 1 beside softmax i
  std::int64_t min_blocks = 1;   ///< wgmma (90): blocks per SM it is compiled to fit (__launch_bounds__)
  std::int64_t epilogue = 1;     ///< wgmma: 1 = O stored from the accumulators, 2 = staged in shared memory
  std::int64_t pack_heads = 1;   ///< wgmma: query heads of one GQA group per block
  std::int64_t mma_sched = 1;    ///< mma 91: 1 = each consumer warpgroup issues when ready, 2 = in turns (ping-pong)
  std::int64_t exp_poly = 1;     ///< mma 91: 1 = every exponential on the SFU; k >= 2: 1 column tile in k on the FMA pipe
  std::int64_t rescale = 1;      ///< mma 91: 1 = O rescaled every key tile; 2 = lazily (FA4: only when a max grew > 8)
  std::int64_t persistent = 1;   ///< mma 91: 1 = a block per work unit; 2 = a persistent grid looping over them

  explicit FwdConfig(const core::Config& c);
  std::int64_t rows_per_head() const { return block_m / pack_heads; }  ///< query rows of one head in a block
};

/// The backward gradient stages' config (attn_bwd_dkdv, attn_bwd_dq, attn_bwd_dq_delta, attn_bwd_fused): the
/// tiles and each stage's own tunables, at the value configs recorded before them ran.
struct BwdConfig : Tiles {
  std::int64_t mma = 80;         ///< dkdv's variant: 80 mma.sync, 90 wgmma (fp32: the fp32 kernel, mma 80)
  std::int64_t sink_split = 1;   ///< dkdv: extra blocks per key tile holding sink tokens
  std::int64_t item_split = 1;   ///< dkdv (mma 80): blocks per key tile, each over a chunk of the tile's items
  std::int64_t min_blocks = 1;   ///< dkdv, dq, dq_delta (mma.sync, fp16 / bf16): blocks per SM (__launch_bounds__)
  std::int64_t pack_heads = 1;   ///< dq, dq_delta (fp16 / bf16): query heads of one GQA group per block
  std::int64_t dq_order = 1;     ///< fused: 1 = dQ adds in any order; 2 = in key-block order, deterministic (mma 91)
  std::int64_t unit_group = 1;   ///< fused (mma 91): (kv head, batch) pairs per section of the block order
  std::int64_t tail = 1;         ///< fused (mma 91, dq_order 1): 2 = the last partial wave's blocks split in pieces
  std::int64_t timeline = 1;     ///< fused (mma 91, tail 1): 2 = each block records its phases' times (a diagnostic)
  std::int64_t epilogue = 1;     ///< fused (mma 91): 1 = dK, dV stored from the registers; 2 = staged, stored by TMA

  explicit BwdConfig(const core::Config& c);
};

/// attn_bwd_preprocess's config.
struct PreprocessConfig {
  std::int64_t block_m = 0;    ///< query rows per block
  std::int64_t num_warps = 0;  ///< warps per block

  explicit PreprocessConfig(const core::Config& c);
};

/// attn_bwd_dsink's config.
struct DsinkConfig {
  std::int64_t num_warps = 0;  ///< warps per head

  explicit DsinkConfig(const core::Config& c);
};

/// The materialized-score baselines' config (attn_naive, attn_eager).
struct BaselineConfig {
  std::int64_t block_threads = 0;  ///< threads per block of their kernels

  explicit BaselineConfig(const core::Config& c);
};

}  // namespace attn

namespace row {

/// The row-wise operations' config (weighted_row_sum, softmax).
struct RowConfig {
  std::int64_t block_threads = 0;   ///< threads per block
  std::int64_t rows_per_block = 0;  ///< rows a block works on at once
  std::int64_t vec = 0;             ///< elements per load

  explicit RowConfig(const core::Config& c);
};

}  // namespace row

namespace smm {

/// softmax_matmul's config.
struct SmmConfig {
  std::int64_t block_m = 0, block_n = 0, block_k = 0;  ///< rows of X, columns of out, columns of X per chunk
  std::int64_t num_warps = 0;

  explicit SmmConfig(const core::Config& c);
  std::int64_t threads() const { return 32 * num_warps; }
};

}  // namespace smm

}  // namespace flashtune::kernels
