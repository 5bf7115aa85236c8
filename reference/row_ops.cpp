// reference/row_ops.cpp: Eigen implementations of the row oracles, instantiated for double and float.
#include "reference/row_ops.hpp"

#include <Eigen/Core>

#include <cmath>
#include <limits>
#include <string>

#include "harness/core/types.hpp"

namespace flashtune::reference {
namespace {

template <typename Acc>
using RowMajor = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void check_shape(const char* what, std::size_t n, std::int64_t rows, std::int64_t cols) {
  if (rows < 0 || cols < 0 || n != static_cast<std::size_t>(rows * cols))
    throw core::Error(std::string(what) + ": " + std::to_string(n) + " values for a " + std::to_string(rows) +
                      " x " + std::to_string(cols) + " matrix");
}

template <typename Acc>
RowMajor<Acc> to_matrix(const std::vector<double>& x, std::int64_t rows, std::int64_t cols) {
  return Eigen::Map<const RowMajor<double>>(x.data(), rows, cols).template cast<Acc>();
}

template <typename Acc>
std::vector<double> to_vector(const RowMajor<Acc>& m) {
  std::vector<double> out(static_cast<std::size_t>(m.size()));
  Eigen::Map<RowMajor<double>>(out.data(), m.rows(), m.cols()) = m.template cast<double>();
  return out;
}

}  // namespace

template <typename Acc>
std::vector<double> weighted_row_sum(const std::vector<double>& x, const std::vector<double>& w,
                                     std::int64_t rows, std::int64_t cols) {
  check_shape("weighted_row_sum x", x.size(), rows, cols);
  check_shape("weighted_row_sum w", w.size(), 1, cols);
  const RowMajor<Acc> xm = to_matrix<Acc>(x, rows, cols);
  const Eigen::Matrix<Acc, Eigen::Dynamic, 1> wv = Eigen::Map<const Eigen::VectorXd>(w.data(), cols).cast<Acc>();
  const Eigen::Matrix<Acc, Eigen::Dynamic, 1> y = xm * wv;
  return std::vector<double>(y.data(), y.data() + y.size());
}

template <typename Acc>
std::vector<double> softmax_rows(const std::vector<double>& x, std::int64_t rows, std::int64_t cols) {
  check_shape("softmax_rows x", x.size(), rows, cols);
  RowMajor<Acc> m = to_matrix<Acc>(x, rows, cols);
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    auto row = m.row(i);
    const Acc row_max = row.maxCoeff();
    row = (row.array() - row_max).exp().matrix();
    row /= row.sum();
  }
  return to_vector<Acc>(m);
}

template <typename Acc>
std::vector<double> softmax_rows_online(const std::vector<double>& x, std::int64_t rows, std::int64_t cols,
                                        std::int64_t tile) {
  check_shape("softmax_rows_online x", x.size(), rows, cols);
  if (tile < 1) throw core::Error("softmax_rows_online: tile must be >= 1, got " + std::to_string(tile));
  RowMajor<Acc> m = to_matrix<Acc>(x, rows, cols);
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    auto row = m.row(i);
    Acc running_max = -std::numeric_limits<Acc>::infinity();
    Acc running_sum = 0;
    for (Eigen::Index j0 = 0; j0 < cols; j0 += tile) {
      const auto t = row.segment(j0, std::min<Eigen::Index>(tile, cols - j0));
      const Acc new_max = std::max(running_max, t.maxCoeff());
      running_sum = running_sum * std::exp(running_max - new_max) + (t.array() - new_max).exp().sum();
      running_max = new_max;
    }
    row = ((row.array() - running_max).exp() / running_sum).matrix();
  }
  return to_vector<Acc>(m);
}

template std::vector<double> weighted_row_sum<double>(const std::vector<double>&, const std::vector<double>&,
                                                      std::int64_t, std::int64_t);
template std::vector<double> weighted_row_sum<float>(const std::vector<double>&, const std::vector<double>&,
                                                     std::int64_t, std::int64_t);
template std::vector<double> softmax_rows<double>(const std::vector<double>&, std::int64_t, std::int64_t);
template std::vector<double> softmax_rows<float>(const std::vector<double>&, std::int64_t, std::int64_t);
template std::vector<double> softmax_rows_online<double>(const std::vector<double>&, std::int64_t, std::int64_t,
                                                         std::int64_t);
template std::vector<double> softmax_rows_online<float>(const std::vector<double>&, std::int64_t, std::int64_t,
                                                        std::int64_t);

}  // namespace flashtune::reference
