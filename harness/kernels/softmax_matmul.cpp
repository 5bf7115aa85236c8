// harness/kernels/softmax_matmul.cpp: the softmax_matmul family (course part 1): out[b] = softmax(X[b]) @
// V[b] in one pass over d2 with online softmax statistics (kernel_templates/softmax_matmul.cuh), so memory
// stays linear. X (batch, d1, d2), V (batch, d2, d3), out (batch, d1, d3) in the problem dtype; fp32 math.
// The reference computes a sample of rows when the whole product is too costly for the host.
#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "harness/kernels/builtin.hpp"
#include "harness/kernels/config_views.hpp"
#include "harness/kernels/operation.hpp"
#include "harness/kernels/problem_views.hpp"
#include "reference/attention.hpp"
#include "reference/dtype.hpp"

namespace flashtune::kernels {
namespace {

constexpr double kReferenceBudget = 4e8;  // multiply-adds per reference precision
constexpr std::int64_t kMaxGridYZ = 65535;

// The kernel's thread tile (SoftmaxMatmulTraits in the template): outputs per thread, and its columns.
std::int64_t per_thread(const smm::SmmConfig& c) { return c.block_m * c.block_n / (32 * c.num_warps); }
std::int64_t thread_n(const smm::SmmConfig& c) { return per_thread(c) >= 64 ? 8 : 4; }

// Rows of X (in every batch) the reference computes: all when batch * d1 * d2 * d3 fits the budget, else
// the first and last four plus rows spread over d1 (offset by a varying amount, so that they land at
// every position inside a block of rows), as many as the budget allows and at least 16.
std::vector<std::int64_t> reference_rows(const smm::Shape& s) {
  const std::int64_t d1 = s.d1;
  const double per_row = double(s.batch) * double(s.d2) * double(s.d3);
  if (per_row * double(d1) <= kReferenceBudget) return {};
  const std::int64_t n = std::clamp<std::int64_t>(std::int64_t(kReferenceBudget / per_row), 16, d1);
  std::set<std::int64_t> rows;
  for (std::int64_t i = 0; i < 4 && i < d1; ++i) rows.insert(i), rows.insert(d1 - 1 - i);
  for (std::int64_t k = 0; std::int64_t(rows.size()) < n && k < 4 * n; ++k)
    rows.insert(std::min(d1 - 1, k * d1 / n + (k * 37) % 61));
  return {rows.begin(), rows.end()};
}

class SoftmaxMatmul final : public KernelFamily {
 public:
  std::string name() const override { return "softmax_matmul"; }
  std::string stage() const override { return "forward"; }
  std::string template_file() const override { return "softmax_matmul.cuh"; }
  std::string description() const override {
    return "out = softmax(X) @ V fused, one pass over d2 with online max/sum (course part 1); fp32 math";
  }

  std::vector<std::string> problem_dims() const override { return {"batch", "d1", "d2", "d3"}; }
  std::vector<OptionalDim> optional_problem_dims() const override {
    return {{"x_range", 8, "X is drawn uniform in [-r, r] (large r: large logits); V in [-1, 1]"}};
  }
  std::vector<core::DType> dtypes() const override { return {core::DType::f32, core::DType::f16, core::DType::bf16}; }

  std::vector<TunableSpec> tunables() const override {
    return {
        {"block_m", {32, 64, 128}, "rows of X (and out) per block"},
        {"block_n", {64, 128}, "columns of out (of d3) per block"},
        {"block_k", {16, 32}, "columns of X (rows of V) per chunk of d2"},
        {"num_warps", {4, 8}, "warps per block; each thread owns block_m * block_n / (32 num_warps) outputs"},
    };
  }
  // The thread tile: 16, 32 or 64 outputs per thread as 4x4, 8x4 or 8x8 (4 or 8 columns); the threads
  // along a row of the tile must divide the block; the softmax statistics split rows over threads evenly.
  std::vector<std::string> constraints() const override {
    const std::string e = "(block_m * block_n / (32 * num_warps))";
    return {"block_m * block_n % (32 * num_warps) == 0",
            e + " == 16 || " + e + " == 32 || " + e + " == 64",
            "(32 * num_warps) % (block_n / (" + e + " >= 64 ? 8 : 4)) == 0",
            "(32 * num_warps) % block_m == 0 || block_m % (32 * num_warps) == 0"};
  }

  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = smm::check_dims(p)) return why;
    const smm::Shape s(p);
    if (s.batch > kMaxGridYZ) return "batch must be <= 65535 (one grid dimension)";
    if (s.x_range < 1) return "x_range must be >= 1";
    return std::nullopt;
  }

