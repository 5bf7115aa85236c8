// harness/kernels/softmax.cpp: the softmax family: row-wise online softmax, kernel_templates/softmax.cuh.
// x and y in the problem dtype; fp32 math. Memory bound: x read once for the statistics and once to
// normalize (the second read mostly hits L2), y written once.
#include <cmath>

#include "harness/kernels/builtin.hpp"
#include "harness/kernels/row_kernels.hpp"
#include "reference/dtype.hpp"
#include "reference/row_ops.hpp"

namespace flashtune::kernels {
namespace {

class Softmax final : public row::RowOperation {
 public:
  Softmax() { add_variant(std::make_unique<row::RowKernel>("online", "softmax.cuh", "softmax_kernel")); }
  std::string name() const override { return "softmax"; }
  std::string template_file() const override { return "softmax.cuh"; }
  std::string description() const override {
    return "row-wise online softmax y = exp(x - max) / sum exp(x - max); x, y in the problem dtype, fp32 math";
  }

  // x (rows x cols) logits in [-8, 8] (e^16 of dynamic range inside a row); y (rows x cols) output.
  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const row::Shape s(p);
    return {{"x", s.dtype, s.elements(), BufferRole::input, -8.0, 8.0},
            {"y", s.dtype, s.elements(), BufferRole::output, 0.0, 0.0}};
  }
  // softmax_kernel(const T* x, T* y, long long rows, long long cols, long long stride)
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    const row::Shape s(p);
    return {BufferArg{0}, BufferArg{1}, s.rows, s.cols, s.cols};
  }

  double bytes_moved(const core::Problem& p) const override {
    const row::Shape s(p);
    return 2.0 * double(s.rows) * double(s.cols) * double(core::dtype_size(s.dtype));
  }
  // Per element: max, subtract, exp, add (statistics) and multiply (normalize): 5 FLOP, counting exp as 1.
  double flops(const core::Problem& p) const override {
    const row::Shape s(p);
    return 5.0 * double(s.rows) * double(s.cols);
  }

  void reference(const core::Problem& p, const std::vector<HostTensor>& inputs, std::vector<HostTensor>& outputs,
                 RefPrecision precision) const override {
    const row::Shape s(p);
    const std::int64_t rows = s.rows, cols = s.cols;
    if (inputs.size() != 1 || outputs.size() != 1) throw core::Error("softmax.reference: expects x -> y");
    outputs[0].values = precision == RefPrecision::f64 ? reference::softmax_rows<double>(inputs[0].values, rows, cols)
                                                       : reference::softmax_rows<float>(inputs[0].values, rows, cols);
    if (precision == RefPrecision::same) reference::round_all(outputs[0].dtype, outputs[0].values);
  }

  // Outputs lie in (0, 1]. fp16 / bf16: half an ulp of the output dtype at 1.0 (2^-11, 2^-8), so one
  // rounding flip the naive result happened not to make is forgiven. fp32: 1e-6 (8 ulps at 1.0) covers
  // the kernel's exp2-based exponential (~2 ulps) and its different summation order.
  double default_atol(const core::Problem& p) const override {
    switch (p.dtype) {
      case core::DType::f16: return std::ldexp(1.0, -11);
      case core::DType::bf16: return std::ldexp(1.0, -8);
      case core::DType::f32: break;
    }
    return 1e-6;
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_softmax_family() { return std::make_unique<Softmax>(); }

}  // namespace flashtune::kernels
