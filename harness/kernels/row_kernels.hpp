// harness/kernels/row_kernels.hpp: what the row-wise kernel families (weighted_row_sum, softmax) share:
// one mapping of rows to blocks (kRowsPerBlock rows per block, blocks striding over row groups), the
// same three tunables, their validity rules, and the template's element type names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/kernels/family.hpp"

namespace flashtune::kernels::row {

/// Element type as the templates spell it: "float", "ft_half", "ft_bf16" (kernel_templates/ft_common.cuh).
std::string device_type_name(core::DType d);

/// block_threads, rows_per_block, vec with their default search values.
std::vector<TunableSpec> tunables();
/// Always-on constraints (muparser): the variable `dtype_bytes` must be provided by the evaluator.
std::vector<std::string> constraints();

/// rows >= 1, cols >= 1, a supported dtype.
std::optional<std::string> check_problem(const core::Problem& p);
/// Rules of the row mapping: whole warps, block <= device limit, rows_per_block divides the block,
/// threads per row a multiple of 32 or a power-of-two divisor of 32, vec a power of two of <= 16 bytes.
std::optional<std::string> can_run(const core::Config& c, const core::Problem& p, const core::DeviceLimits& d);

/// "<kernel><T, block_threads, rows_per_block, vec>", e.g. "softmax_kernel<ft_half, 256, 1, 8>".
Specialization specialize(const std::string& kernel, const core::Config& c, const core::Problem& p);

/// block = block_threads; grid.x = ceil(rows / rows_per_block), capped at kMaxGridX (the kernel strides
/// over row groups, so a capped grid still covers every row). No dynamic shared memory.
LaunchShape launch_shape(const core::Config& c, const core::Problem& p);

inline constexpr std::int64_t kMaxGridX = 2147483647;  ///< CUDA's grid.x limit

}  // namespace flashtune::kernels::row
