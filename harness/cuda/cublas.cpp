// harness/cuda/cublas.cpp: dlopen of cuBLAS, resolution of the few entry points flashtune calls, one
// handle per CUDA context, and the strided batched GEMM. The cuBLAS types are declared here (the CI has
// no cuBLAS headers); where the toolkit's cublas_api.h exists, static_asserts check them against it.
#include "harness/cuda/cublas.hpp"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/driver.hpp"

// Our declarations of cuBLAS's ABI (stable since CUDA 11: the enums are documented with fixed values).
namespace flashtune::cuda::cublas_abi {
using Handle = struct HandleImpl*;  // cublasHandle_t: an opaque pointer
using Status = int;              // cublasStatus_t
enum : int { kStatusSuccess = 0 };
enum : int { kOpN = 0, kOpT = 1 };                                  // cublasOperation_t
enum : int { kR32F = 0, kR16F = 2, kR16BF = 14 };                   // cudaDataType
enum : int { kCompute32F = 68, kCompute32FFastTF32 = 77 };          // cublasComputeType_t
enum : int { kGemmDefault = -1 };                                   // cublasGemmAlgo_t
enum : int { kMajorVersion = 0, kMinorVersion = 1, kPatchLevel = 2 };  // libraryPropertyType

using CreateFn = Status (*)(Handle*);
using SetStreamFn = Status (*)(Handle, CUstream);
using SetWorkspaceFn = Status (*)(Handle, void*, std::size_t);
using GetPropertyFn = Status (*)(int, int*);
using GetStatusTextFn = const char* (*)(Status);
using GemmStridedBatchedExFn = Status (*)(Handle, int, int, int, int, int, const void*, const void*, int, int,
                                          long long, const void*, int, int, long long, const void*, void*, int,
                                          int, long long, int, int, int);
}  // namespace flashtune::cuda::cublas_abi

#if __has_include(<cublas_api.h>)
#include <cublas_api.h>
namespace flashtune::cuda::cublas_abi {
static_assert(kStatusSuccess == int(CUBLAS_STATUS_SUCCESS));
static_assert(kOpN == int(CUBLAS_OP_N) && kOpT == int(CUBLAS_OP_T));
static_assert(kR32F == int(CUDA_R_32F) && kR16F == int(CUDA_R_16F) && kR16BF == int(CUDA_R_16BF));
static_assert(kCompute32F == int(CUBLAS_COMPUTE_32F) && kCompute32FFastTF32 == int(CUBLAS_COMPUTE_32F_FAST_TF32));
static_assert(kGemmDefault == int(CUBLAS_GEMM_DEFAULT));
static_assert(kMajorVersion == int(MAJOR_VERSION) && kMinorVersion == int(MINOR_VERSION) &&
              kPatchLevel == int(PATCH_LEVEL));
static_assert(sizeof(Handle) == sizeof(cublasHandle_t) && sizeof(Status) == sizeof(cublasStatus_t));
// The prototypes above pass these enums as int: the same ABI when they are int-sized.
static_assert(sizeof(cublasOperation_t) == sizeof(int) && sizeof(cudaDataType) == sizeof(int) &&
              sizeof(cublasComputeType_t) == sizeof(int) && sizeof(cublasGemmAlgo_t) == sizeof(int) &&
              sizeof(libraryPropertyType) == sizeof(int));
}  // namespace flashtune::cuda::cublas_abi
#endif

