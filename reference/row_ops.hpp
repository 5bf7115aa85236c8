// reference/row_ops.hpp: CPU oracles of the row kernels (weighted row sum, row softmax), computed in
// Eigen with a chosen accumulation scalar: double for the oracle, float for the naive same-precision
// result the pass rule measures the kernel against. Matrices are row-major, rows x cols, contiguous.
#pragma once

#include <cstdint>
#include <vector>

namespace flashtune::reference {

/// y[i] = sum_j x[i, j] * w[j], accumulated in Acc (double or float; inputs are converted to Acc
/// first). x: rows * cols, w: cols; returns rows values. Throws core::Error on size mismatch.
template <typename Acc>
std::vector<double> weighted_row_sum(const std::vector<double>& x, const std::vector<double>& w,
                                     std::int64_t rows, std::int64_t cols);

/// Numerically stable two-pass row softmax in Acc: y[i, j] = exp(x[i, j] - m_i) / sum_k exp(x[i, k] - m_i),
/// m_i = max_k x[i, k]. Returns rows * cols values; no overflow for large logits.
template <typename Acc>
std::vector<double> softmax_rows(const std::vector<double>& x, std::int64_t rows, std::int64_t cols);

/// The same softmax by the online (one-pass) algorithm the kernels use: a running max m and running
/// sum s per row, updated once per tile of `tile` columns (the last tile may be short):
///   m_new = max(m, max(tile)),  s = s * exp(m - m_new) + sum_tile exp(x - m_new),  m = m_new
/// then y = exp(x - m) / s. Equal to softmax_rows() up to rounding for any tile >= 1.
template <typename Acc>
std::vector<double> softmax_rows_online(const std::vector<double>& x, std::int64_t rows, std::int64_t cols,
                                        std::int64_t tile);

extern template std::vector<double> weighted_row_sum<double>(const std::vector<double>&, const std::vector<double>&,
                                                             std::int64_t, std::int64_t);
extern template std::vector<double> weighted_row_sum<float>(const std::vector<double>&, const std::vector<double>&,
                                                            std::int64_t, std::int64_t);
extern template std::vector<double> softmax_rows<double>(const std::vector<double>&, std::int64_t, std::int64_t);
extern template std::vector<double> softmax_rows<float>(const std::vector<double>&, std::int64_t, std::int64_t);
extern template std::vector<double> softmax_rows_online<double>(const std::vector<double>&, std::int64_t,
                                                                std::int64_t, std::int64_t);
extern template std::vector<double> softmax_rows_online<float>(const std::vector<double>&, std::int64_t,
                                                               std::int64_t, std::int64_t);

}  // namespace flashtune::reference
