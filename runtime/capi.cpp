// runtime/capi.cpp: the C ABI (flashtune_runtime.h) over Runtime: every call catches what it throws and turns it into a
// status and this thread's last-error message.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "harness/cuda/check.hpp"
#include "harness/jit/compiler.hpp"
#include "runtime/flashtune_runtime.h"
#include "runtime/runtime.hpp"

struct ft_runtime {
  flashtune::runtime::Runtime impl;
};

namespace {

thread_local std::string g_last_error;

// Runs `f`, returning FT_OK, or the status of what it threw with the message kept for ft_last_error().
template <typename F>
int guarded(F&& f) {
  using flashtune::runtime::RuntimeError;
  try {
    g_last_error.clear();
    f();
    return FT_OK;
  } catch (const RuntimeError& e) {
    g_last_error = e.what();
    return e.status();
  } catch (const flashtune::cuda::CudaError& e) {
    g_last_error = e.what();
    return FT_ERR_CUDA;
  } catch (const flashtune::jit::NvrtcError& e) {
    g_last_error = e.what();
    return FT_ERR_COMPILE;
  } catch (const flashtune::core::UserError& e) {
    g_last_error = e.what();
    return FT_ERR_ARGUMENT;
  } catch (const std::bad_alloc&) {
    g_last_error = "out of host memory";
    return FT_ERR_CUDA;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return FT_ERR_CUDA;
  } catch (...) {
    g_last_error = "unknown error";
    return FT_ERR_CUDA;
  }
}

void need(const void* p, const char* what) {
  if (!p) throw flashtune::runtime::RuntimeError(FT_ERR_ARGUMENT, std::string(what) + " is NULL");
}

flashtune::runtime::Pass pass_of(int backward) {
  return backward ? flashtune::runtime::Pass::backward : flashtune::runtime::Pass::forward;
}

// ft_attention_forward / ft_attention_backward: the arguments checked, then Runtime::run of that pass.
int run_pass(int backward, ft_runtime* rt, const ft_attn_shape* shape, const ft_attn_tensors* t, void* stream,
             void* workspace, size_t workspace_bytes) {
  return guarded([&] {
    need(rt, "runtime"), need(shape, "shape"), need(t, "tensors");
    rt->impl.run(pass_of(backward), *shape, *t, stream, reinterpret_cast<std::uintptr_t>(workspace), workspace_bytes);
  });
}

}  // namespace

extern "C" {

int ft_runtime_abi_version(void) { return FT_RUNTIME_ABI_VERSION; }

const char* ft_last_error(void) { return g_last_error.c_str(); }

int ft_runtime_create(const char* configs_path, const char* cache_dir, ft_runtime** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    std::string path = configs_path ? configs_path : "";
    if (path.empty()) {
      const char* env = std::getenv("FLASHTUNE_CONFIGS");
      if (!env || !*env)
        throw flashtune::runtime::RuntimeError(FT_ERR_CONFIGS, "no config file: pass one or set FLASHTUNE_CONFIGS");
      path = env;
    }
    flashtune::runtime::ConfigTable table;
    try {
      table = flashtune::runtime::ConfigTable::load(path);
    } catch (const flashtune::core::Error& e) {
      throw flashtune::runtime::RuntimeError(FT_ERR_CONFIGS, e.what());
    }
    table.add_builtin_fallbacks();  // ranked after every entry of the file: the last resort, named in explain
    std::optional<std::filesystem::path> cache;
    if (!cache_dir) cache = flashtune::jit::default_cache_dir();
    else if (*cache_dir) cache = cache_dir;
    *out = new ft_runtime{flashtune::runtime::Runtime(std::move(table), std::move(cache))};
  });
}

void ft_runtime_destroy(ft_runtime* rt) { delete rt; }

int ft_attention_forward(ft_runtime* rt, const ft_attn_shape* shape, const ft_attn_tensors* t, void* stream,
                         void* workspace, size_t workspace_bytes) {
  return run_pass(0, rt, shape, t, stream, workspace, workspace_bytes);
}

int ft_attention_backward(ft_runtime* rt, const ft_attn_shape* shape, const ft_attn_tensors* t, void* stream,
                          void* workspace, size_t workspace_bytes) {
  return run_pass(1, rt, shape, t, stream, workspace, workspace_bytes);
}

int ft_attention_workspace_bytes(ft_runtime* rt, const ft_attn_shape* shape, int backward, size_t* bytes) {
  return guarded([&] {
    need(rt, "runtime"), need(shape, "shape"), need(bytes, "bytes");
    *bytes = rt->impl.workspace_bytes(pass_of(backward), *shape);
  });
}

int ft_attention_explain(ft_runtime* rt, const ft_attn_shape* shape, int backward, const char* arch, char* buf,
                         size_t len, size_t* needed) {
  return guarded([&] {
    need(rt, "runtime"), need(shape, "shape");
    const std::string text = rt->impl.explain(pass_of(backward), *shape, arch ? arch : "");
    if (needed) *needed = text.size() + 1;
    if (!buf || len < text.size() + 1)
      throw flashtune::runtime::RuntimeError(FT_ERR_BUFFER, "explain needs " + std::to_string(text.size() + 1) +
                                                                " bytes, got " + std::to_string(len));
    std::memcpy(buf, text.c_str(), text.size() + 1);
  });
}

}  // extern "C"