  std::optional<std::string> can_run(const core::Config& config, const core::Problem& p,
                                     const core::DeviceLimits& d) const override {
    const smm::SmmConfig c(config);
    const std::int64_t bm = c.block_m, bn = c.block_n, bk = c.block_k, warps = c.num_warps;
    const std::int64_t threads = c.threads();
    if (bm < 4 || bn < 4 || bk < 1 || warps < 1) return "block_m, block_n >= 4, block_k, num_warps >= 1";
    if (threads > d.max_threads_per_block)
      return std::to_string(threads) + " threads > " + std::to_string(d.max_threads_per_block) + " per block";
    if (bm * bn % threads != 0) return "block_m * block_n must be a multiple of 32 * num_warps";
    const std::int64_t e = per_thread(c);
    if (e != 16 && e != 32 && e != 64)
      return "block_m * block_n / (32 * num_warps) = " + std::to_string(e) + " outputs per thread (must be 16, 32 or 64)";
    if (bn % thread_n(c) != 0 || threads % (bn / thread_n(c)) != 0)
      return "block_n / " + std::to_string(thread_n(c)) + " threads per tile row must divide " + std::to_string(threads);
    if (threads % bm != 0 && bm % threads != 0) return "block_m and 32 * num_warps must divide one another";
    if (bm % 4 != 0) return "block_m must be a multiple of 4";
    const std::int64_t smem = smem_bytes(c);
    if (smem > d.max_shared_per_block_optin)
      return "shared memory " + std::to_string(smem) + " B > " + std::to_string(d.max_shared_per_block_optin) + " B";
    const smm::Shape s(p);
    if ((s.d1 + bm - 1) / bm > kMaxGridYZ) return "d1 / block_m must be <= 65535 (grid.y)";
    if ((s.d3 + bn - 1) / bn > INT_MAX) return "d3 / block_n must be < 2^31 (grid.x)";
    return std::nullopt;
  }

  Specialization specialize(const core::Config& config, const core::Problem& p) const override {
    const smm::SmmConfig c(config);
    return {"softmax_matmul_kernel<" + std::string(storage_type(p.dtype)) + ", " + std::to_string(c.block_m) + ", " +
                std::to_string(c.block_n) + ", " + std::to_string(c.block_k) + ", " + std::to_string(c.num_warps) + ">",
            {},
            {}};
  }

  // grid (column tiles of d3, row tiles of d1, batch): the column tiles of one row tile run side by side
  // and share its X rows in L2.
  LaunchShape launch_shape(const core::Config& config, const core::Problem& p, const core::DeviceLimits&) const override {
    const smm::SmmConfig c(config);
    const smm::Shape s(p);
    LaunchShape l;
    l.grid[0] = unsigned((s.d3 + c.block_n - 1) / c.block_n);
    l.grid[1] = unsigned((s.d1 + c.block_m - 1) / c.block_m);
    l.grid[2] = unsigned(s.batch);
    l.block[0] = unsigned(c.threads());
    l.dynamic_smem_bytes = unsigned(smem_bytes(c));
    return l;
  }

  std::vector<BufferSpec> buffers(const core::Problem& p) const override {
    const smm::Shape s(p);
    const double r = double(s.x_range);
    return {{"x", s.dtype, s.batch * s.d1 * s.d2, BufferRole::input, -r, r},
            {"v", s.dtype, s.batch * s.d2 * s.d3, BufferRole::input, -1.0, 1.0},
            {"out", s.dtype, s.batch * s.d1 * s.d3, BufferRole::output, 0, 0}};
  }

  // softmax_matmul_kernel(const T* x, const T* v, T* out, int d1, int d2, int d3)
  std::vector<KernelArg> arguments(const core::Config&, const core::Problem& p) const override {
    const smm::Shape s(p);
    return {BufferArg{0}, BufferArg{1}, BufferArg{2}, std::int32_t(s.d1), std::int32_t(s.d2), std::int32_t(s.d3)};
  }

