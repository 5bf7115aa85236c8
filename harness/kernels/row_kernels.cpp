// harness/kernels/row_kernels.cpp: shared rules of the row-wise kernel families.
#include "harness/kernels/row_kernels.hpp"

#include <algorithm>

namespace flashtune::kernels::row {
namespace {
bool is_pow2(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
}  // namespace

std::string device_type_name(core::DType d) {
  switch (d) {
    case core::DType::f32: return "float";
    case core::DType::f16: return "ft_half";
    case core::DType::bf16: return "ft_bf16";
  }
  throw core::Error("device_type_name: unknown dtype");
}

std::vector<TunableSpec> tunables() {
  return {
      {"block_threads", {64, 128, 256, 512, 1024}, "threads per block (whole warps)"},
      {"rows_per_block", {1, 2, 4, 8}, "rows a block works on at once, block_threads / rows_per_block threads each"},
      {"vec", {1, 2, 4, 8}, "elements per load (vec * dtype_bytes <= 16); unaligned rows, ragged tails load 1"},
  };
}

std::vector<std::string> constraints() { return {"vec * dtype_bytes <= 16"}; }

std::optional<std::string> can_run(const core::Config& c, const core::Problem& p, const core::DeviceLimits& d) {
  const RowConfig t(c);
  const std::int64_t threads = t.block_threads, rows_per_block = t.rows_per_block, vec = t.vec;
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
  const std::int64_t bytes = vec * std::int64_t(core::dtype_size(p.dtype));
  if (bytes > 16) return "vec * dtype_bytes = " + std::to_string(bytes) + " > 16 (one load is at most 16 bytes)";
  return std::nullopt;
}

Specialization specialize(const std::string& kernel, const core::Config& c, const core::Problem& p) {
  const RowConfig t(c);
  return {kernel + "<" + device_type_name(p.dtype) + ", " + std::to_string(t.block_threads) + ", " +
              std::to_string(t.rows_per_block) + ", " + std::to_string(t.vec) + ">",
          {}};
}

LaunchShape launch_shape(const core::Config& c, const core::Problem& p) {
  const RowConfig t(c);
  const std::int64_t groups = (Shape(p).rows + t.rows_per_block - 1) / t.rows_per_block;
  LaunchShape s;
  s.grid[0] = static_cast<unsigned>(std::min(groups, kMaxGridX));
  s.block[0] = static_cast<unsigned>(t.block_threads);
  return s;
}

}  // namespace flashtune::kernels::row
