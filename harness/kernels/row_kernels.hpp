// harness/kernels/row_kernels.hpp: what the row-wise operations (weighted_row_sum, softmax) share: one mapping of
// rows to blocks (rows_per_block rows per block, blocks striding over row groups), the same three tunables, their
// validity rules, the template's element type names, and the variant every one of their kernels is.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/kernels/config_views.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/operation.hpp"
#include "harness/kernels/problem_views.hpp"

namespace flashtune::kernels::row {

/// block_threads, rows_per_block, vec with their default search values.
std::vector<TunableSpec> tunables();
/// Always-on constraints (muparser): the variable `dtype_bytes` must be provided by the evaluator.
std::vector<std::string> constraints();

inline constexpr std::int64_t kMaxGridX = 2147483647;  ///< CUDA's grid.x limit

/// A row-wise kernel: `kernel`<T, block_threads, rows_per_block, vec> of template `file`. It runs under the row
/// mapping's rules: whole warps, block <= device limit, rows_per_block divides the block, threads per row a
/// multiple of 32 or a power-of-two divisor of 32, vec a power of two of <= 16 bytes. block = block_threads; grid.x = ceil(rows / rows_per_block), capped at kMaxGridX (the
/// kernel strides over row groups, so a capped grid still covers every row). No dynamic shared memory.
class RowKernel : public Variant<Shape, RowConfig> {
 public:
  /// `name`: the variant's; `file`: its template; `kernel`: the template's function name, e.g. "softmax_kernel".
  RowKernel(std::string name, std::string file, std::string kernel, std::int64_t selector = 0);
  std::optional<std::string> can_run(const RowConfig& c, const Shape& s, const core::DeviceLimits& d) const override;
  std::string name_expression(const RowConfig& c, const Shape& s) const override;
  LaunchShape launch_shape(const RowConfig& c, const Shape& s, const core::DeviceLimits& d) const override;

 private:
  std::string m_kernel;
};

/// What every row-wise operation shares (stage, dims, dtypes, tunables, constraints, checks); an operation adds its
/// name, template, variants, buffers, arguments, counts and reference.
class RowOperation : public Operation<Shape, RowConfig> {
 public:
  std::string stage() const override { return "forward"; }
  std::vector<std::string> problem_dims() const override { return {"rows", "cols"}; }
  std::vector<core::DType> dtypes() const override { return {core::DType::f32, core::DType::f16, core::DType::bf16}; }
  std::optional<std::string> check_problem(const core::Problem& p) const override { return row::check_problem(p); }

 protected:
  using Operation::Operation;
  std::vector<TunableSpec> shared_tunables() const override { return row::tunables(); }
  std::vector<std::string> shared_constraints() const override { return row::constraints(); }
};

}  // namespace flashtune::kernels::row
