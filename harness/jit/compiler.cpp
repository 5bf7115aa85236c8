// harness/jit/compiler.cpp: the NVRTC call: the options, the headers a source can reach, and one compile
// (program, name expression, CUBIN, log, resources). The CUBIN disk cache is cubin_cache.cpp, the memory
// cache and prefetch queue compile_queue.cpp, the log's reading compile_log.cpp.
#include "harness/jit/compiler.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>

#include "harness/jit/cubin_cache.hpp"

#define FT_CHECK_NVRTC(call)                                                            \
  do {                                                                                  \
    if (const nvrtcResult ft_rc = (call); ft_rc != NVRTC_SUCCESS)                       \
      throw ::flashtune::jit::NvrtcError(static_cast<int>(ft_rc), #call, __FILE__, __LINE__); \
  } while (false)

namespace flashtune::jit {

namespace fs = std::filesystem;

using detail::cache_key_for;
using detail::read_cache;
using detail::write_cache;

NvrtcError::NvrtcError(int code, const std::string& call, const char* file, int line)
    : core::Error(call + " failed: " + nvrtcGetErrorString(static_cast<nvrtcResult>(code)) + " at " + file +
                  ":" + std::to_string(line)),
      m_code(code) {}

namespace {

// The CUDA include folder, passed with -I as a fallback for templates that include toolkit headers.
std::optional<std::string> cuda_include_dir() {
  static const std::optional<std::string> dir = []() -> std::optional<std::string> {
    std::vector<fs::path> candidates;
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char* v = std::getenv(var); v && *v) candidates.push_back(fs::path(v) / "include");
    candidates.emplace_back("/usr/local/cuda/include");
#ifdef FT_CUDA_INCLUDE_DIR
    candidates.emplace_back(FT_CUDA_INCLUDE_DIR);
#endif
    for (const fs::path& c : candidates) {
      std::error_code ec;
      if (fs::is_regular_file(c / "cuda.h", ec)) return c.string();
    }
    return std::nullopt;
  }();
  return dir;
}

// The headers `req` can reach through includes: embedded templates, overlaid by req.headers.
std::vector<TemplateFile> reachable_headers(const CompileRequest& req) {
  std::map<std::string, std::string> available;
  for (TemplateFile& t : template_headers(std::nullopt)) available[t.name] = std::move(t.text);
  for (const TemplateFile& t : req.headers) available[t.name] = t.text;
  std::vector<TemplateFile> headers;
  for (auto& [name, text] : available) headers.push_back({name, std::move(text)});
  std::vector<TemplateFile> out = include_closure(included_names(req.source), headers);
  std::sort(out.begin(), out.end(), [](const TemplateFile& a, const TemplateFile& b) { return a.name < b.name; });
  return out;  // by name, as NVRTC's header table and the cache key take them
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : " ") + p;
  return out;
}

struct ProgramGuard {
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog) nvrtcDestroyProgram(&prog);
  }
};

std::string program_log(nvrtcProgram prog) {
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

}  // namespace

Compiler::Compiler(std::optional<fs::path> cache_dir) : m_cache_dir(std::move(cache_dir)) {}

std::string Compiler::nvrtc_version() {
  int major = 0, minor = 0;
  FT_CHECK_NVRTC(nvrtcVersion(&major, &minor));
  return std::to_string(major) + "." + std::to_string(minor);
}

// NVRTC 12.9+ keeps its own compile cache (it honours CUDA_CACHE_DISABLE); a hit there skips ptxas and
// so drops the resource report. Ours is the cache: turn NVRTC's off (seen on NVRTC 13.0.88 on the H200
// machine; NVIDIA/Fuser#4694 and NVIDIA/cuda-python#1124 describe the same).
namespace {
bool nvrtc_has_own_cache() {
  static const bool has = [] {
    int major = 0, minor = 0;
    return nvrtcVersion(&major, &minor) == NVRTC_SUCCESS && (major > 12 || (major == 12 && minor >= 9));
  }();
  return has;
}
}  // namespace