namespace flashtune::cuda {

namespace {

namespace abi = cublas_abi;

struct Table {
  void* lib = nullptr;
  abi::CreateFn create = nullptr;
  abi::SetStreamFn set_stream = nullptr;
  abi::SetWorkspaceFn set_workspace = nullptr;   // may stay null (before CUDA 11.2)
  abi::GetPropertyFn get_property = nullptr;
  abi::GetStatusTextFn status_name = nullptr;    // may stay null (older libraries)
  abi::GetStatusTextFn status_string = nullptr;  // may stay null
  abi::GemmStridedBatchedExFn gemm = nullptr;
};

struct Loaded {
  CublasLibrary info;
  Table table;
};

// Loads the first candidate that opens and has every required entry point. keep: leave it loaded.
Loaded load(const std::vector<std::string>& candidates, bool keep) {
  Loaded out;
  std::string tried;
  for (const auto& file : candidates) {
    void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* err = dlerror();
      tried += "\n  " + file + ": " + (err ? err : "dlopen failed");
      continue;
    }
    Table t;
    t.lib = lib;
    std::string missing;
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p) missing += std::string(missing.empty() ? "" : ", ") + name;
      return p;
    };
    // cublas_v2.h maps cublasCreate / cublasSetStream to these _v2 symbols.
    t.create = reinterpret_cast<abi::CreateFn>(sym("cublasCreate_v2"));
    t.set_stream = reinterpret_cast<abi::SetStreamFn>(sym("cublasSetStream_v2"));
    t.get_property = reinterpret_cast<abi::GetPropertyFn>(sym("cublasGetProperty"));
    t.gemm = reinterpret_cast<abi::GemmStridedBatchedExFn>(sym("cublasGemmStridedBatchedEx"));
    t.set_workspace = reinterpret_cast<abi::SetWorkspaceFn>(dlsym(lib, "cublasSetWorkspace_v2"));
    t.status_name = reinterpret_cast<abi::GetStatusTextFn>(dlsym(lib, "cublasGetStatusName"));
    t.status_string = reinterpret_cast<abi::GetStatusTextFn>(dlsym(lib, "cublasGetStatusString"));
    if (!missing.empty()) {
      tried += "\n  " + file + ": loaded but lacks " + missing;
      dlclose(lib);
      continue;
    }
    int major = 0, minor = 0, patch = 0;
    t.get_property(abi::kMajorVersion, &major);
    t.get_property(abi::kMinorVersion, &minor);
    t.get_property(abi::kPatchLevel, &patch);
    out.info.ok = true;
    out.info.path = file;
    out.info.version = 10000 * major + 100 * minor + patch;
    if (keep) {
      out.table = t;
    } else {
      dlclose(lib);
    }
    return out;
  }
  out.info.why = "cuBLAS not found (needed by the library baselines such as attn_naive); tried:" +
                 (tried.empty() ? std::string(" no candidate files") : tried) +
                 "\n  install the CUDA toolkit's cuBLAS (libcublas.so.13 or .12) or add its folder to LD_LIBRARY_PATH";
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = load(cublas_library_candidates(), true);  // stays loaded for the process
  return instance;
}

const Table& table() {
  const Loaded& l = loaded();
  if (!l.info.ok) throw core::Error(l.info.why);
  return l.table;
}

std::string describe_status(int status) {
  std::string out;
  const Loaded& l = loaded();
  if (l.info.ok && l.table.status_name)
    if (const char* name = l.table.status_name(status)) out = name;
  if (l.info.ok && l.table.status_string)
    if (const char* text = l.table.status_string(status)) out += (out.empty() ? "" : " (") + std::string(text) + (out.empty() ? "" : ")");
  if (out.empty()) out = "cublasStatus_t " + std::to_string(status);
  return out;
}

// Throws CublasError naming `name` (the cuBLAS function) unless `call` succeeds.
#define FT_CHECK_CUBLAS(name, call)                                            \
  do {                                                                         \
    if (const int ft_st = (call); ft_st != abi::kStatusSuccess)                \
      throw ::flashtune::cuda::CublasError(ft_st, name, __FILE__, __LINE__);   \
  } while (false)

// One handle per context. A handle belongs to the context current when it was made; Context::reset()
// destroys that context and every handle with it, so the generation is part of the key. Handles are
// never destroyed: cublasDestroy at exit could run after the driver or the context is gone, and a
// process makes a handful at most.
struct HandleCache {
  std::mutex mutex;
  CUcontext ctx = nullptr;
  std::uint64_t generation = ~std::uint64_t(0);
  abi::Handle handle = nullptr;
  CUstream stream = nullptr;
  bool own_workspace = false;  // a caller's workspace is set (cublasSetStream gives back the default pool)
};

HandleCache& handle_cache() {
  static HandleCache* cache = new HandleCache;  // never destroyed: see above
  return *cache;
}

int data_type(core::DType d) {
  switch (d) {
    case core::DType::f32: return abi::kR32F;
    case core::DType::f16: return abi::kR16F;
    case core::DType::bf16: return abi::kR16BF;
  }
  throw core::Error("gemm: unknown dtype");
}

int as_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw core::Error(std::string("gemm: ") + what + " = " + std::to_string(v) + " does not fit cuBLAS's int argument");
  return int(v);
}

}  // namespace

