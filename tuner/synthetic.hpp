// tuner/synthetic.hpp: synthetic stand-ins for exhaustive runs of the attention forward kernel, so the
// strategies can be proved (tests, `flashtune replay --synthetic NAME`) before a GPU has recorded real
// ones. The spaces are attn_fwd's tunables under its constraints; the times come from a small
// performance model of an H100-class GPU, not from measurements: occupancy limited by shared memory,
// registers and threads; wave quantization over 132 SMs; MMA efficiency growing with the warp tile;
// per-K/V-tile overhead; latency hidden by pipeline stages and resident warps; register spills;
// DRAM traffic; split-KV combine cost; and a deterministic +-2 % noise. Configs past the shared-memory
// limit fail (resource_exceeded), past twice the register file per thread are invalid_config. What
// such a surface shares with real ones is its shape (smooth on log tile sizes, with interactions, cliffs
// and failures), which is what a strategy exploits; its optimum is known by enumeration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tuner/replay.hpp"

namespace flashtune::tuner {

struct AttentionShape {
  std::int64_t batch = 4, heads = 32, seq = 4096, head_dim = 128;
  bool causal = false;
  /// false: attn_fwd's space (block_m, block_n 16..128, num_warps 1..8, num_stages 1..3; 84 configs).
  /// true: a wider one (block_m, block_n 16..256, num_warps 1..16, num_stages 1..4, kv_split 1..8).
  bool wide = false;
};

/// The synthetic surface of `shape`; `noise_seed` picks the noise.
Surface attention_surface(const AttentionShape& shape, std::uint64_t noise_seed = 1);

/// Named surfaces for the command line and the bar: attn_fwd_d64, attn_fwd_d128, attn_fwd_d256,
/// attn_fwd_d128_causal, attn_fwd_wide_d128 (batch 1, 8 heads: split-KV matters), attn_fwd_wide_d64.
std::vector<std::string> synthetic_surface_names();
/// Throws core::UserError for an unknown name (listing the known ones).
Surface synthetic_surface(const std::string& name, std::uint64_t noise_seed = 1);

}  // namespace flashtune::tuner
