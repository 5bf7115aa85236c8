// harness/kernels/attn_fwd.hpp: the variants of the attention forward operation (attn_fwd.cpp): the type they
// implement, what they share (the grid, the tile footprint) and their factories, one per kernel:
// mma.sync (attn_fwd.cpp), Hopper wgmma (attn_fwd_sm90.cpp), Hopper TMA + warp specialization
// (attn_fwd_sm90_tma.cpp), fp32 exact or TF32 (attn_fwd_f32.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/kernels/attention.hpp"
#include "harness/kernels/config_views.hpp"
#include "harness/kernels/operation.hpp"
#include "harness/kernels/problem_views.hpp"

namespace flashtune::kernels::attn {

using FwdVariant = Variant<Shape, FwdConfig>;

/// attn_fwd's buffers: the attention forward's (attention.hpp), then the work-unit scheduler's two 32-bit counters
/// (a workspace the runner zeroes; the kernels that count on it, mma 91 persistent 3, leave it zero again).
inline constexpr int kSchedule = kLse + 1;
std::vector<BufferSpec> fwd_op_buffers(const Shape& s);

/// The forward's launch: one block per block_m / pack_heads query rows of pack_heads heads (grid.x), per group
/// of pack_heads query heads (grid.y), per batch (grid.z); 32 num_warps threads; `smem` [bytes] dynamic shared memory.
LaunchShape fwd_launch(const FwdConfig& c, const Shape& s, std::int64_t smem);

/// [bytes] the Q tile and num_stages (K tile, V tile) pairs in the problem dtype, all block x head_dim elements.
std::int64_t fwd_tile_bytes(const FwdConfig& c, const Shape& s);

std::unique_ptr<FwdVariant> make_fwd_mma_variant();    ///< mma 80: mma.sync m16n8k16 (sm_80+), attn_fwd.cuh
std::unique_ptr<FwdVariant> make_fwd_wgmma_variant();  ///< mma 90: warpgroup wgmma (sm_90a), attn_fwd_sm90.cuh
std::unique_ptr<FwdVariant> make_fwd_tma_variant();    ///< mma 91: TMA, warp-specialized wgmma (sm_90a), attn_fwd_sm90_tma.cuh
std::unique_ptr<FwdVariant> make_fwd_f32_variant();    ///< fp32 problems: FFMA or TF32 mma.sync, attn_fwd_f32.cuh

}  // namespace flashtune::kernels::attn