  double bytes_moved(const core::Problem& p) const override {
    double n = 0;
    for (const auto& b : buffers(p)) n += double(b.elements) * double(core::dtype_size(b.dtype));
    return n;
  }
  /// The matmul's 2 * batch * d1 * d2 * d3 (the softmax's few FLOPs per element of X are not counted).
  double flops(const core::Problem& p) const override {
    const smm::Shape s(p);
    return 2.0 * double(s.batch) * double(s.d1) * double(s.d2) * double(s.d3);
  }

  void reference(const core::Problem& p, const std::vector<HostTensor>& inputs, std::vector<HostTensor>& outputs,
                 RefPrecision precision) const override {
    if (inputs.size() != 2 || outputs.size() != 1) throw core::Error("softmax_matmul.reference: expects x, v -> out");
    const smm::Shape s(p);
    const std::int64_t b = s.batch, d1 = s.d1, d2 = s.d2, d3 = s.d3;
    auto run = [&](std::int64_t batch, std::int64_t rows, const std::vector<double>& x, const std::vector<double>& v,
                   std::vector<double>& o) {
      if (precision == RefPrecision::f64) reference::softmax_matmul<double>(batch, rows, d2, d3, x, v, o);
      else reference::softmax_matmul<float>(batch, rows, d2, d3, x, v, o);
    };
    auto& out = outputs[0];
    const auto rows = reference_rows(s);
    if (rows.empty()) {
      run(b, d1, inputs[0].values, inputs[1].values, out.values);
      out.checked.clear();
    } else {
      // Rows are independent: per batch, the sampled rows of X form a smaller problem with the same V.
      out.values.assign(std::size_t(b * d1 * d3), 0.0);
      out.checked.assign(out.values.size(), 0);
      const std::int64_t n = std::int64_t(rows.size());
      std::vector<double> xs(std::size_t(n * d2)), vb, os;
      for (std::int64_t bi = 0; bi < b; ++bi) {
        for (std::int64_t k = 0; k < n; ++k)
          std::copy_n(inputs[0].values.begin() + std::ptrdiff_t((bi * d1 + rows[std::size_t(k)]) * d2), d2,
                      xs.begin() + std::ptrdiff_t(k * d2));
        vb.assign(inputs[1].values.begin() + std::ptrdiff_t(bi * d2 * d3),
                  inputs[1].values.begin() + std::ptrdiff_t((bi + 1) * d2 * d3));
        run(1, n, xs, vb, os);
        for (std::int64_t k = 0; k < n; ++k) {
          const std::ptrdiff_t at = std::ptrdiff_t((bi * d1 + rows[std::size_t(k)]) * d3);
          std::copy_n(os.begin() + std::ptrdiff_t(k * d3), d3, out.values.begin() + at);
          std::fill_n(out.checked.begin() + at, d3, 1);
        }
      }
    }
    if (precision == RefPrecision::same) reference::round_all(out.dtype, out.values);
  }

  // out is a convex combination of V in [-1, 1]. fp16 / bf16: half an ulp of the output dtype at 1.0
  // (2^-11, 2^-8), one rounding flip the naive result happened not to make. fp32: the kernel's exp2-based
  // exponential (~2 ulps) and its chunked summation order, a few ulps of sums over up to ~10^4 terms.
  double default_atol(const core::Problem& p) const override {
    switch (p.dtype) {
      case core::DType::f16: return std::ldexp(1.0, -11);
      case core::DType::bf16: return std::ldexp(1.0, -8);
      case core::DType::f32: break;
    }
    return 1e-5;
  }

 private:
  // X chunk (block_k x (block_m + 4)), V chunk (block_k x block_n), partial maxima and sums (2 x split x
  // block_m), per-row rescale factor, max and sum (3 x block_m); all fp32. Mirrors the template's layout.
  static std::int64_t smem_bytes(const smm::SmmConfig& c) {
    const std::int64_t bm = c.block_m, bn = c.block_n, bk = c.block_k;
    const std::int64_t threads = c.threads();
    const std::int64_t split = threads >= bm ? threads / bm : 1;
    return 4 * (bk * (bm + 4) + bk * bn + 2 * split * bm + 3 * bm);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> make_softmax_matmul_family() { return std::make_unique<SoftmaxMatmul>(); }

}  // namespace flashtune::kernels
