// harness/kernels/attn_fwd_f32.hpp: the fp32 half of the attn_fwd family (kernel_templates/attn_fwd_f32.cuh):
// exact FFMA, or TF32 tensor cores when the problem says tf32 = 1. Same tunables, arguments, grid and
// buffers as the fp16 / bf16 kernel (see attn_fwd.cpp); these say what differs.
#pragma once

#include <optional>
#include <string>

#include "harness/kernels/config_views.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/problem_views.hpp"

namespace flashtune::kernels::attn_f32 {

/// nullopt when the f32 kernel (FFMA or TF32 as p says) can run config c on problem s, device d, else why not.
std::optional<std::string> can_run(const attn::Tiles& c, const attn::Shape& s, const core::DeviceLimits& d);
/// The name expression, e.g. "attn_fwd_f32_kernel<64, 64, 64, 4, 2, false, true, false, false>".
std::string name_expression(const attn::Tiles& c, const attn::Shape& s);
/// [bytes] dynamic shared memory of one block.
unsigned dynamic_smem_bytes(const attn::Tiles& c, const attn::Shape& s);

}  // namespace flashtune::kernels::attn_f32
