// harness/kernels/weighted_row_sum.cpp: the weighted_row_sum family (GStar stage 2): y[i] = sum_j x[i, j] * w[j],
// kernel_templates/weighted_row_sum.cuh. Memory bound: judge it by GB/s against a copy.
#include <cmath>

#include "harness/kernels/builtin.hpp"
#include "harness/kernels/row_kernels.hpp"
#include "reference/dtype.hpp"
#include "reference/row_ops.hpp"

namespace flashtune::kernels {
namespace {

class WeightedRowSum final : public row::RowOperation {
 public:
  WeightedRowSum() { add_variant(std::make_unique<row::RowKernel>("rowwise", "weighted_row_sum.cuh", "weighted_row_sum_kernel")); }
  std::string name() const override { return "weighted_row_sum"; }
  std::string template_file() const override { return "weighted_row_sum.cuh"; }
  std::string description() const override {
    return "y[i] = sum_j x[i,j] * w[j]; x, w in the problem dtype, y and accumulation fp32";
  }

  // x (rows x cols), w (cols): inputs in [-1, 1]; y (rows): fp32 output.
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const row::Shape s(p);
    return {{"x", s.dtype, s.elements(), BufferRole::input, -1.0, 1.0},
            {"w", s.dtype, s.cols, BufferRole::input, -1.0, 1.0},
            {"y", core::DType::f32, s.rows, BufferRole::output, 0.0, 0.0}};
  }
  // weighted_row_sum_kernel(const T* x, const T* w, float* y, long long rows, long long cols, long long stride_x)
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    const row::Shape s(p);
    return {BufferArg{0}, BufferArg{1}, BufferArg{2}, s.rows, s.cols, s.cols};
  }

  double bytes_moved(const core::Problem& p) const override {
    const row::Shape s(p);
    const double rows = double(s.rows), cols = double(s.cols), e = double(core::dtype_size(s.dtype));
    return rows * cols * e + cols * e + rows * 4.0;
  }
  double flops(const core::Problem& p) const override {
    const row::Shape s(p);
    return 2.0 * double(s.rows) * double(s.cols);
  }

  void reference(const core::Problem& p, const std::vector<HostTensor>& inputs, std::vector<HostTensor>& outputs,
                 RefPrecision precision) const override {
    const row::Shape s(p);
    const std::int64_t rows = s.rows, cols = s.cols;
    if (inputs.size() != 2 || outputs.size() != 1) throw core::Error("weighted_row_sum.reference: expects x, w -> y");
    outputs[0].values = precision == RefPrecision::f64
                            ? reference::weighted_row_sum<double>(inputs[0].values, inputs[1].values, rows, cols)
                            : reference::weighted_row_sum<float>(inputs[0].values, inputs[1].values, rows, cols);
    if (precision == RefPrecision::same) reference::round_all(outputs[0].dtype, outputs[0].values);
  }

  // |y| grows like sqrt(cols) / 3 for inputs in [-1, 1]; fp32 sums in a different order than the
  // naive one differ by a few ulps of that. 2^-22 * sqrt(cols) ~ 4 fp32 ulps of a typical |y|; the
  // 2 * naive_err term of the pass rule dominates for long rows.
  double default_atol(const core::Problem& p) const override {
    return std::ldexp(1.0, -22) * std::sqrt(double(std::max<std::int64_t>(row::Shape(p).cols, 1)));
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_weighted_row_sum_family() { return std::make_unique<WeightedRowSum>(); }

}  // namespace flashtune::kernels
