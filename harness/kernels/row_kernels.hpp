// harness/kernels/row_kernels.hpp: what the row-wise kernel families (weighted_row_sum, softmax) share:
// one mapping of rows to blocks (kRowsPerBlock rows per block, blocks striding over row groups), the
// same three tunables, their validity rules, and the template's element type names.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/kernels/config_views.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/problem_views.hpp"

namespace flashtune::kernels::row {

/// Element type as the templates spell it: "float", "ft_half", "ft_bf16" (kernel_templates/ft_common.cuh).
std::string device_type_name(core::DType d);

/// block_threads, rows_per_block, vec with their default search values.
std::vector<TunableSpec> tunables();
/// Always-on constraints (muparser): the variable `dtype_bytes` must be provided by the evaluator.
std::vector<std::string> constraints();

/// Rules of the row mapping: whole warps, block <= device limit, rows_per_block divides the block,
/// threads per row a multiple of 32 or a power-of-two divisor of 32, vec a power of two of <= 16 bytes.
std::optional<std::string> can_run(const core::Config& c, const core::Problem& p, const core::DeviceLimits& d);

/// "<kernel><T, block_threads, rows_per_block, vec>", e.g. "softmax_kernel<ft_half, 256, 1, 8>".
Specialization specialize(const std::string& kernel, const core::Config& c, const core::Problem& p);

/// block = block_threads; grid.x = ceil(rows / rows_per_block), capped at kMaxGridX (the kernel strides
/// over row groups, so a capped grid still covers every row). No dynamic shared memory.
LaunchShape launch_shape(const core::Config& c, const core::Problem& p);

inline constexpr std::int64_t kMaxGridX = 2147483647;  ///< CUDA's grid.x limit

/// The overrides every row family shares (stage, dims, dtypes, tunables, constraints, checks, name
/// expression, launch shape); a family adds its name, template, buffers, arguments, counts and reference.
class RowKernelFamily : public KernelFamily {
 public:
  /// `kernel`: the template's function name, e.g. "softmax_kernel".
  explicit RowKernelFamily(std::string kernel) : m_kernel(std::move(kernel)) {}

  std::string stage() const override { return "forward"; }
  std::vector<std::string> problem_dims() const override { return {"rows", "cols"}; }
  std::vector<core::DType> dtypes() const override { return {core::DType::f32, core::DType::f16, core::DType::bf16}; }
  std::vector<TunableSpec> tunables() const override { return row::tunables(); }
  std::vector<std::string> constraints() const override { return row::constraints(); }
  std::optional<std::string> check_problem(const core::Problem& p) const override { return row::check_problem(p); }
  std::optional<std::string> can_run(const core::Config& c, const core::Problem& p,
                                     const core::DeviceLimits& d) const override {
    return row::can_run(c, p, d);
  }
  Specialization specialize(const core::Config& c, const core::Problem& p) const override {
    return row::specialize(m_kernel, c, p);
  }
  LaunchShape launch_shape(const core::Config& c, const core::Problem& p, const core::DeviceLimits&) const override {
    return row::launch_shape(c, p);
  }

 private:
  std::string m_kernel;
};

}  // namespace flashtune::kernels::row
