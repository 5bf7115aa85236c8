// harness/cuda/driver.cpp: dlopen of libcuda.so.1 and resolution of the entry points. cuGetProcAddress
// (asked for the header's CUDA version, capped at the driver's and at 12.9: see load()) picks the right versioned symbol; dlsym of
// the versioned name (cuMemAlloc_v2) is the fallback when it is absent or refuses a symbol.
#include "harness/cuda/driver.hpp"

#include <dlfcn.h>

#include <algorithm>

#include "harness/core/types.hpp"

namespace flashtune::cuda {

namespace {

#define FT_CUDA_STR2(x) #x
#define FT_CUDA_STR(x) FT_CUDA_STR2(x)

struct Loaded {
  Driver table;
  bool ok = false;
  std::string why;
};

// cuGetProcAddress_v2 (CUDA 12.0+): symbol, pfn, cudaVersion, flags, symbolStatus.
using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using DriverGetVersion = CUresult (*)(int*);

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    out.why = std::string("libcuda.so.1 not found: no NVIDIA driver on this machine (dlopen: ") +
              (err ? err : "unknown error") + ")";
    return out;
  }
  auto get_version = reinterpret_cast<DriverGetVersion>(dlsym(lib, "cuDriverGetVersion"));
  int version = 0;
  if (!get_version || get_version(&version) != CUDA_SUCCESS) {
    out.why = "libcuda.so.1 loaded but cuDriverGetVersion is missing or failed";
    return out;
  }
  out.table.version = version;
  auto get_proc = reinterpret_cast<GetProcAddressV2>(dlsym(lib, "cuGetProcAddress_v2"));
  // At most 12.9: CUDA 13.0 gave cuCtxGetDevice and cuCtxSynchronize a context argument under their old names in
  // cuGetProcAddress (PFN_..._v13000), while cuda.h keeps the old prototypes (the new ones are named ..._v2). Asked
  // for 13.0, the driver hands out the two-argument functions and a call through the old prototype passes a garbage
  // context (seen: CUDA_ERROR_INVALID_CONTEXT, and crashes). Every other entry point used here has the same ABI at
  // 12.9 as at 13.0. Revisit when one needs a 13.x-only version.
  const int ask_version = std::min({CUDA_VERSION, version, 12090});

  auto resolve = [&](const char* base, const char* versioned) -> void* {
    void* fn = nullptr;
    if (get_proc) {
      CUdriverProcAddressQueryResult status{};
      if (get_proc(base, &fn, ask_version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
          status == CU_GET_PROC_ADDRESS_SUCCESS && fn)
        return fn;
    }
    fn = dlsym(lib, versioned);
    return fn ? fn : dlsym(lib, base);
  };

  std::string missing;
#define FT_CUDA_RESOLVE(name)                                                              \
  out.table.name = reinterpret_cast<decltype(out.table.name)>(resolve(#name, FT_CUDA_STR(name))); \
  if (!out.table.name) missing += std::string(missing.empty() ? "" : ", ") + FT_CUDA_STR(name);
  FT_CUDA_DRIVER_FUNCTIONS(FT_CUDA_RESOLVE)
#undef FT_CUDA_RESOLVE

  if (!missing.empty()) {
    out.why = "libcuda.so.1 (driver " + std::to_string(version / 1000) + "." +
              std::to_string(version % 1000 / 10) + ") lacks entry points: " + missing;
    return out;
  }
  if (const CUresult rc = out.table.cuInit(0); rc != CUDA_SUCCESS) {
    const char* name = nullptr;
    const char* text = nullptr;
    out.table.cuGetErrorName(rc, &name);
    out.table.cuGetErrorString(rc, &text);
    out.why = std::string("cuInit(0) failed: ") + (name ? name : "?") + " (" + (text ? text : "?") +
              ")" + (rc == CUDA_ERROR_NO_DEVICE ? ": the driver sees no GPU" : "");
    return out;
  }
  out.ok = true;
  return out;  // the library stays loaded for the life of the process
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

bool driver_available(std::string* why) noexcept {
  try {
    const Loaded& l = loaded();
    if (why) *why = l.ok ? std::string() : l.why;
    return l.ok;
  } catch (...) {
    if (why) *why = "loading libcuda.so.1 failed unexpectedly";
    return false;
  }
}

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.ok) throw core::Error("CUDA driver unavailable: " + l.why);
  return l.table;
}

}  // namespace flashtune::cuda