std::vector<std::string> Compiler::options_for(const CompileRequest& req) {
  // -default-device: unannotated functions are device functions. Templates are device code only, and NVRTC
  // otherwise takes the call operator of a generic lambda (ft_if_masked's bodies) for a host function.
  std::vector<std::string> options = {"--gpu-architecture=" + req.arch, "-std=c++17", "-default-device", "-lineinfo",
                                      "--ptxas-options=-v"};
  if (nvrtc_has_own_cache()) options.push_back("--no-cache");
  for (const std::string& d : req.defines) options.push_back("-D" + d);
  options.insert(options.end(), req.extra_options.begin(), req.extra_options.end());
  if (const auto inc = cuda_include_dir()) options.push_back("-I" + *inc);
  return options;
}

std::string Compiler::cache_key(const CompileRequest& req) {
  return cache_key_for(req, options_for(req), reachable_headers(req));
}

CompileOutput Compiler::compile_now(const CompileRequest& req, const std::string& key,
                                   const std::optional<fs::path>& cache_dir, Memo& memo) {
  const std::vector<std::string> options = options_for(req);
  const std::vector<TemplateFile> headers = reachable_headers(req);

  CompileOutput out;
  core::CompileRecord& rec = out.record;
  rec.arch = req.arch;
  rec.options = join(options);
  rec.name_expression = req.name_expression;
  rec.cache_key = key;
  if (cache_dir && read_cache(*cache_dir, out)) return out;

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<const char*> header_texts, header_names;
  for (const TemplateFile& h : headers) {
    header_texts.push_back(h.text.c_str());
    header_names.push_back(h.name.c_str());
  }
  ProgramGuard guard;
  FT_CHECK_NVRTC(nvrtcCreateProgram(&guard.prog, req.source.c_str(),
                                    req.source_name.empty() ? "kernel.cu" : req.source_name.c_str(),
                                    static_cast<int>(headers.size()), header_texts.data(), header_names.data()));
  if (!req.name_expression.empty())
    FT_CHECK_NVRTC(nvrtcAddNameExpression(guard.prog, req.name_expression.c_str()));

  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());
  const nvrtcResult rc = nvrtcCompileProgram(guard.prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  rec.log = program_log(guard.prog);

  if (rc == NVRTC_SUCCESS) {
    rec.ok = true;
    if (!req.name_expression.empty()) {
      const char* lowered = nullptr;
      if (const nvrtcResult lr = nvrtcGetLoweredName(guard.prog, req.name_expression.c_str(), &lowered);
          lr == NVRTC_SUCCESS && lowered) {
        rec.lowered_name = lowered;
      } else {
        rec.ok = false;
        rec.log += "\nflashtune: name expression '" + req.name_expression +
                   "' does not name a __global__ function in " + req.source_name + " (" +
                   nvrtcGetErrorString(lr) + ")\n";
      }
    }
    if (rec.ok) {
      std::size_t size = 0;
      FT_CHECK_NVRTC(nvrtcGetCUBINSize(guard.prog, &size));
      out.cubin.resize(size);
      if (size > 0) FT_CHECK_NVRTC(nvrtcGetCUBIN(guard.prog, out.cubin.data()));
      if (size == 0) {
        rec.ok = false;
        rec.log += "\nflashtune: NVRTC produced no CUBIN (is '" + req.arch + "' a real sm_ target?)\n";
      }
    }
  } else if (rc == NVRTC_ERROR_COMPILATION || rc == NVRTC_ERROR_INVALID_OPTION ||
             rc == NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID) {
    rec.ok = false;
    if (rc != NVRTC_ERROR_COMPILATION)
      rec.log += std::string("\nflashtune: nvrtcCompileProgram: ") + nvrtcGetErrorString(rc) +
                 " (options: " + rec.options + ")\n";
  } else {
    throw NvrtcError(static_cast<int>(rc), "nvrtcCompileProgram(" + req.source_name + ")", __FILE__, __LINE__);
  }
  rec.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!rec.ok) out.cubin.clear();
  rec.cubin_bytes = out.cubin.size();
  rec.resources = parse_ptxas_report(rec.log, rec.lowered_name);
  if (cache_dir) write_cache(*cache_dir, out);
  if (rec.ok && !cache_dir) {
    std::lock_guard<std::mutex> lock(memo.mutex);
    if (memo.bytes + out.cubin.size() <= kMemoBytes && memo.entries.emplace(rec.cache_key, out).second)
      memo.bytes += out.cubin.size();
  }
  return out;
}

}  // namespace flashtune::jit
