// harness/cuda/cublas.hpp: cuBLAS, loaded at run time with dlopen (like the driver, driver.hpp), for the
// library baselines (attn_naive: S = Q K^T and O = P V as batched GEMMs). Nothing links against cuBLAS:
// a machine without it still runs everything else, and a family that needs it gets a clear error.
// cuBLAS calls into the CUDA runtime, which attaches to the context current on the calling thread; the
// harness makes the device's primary context current (context.hpp), which is the one the runtime uses.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::cuda {

/// A cuBLAS call returned a status other than CUBLAS_STATUS_SUCCESS.
class CublasError : public core::Error {
 public:
  /// `status`: the cublasStatus_t; `call`: what was called. The message names the call, the status
  /// (name and description when the library can give them) and file:line.
  CublasError(int status, const std::string& call, const char* file, int line);
  int status() const noexcept { return m_status; }

 private:
  int m_status;
};

/// What loading cuBLAS from a list of candidate files gave.
struct CublasLibrary {
  bool ok = false;
  std::string path;  ///< the candidate that loaded
  int version = 0;   ///< cublasGetProperty: 10000 * major + 100 * minor + patch (130100 = 13.1.0)
  std::string why;   ///< when !ok: every file tried and why it failed
};

/// dlopen names tried in order: libcublas.so.13, libcublas.so.12, libcublas.so (the library path), then
/// the same three under $CUDA_HOME/lib64 and /usr/local/cuda/lib64 (a binary started without
/// LD_LIBRARY_PATH still finds the toolkit's copy).
std::vector<std::string> cublas_library_candidates();

/// Tries `candidates` in order; the first that loads and has every entry point flashtune uses wins. Does
/// not touch the process-wide library of cublas_available() (tests probe absent files with it); a
/// library it loads is closed again. Never throws.
CublasLibrary probe_cublas(const std::vector<std::string>& candidates);

/// True when cuBLAS loaded from cublas_library_candidates() (once per process, thread safe); else false
/// and `why` (if given) names every file tried. Needs no GPU or driver. Never throws.
bool cublas_available(std::string* why = nullptr) noexcept;

/// The loaded library (path, version); throws core::Error with cublas_available()'s reason when absent.
const CublasLibrary& cublas_library();

enum class GemmOp { n, t };  ///< op(X) = X or X^T

/// One strided batched GEMM in cuBLAS's column-major convention, for i < batch:
///   C_i = alpha * op_a(A_i) * op_b(B_i) + beta * C_i,  op_a(A_i): m x k, op_b(B_i): k x n, C_i: m x n,
///   X_i = X + i * stride_x elements. Computed in fp32 (fp16 / bf16 / f32 operands, any mix cuBLAS
///   accepts for CUBLAS_COMPUTE_32F); `tf32` lets f32 operands run on TF32 tensor cores.
/// A row-major r x c matrix is a column-major c x r one with the same leading dimension.
struct StridedBatchedGemm {
  GemmOp op_a = GemmOp::n, op_b = GemmOp::n;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  CUdeviceptr a = 0, b = 0, c = 0;
  core::DType a_type = core::DType::f32, b_type = core::DType::f32, c_type = core::DType::f32;
  std::int64_t lda = 0, ldb = 0, ldc = 0;                 ///< [elements]
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  ///< [elements] between batch entries
  bool tf32 = false;
  /// A workspace of the caller's for cuBLAS (cublasSetWorkspace), as PyTorch hands its handles one from its
  /// own allocator; 0: cuBLAS's default pool. The handle goes back to the default pool at the next call that
  /// names none, so the memory need only live until this GEMM has run.
  CUdeviceptr workspace = 0;
  std::int64_t workspace_bytes = 0;  ///< [bytes] > 0 when workspace is set
};

/// Enqueues `g` on `stream` in the context current on the calling thread, through a cuBLAS handle made
/// for that context on first use (a new one after Context::reset()). Throws core::Error when cuBLAS or a
/// current context is missing or a size does not fit cuBLAS's 32-bit arguments, CublasError when cuBLAS
/// refuses the call. Like a kernel launch, faults inside surface at the next synchronization.
void gemm(const StridedBatchedGemm& g, CUstream stream);

}  // namespace flashtune::cuda
