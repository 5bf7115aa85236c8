// harness/kernels/row_kernels.cpp: shared rules of the row-wise operations and the variant their kernels are.
#include "harness/kernels/row_kernels.hpp"

#include <algorithm>

namespace flashtune::kernels::row {
namespace {
bool is_pow2(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
}  // namespace

std::vector<TunableSpec> tunables() {
  return {
      {"block_threads", {64, 128, 256, 512, 1024}, "threads per block (whole warps)"},
      {"rows_per_block", {1, 2, 4, 8}, "rows a block works on at once, block_threads / rows_per_block threads each"},
      {"vec", {1, 2, 4, 8}, "elements per load (vec * dtype_bytes <= 16); unaligned rows, ragged tails load 1"},
  };
}

std::vector<std::string> constraints() { return {"vec * dtype_bytes <= 16"}; }

RowKernel::RowKernel(std::string name, std::string file, std::string kernel, std::int64_t selector)
    : Variant({std::move(name), std::move(file), {core::DType::f32, core::DType::f16, core::DType::bf16}, selector, "", {}, {}}),
      m_kernel(std::move(kernel)) {}

std::optional<std::string> RowKernel::can_run(const RowConfig& c, const Shape& s, const core::DeviceLimits& d) const {
  const std::int64_t threads = c.block_threads, rows_per_block = c.rows_per_block, vec = c.vec;
  if (threads < 32 || threads % 32 != 0) return "block_threads " + std::to_string(threads) + " is not whole warps";
  if (threads > d.max_threads_per_block)
    return "block_threads " + std::to_string(threads) + " > device limit " + std::to_string(d.max_threads_per_block);
  if (rows_per_block < 1 || threads % rows_per_block != 0)
    return "rows_per_block " + std::to_string(rows_per_block) + " does not divide block_threads " +
           std::to_string(threads);
  const std::int64_t per_row = threads / rows_per_block;
  if (per_row % 32 != 0 && !(is_pow2(per_row) && per_row < 32))
    return "threads per row " + std::to_string(per_row) + " is neither whole warps nor a power-of-two part of a warp";
  if (!is_pow2(vec)) return "vec " + std::to_string(vec) + " is not a power of two";
  const std::int64_t bytes = vec * std::int64_t(core::dtype_size(s.dtype));
  if (bytes > 16) return "vec * dtype_bytes = " + std::to_string(bytes) + " > 16 (one load is at most 16 bytes)";
  return std::nullopt;
}

std::string RowKernel::name_expression(const RowConfig& c, const Shape& s) const {
  return m_kernel + "<" + storage_type(s.dtype) + ", " + std::to_string(c.block_threads) + ", " +
         std::to_string(c.rows_per_block) + ", " + std::to_string(c.vec) + ">";
}

LaunchShape RowKernel::launch_shape(const RowConfig& c, const Shape& s, const core::DeviceLimits&) const {
  const std::int64_t groups = (s.rows + c.rows_per_block - 1) / c.rows_per_block;
  LaunchShape l;
  l.grid[0] = static_cast<unsigned>(std::min(groups, kMaxGridX));
  l.block[0] = static_cast<unsigned>(c.block_threads);
  return l;
}

}  // namespace flashtune::kernels::row
