// harness/kernels/attn_bwd_f32.hpp: the fp32 kernels of the attn_bwd_dkdv and attn_bwd_dq families
// (kernel_templates/attn_bwd_f32.cuh): exact FFMA, or TF32 tensor cores when the problem says tf32 = 1.
// Same tunables, arguments, grids and buffers as the fp16 / bf16 kernels (attn_bwd_dkdv.cpp, attn_bwd_dq.cpp); these say what
// differs: which configs run, the name expression, shared memory and the register estimate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "harness/kernels/config_views.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/problem_views.hpp"

namespace flashtune::kernels::attn_bwd_f32 {

/// The stage: dK, dV (a warp owns block_n / num_warps keys) or dQ (block_m / num_warps query rows).
enum class Stage { dkdv, dq };

/// nullopt when the fp32 kernel of `stage` (FFMA or TF32 as p says) can run config c on device d, else why not.
std::optional<std::string> can_run(Stage stage, const attn::Tiles& c, const attn::Shape& s, const core::DeviceLimits& d);
/// The name expression, e.g. "attn_bwd_dq_f32_kernel<64, 64, 64, 4, 2, false, true, false>".
std::string name_expression(Stage stage, const attn::Tiles& c, const attn::Shape& s);
/// [bytes] dynamic shared memory of one block.
std::int64_t smem_bytes(Stage stage, const attn::Tiles& c, const attn::Shape& s);
/// Registers per thread, estimated (calibrated on ptxas; tests/attention/attn_bwd_f32_test.cpp compiles the space).
std::int64_t registers(Stage stage, const attn::Tiles& c, const attn::Shape& s);

}  // namespace flashtune::kernels::attn_bwd_f32