CublasError::CublasError(int status, const std::string& call, const char* file, int line)
    : core::Error(call + " failed: " + describe_status(status) + " at " + file + ":" + std::to_string(line)),
      m_status(status) {}

std::vector<std::string> cublas_library_candidates() {
  const std::vector<std::string> names{"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  std::vector<std::string> out = names;
  std::vector<std::string> dirs;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) dirs.push_back(std::string(home) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& dir : dirs)
    for (const auto& n : names) out.push_back(dir + "/" + n);
  return out;
}

CublasLibrary probe_cublas(const std::vector<std::string>& candidates) {
  try {
    return load(candidates, false).info;
  } catch (...) {
    CublasLibrary r;
    r.why = "probing cuBLAS failed unexpectedly";
    return r;
  }
}

bool cublas_available(std::string* why) noexcept {
  try {
    const Loaded& l = loaded();
    if (why) *why = l.info.ok ? std::string() : l.info.why;
    return l.info.ok;
  } catch (...) {
    if (why) *why = "loading cuBLAS failed unexpectedly";
    return false;
  }
}

const CublasLibrary& cublas_library() {
  table();  // throws when absent
  return loaded().info;
}

void gemm(const StridedBatchedGemm& g, CUstream stream) {
  const Table& t = table();
  const int m = as_int(g.m, "m"), n = as_int(g.n, "n"), k = as_int(g.k, "k");
  const int lda = as_int(g.lda, "lda"), ldb = as_int(g.ldb, "ldb"), ldc = as_int(g.ldc, "ldc");
  const int batch = as_int(g.batch, "batch");
  if (g.tf32 && (g.a_type != core::DType::f32 || g.b_type != core::DType::f32))
    throw core::Error("gemm: tf32 applies to f32 operands only");
  if (g.workspace && g.workspace_bytes <= 0) throw core::Error("gemm: a workspace needs workspace_bytes > 0");
  if (g.workspace && !t.set_workspace)
    throw core::Error("gemm: this cuBLAS (" + cublas_library().path + ") has no cublasSetWorkspace (CUDA 11.2+)");

  CUcontext ctx = nullptr;
  FT_CHECK_CU(driver().cuCtxGetCurrent(&ctx));
  if (!ctx) throw core::Error("gemm: no CUDA context is current on this thread (make a cuda::Context first)");

  HandleCache& cache = handle_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (!cache.handle || cache.ctx != ctx || cache.generation != context_generation()) {
    abi::Handle h = nullptr;
    FT_CHECK_CUBLAS("cublasCreate", t.create(&h));
    cache.handle = h, cache.ctx = ctx, cache.generation = context_generation(), cache.stream = nullptr;
    FT_CHECK_CUBLAS("cublasSetStream", t.set_stream(cache.handle, stream));
    cache.stream = stream;
    cache.own_workspace = false;
  } else if (cache.stream != stream || (cache.own_workspace && !g.workspace)) {
    // Only on a change: cublasSetStream also resets the handle's workspace to the default pool.
    FT_CHECK_CUBLAS("cublasSetStream", t.set_stream(cache.handle, stream));
    cache.stream = stream;
    cache.own_workspace = false;
  }
  if (g.workspace) {
    FT_CHECK_CUBLAS("cublasSetWorkspace", t.set_workspace(cache.handle, reinterpret_cast<void*>(g.workspace),
                                                          std::size_t(g.workspace_bytes)));
    cache.own_workspace = true;
  }
  const int compute = g.tf32 ? abi::kCompute32FFastTF32 : abi::kCompute32F;
  const std::string what = "cublasGemmStridedBatchedEx(m " + std::to_string(m) + ", n " + std::to_string(n) +
                           ", k " + std::to_string(k) + ", batch " + std::to_string(batch) + ")";
  FT_CHECK_CUBLAS(what, t.gemm(cache.handle, g.op_a == GemmOp::t ? abi::kOpT : abi::kOpN,
                         g.op_b == GemmOp::t ? abi::kOpT : abi::kOpN, m, n, k, &g.alpha,
                         reinterpret_cast<const void*>(g.a), data_type(g.a_type), lda, g.stride_a,
                         reinterpret_cast<const void*>(g.b), data_type(g.b_type), ldb, g.stride_b, &g.beta,
                         reinterpret_cast<void*>(g.c), data_type(g.c_type), ldc, g.stride_c, batch, compute,
                         abi::kGemmDefault));
}

}  // namespace flashtune::cuda
