// tests/cuda/cublas_gpu_test.cpp (gpu; skips only without a GPU): cuda::gemm on a real GPU through the
// harness's own (primary) context: every transpose combination, strided batches, alpha and beta, fp16 /
// bf16 / fp32 operands and TF32, two streams. Operands are small integers, so every product and sum is
// exact in each dtype and results are compared for equality.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/cublas.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/cuda/stream.hpp"
#include "reference/dtype.hpp"

using namespace flashtune;

namespace {

bool have_gpu() {
  std::string why;
  return cuda::driver_available(&why) && cuda::device_count() > 0;
}

struct Matrix {
  std::vector<double> host;
  core::DType dtype;
  cuda::DeviceBuffer dev;
  Matrix(std::vector<double> values, core::DType d) : host(std::move(values)), dtype(d), dev(bytes()) {
    const auto packed = reference::pack(dtype, host);
    dev.upload(packed.data(), packed.size());
  }
  std::size_t bytes() const { return host.size() * core::dtype_size(dtype); }
  std::vector<double> download(CUstream s) const {
    std::vector<unsigned char> b(bytes());
    dev.download(b.data(), b.size(), s);
    return reference::unpack(dtype, b.data(), host.size());
  }
};

// Small integers in [-3, 3]: exact in fp16, bf16 and TF32; sums of a few products stay exact.
std::vector<double> integers(std::size_t n, int seed) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = double(int((i * 7 + std::size_t(seed) * 13) % 7) - 3);
  return v;
}

// Column-major op(A) op(B) per batch entry, then alpha * that + beta * C, on the host.
std::vector<double> host_gemm(const cuda::StridedBatchedGemm& g, const std::vector<double>& a,
                              const std::vector<double>& b, std::vector<double> c) {
  for (std::int64_t i = 0; i < g.batch; ++i)
    for (std::int64_t col = 0; col < g.n; ++col)
      for (std::int64_t row = 0; row < g.m; ++row) {
        double acc = 0;
        for (std::int64_t k = 0; k < g.k; ++k) {
          const double av = g.op_a == cuda::GemmOp::n ? a[std::size_t(i * g.stride_a + row + k * g.lda)]
                                                      : a[std::size_t(i * g.stride_a + k + row * g.lda)];
          const double bv = g.op_b == cuda::GemmOp::n ? b[std::size_t(i * g.stride_b + k + col * g.ldb)]
                                                      : b[std::size_t(i * g.stride_b + col + k * g.ldb)];
          acc += av * bv;
        }
        double& out = c[std::size_t(i * g.stride_c + row + col * g.ldc)];
        out = g.alpha * acc + g.beta * out;
      }
  return c;
}

}  // namespace

TEST(CublasGpu, StridedBatchedGemmIsExactOnSmallIntegers) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::string why;
  ASSERT_TRUE(cuda::cublas_available(&why)) << why;
  cuda::Context ctx(0);
  cuda::Stream s1, s2;
  struct Case {
    core::DType ab, c;
    bool tf32;
  };
  int checked = 0;
  for (const Case t : {Case{core::DType::f32, core::DType::f32, false}, Case{core::DType::f32, core::DType::f32, true},
                       Case{core::DType::f16, core::DType::f16, false}, Case{core::DType::bf16, core::DType::bf16, false},
                       Case{core::DType::f16, core::DType::f32, false}, Case{core::DType::bf16, core::DType::f32, false}})
    for (auto op_a : {cuda::GemmOp::n, cuda::GemmOp::t})
      for (auto op_b : {cuda::GemmOp::n, cuda::GemmOp::t}) {
        cuda::StridedBatchedGemm g;
        g.op_a = op_a, g.op_b = op_b;
        g.m = 5, g.n = 7, g.k = 3, g.batch = 3;
        g.lda = (op_a == cuda::GemmOp::n ? g.m : g.k) + 1;  // padded leading dimensions
        g.ldb = (op_b == cuda::GemmOp::n ? g.k : g.n) + 2;
        g.ldc = g.m + 1;
        g.stride_a = g.lda * (op_a == cuda::GemmOp::n ? g.k : g.m) + 4;
        g.stride_b = g.ldb * (op_b == cuda::GemmOp::n ? g.n : g.k);
        g.stride_c = g.ldc * g.n + 3;
        g.alpha = 0.5f, g.beta = checked % 2 ? 1.0f : 0.0f;
        g.a_type = g.b_type = t.ab, g.c_type = t.c, g.tf32 = t.tf32;
        Matrix a(integers(std::size_t(g.stride_a * g.batch), 1), t.ab);
        Matrix b(integers(std::size_t(g.stride_b * g.batch), 2), t.ab);
        Matrix c(integers(std::size_t(g.stride_c * g.batch), 3), t.c);
        g.a = a.dev.ptr(), g.b = b.dev.ptr(), g.c = c.dev.ptr();
        CUstream stream = checked % 3 ? s1.get() : s2.get();  // switching streams re-binds the handle
        cuda::gemm(g, stream);
        const auto got = c.download(stream);
        const auto want = host_gemm(g, a.host, b.host, c.host);
        const std::string what = std::string(core::to_string(t.ab)) + "->" + std::string(core::to_string(t.c)) +
                                 (t.tf32 ? " tf32" : "") + (op_a == cuda::GemmOp::t ? " A^T" : " A") +
                                 (op_b == cuda::GemmOp::t ? " B^T" : " B") + (g.beta != 0 ? " beta 1" : "");
        // Elements between and beside the m x n matrices (padding) keep their values in `want` too.
        for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << " element " << i;
        ++checked;
      }
  EXPECT_EQ(checked, 24);
}

TEST(CublasGpu, BadArgumentsAreACublasErrorNamingTheCall) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  cuda::Context ctx(0);
  cuda::Stream s;
  cuda::DeviceBuffer buf(1024);
  cuda::StridedBatchedGemm g;
  g.m = 4, g.n = 4, g.k = 4, g.lda = 1, g.ldb = 4, g.ldc = 4;  // lda < m: invalid
  g.a = g.b = g.c = buf.ptr();
  try {
    cuda::gemm(g, s.get());
    ADD_FAILURE() << "lda < m accepted";
  } catch (const cuda::CublasError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cublasGemmStridedBatchedEx(m 4, n 4, k 4, batch 1)"), std::string::npos) << what;
    EXPECT_NE(what.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << what;
  }
}
