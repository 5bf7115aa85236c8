// harness/jit/compiler.cpp: NVRTC compile, ptxas report parsing and the CUBIN disk cache.
#include "harness/jit/compiler.hpp"

#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#define FT_CHECK_NVRTC(call)                                                            \
  do {                                                                                  \
    if (const nvrtcResult ft_rc = (call); ft_rc != NVRTC_SUCCESS)                       \
      throw ::flashtune::jit::NvrtcError(static_cast<int>(ft_rc), #call, __FILE__, __LINE__); \
  } while (false)

namespace flashtune::jit {

namespace fs = std::filesystem;

NvrtcError::NvrtcError(int code, const std::string& call, const char* file, int line)
    : core::Error(call + " failed: " + nvrtcGetErrorString(static_cast<nvrtcResult>(code)) + " at " + file +
                  ":" + std::to_string(line)),
      m_code(code) {}

namespace {

constexpr int kCacheFormat = 1;  // bump when the cache entry's layout or meaning changes

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

// Appends a length-prefixed field so that no two different inputs concatenate to the same text.
void add_field(std::string& key_text, std::string_view field) {
  key_text += std::to_string(field.size());
  key_text += ':';
  key_text += field;
  key_text += ';';
}

std::string cache_key_for(const CompileRequest& req, const std::vector<std::string>& options,
                          const std::vector<TemplateFile>& headers) {
  std::string text = "flashtune-jit/" + std::to_string(kCacheFormat) + ";";
  add_field(text, Compiler::nvrtc_version());
  add_field(text, req.arch);
  for (const std::string& o : options) add_field(text, o);
  add_field(text, req.name_expression);
  add_field(text, req.source_name);
  add_field(text, req.source);
  for (const TemplateFile& h : headers) {
    add_field(text, h.name);
    add_field(text, h.text);
  }
  return core::hash_hex(text);
}

// Writes `bytes` to `path` through a temporary file and a rename, so readers see all or nothing.
bool write_atomically(const fs::path& path, std::string_view bytes) {
  static std::atomic<unsigned> counter{0};
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp." +
                                             std::to_string(::getpid()) + "." + std::to_string(counter++));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

std::optional<std::string> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return s.str();
}

nlohmann::json resources_to_json(const core::KernelResources& r) {
  return {{"registers", r.registers},         {"spill_store_bytes", r.spill_store_bytes},
          {"spill_load_bytes", r.spill_load_bytes}, {"stack_frame_bytes", r.stack_frame_bytes},
          {"shared_static_bytes", r.shared_static_bytes}, {"constant_bytes", r.constant_bytes}};
}

core::KernelResources resources_from_json(const nlohmann::json& j) {
  core::KernelResources r;
  r.registers = j.at("registers").get<int>();
  r.spill_store_bytes = j.at("spill_store_bytes").get<int>();
  r.spill_load_bytes = j.at("spill_load_bytes").get<int>();
  r.stack_frame_bytes = j.at("stack_frame_bytes").get<int>();
  r.shared_static_bytes = j.at("shared_static_bytes").get<int>();
  r.constant_bytes = j.at("constant_bytes").get<int>();
  return r;
}

// A cache entry is <key>.json (always) and <key>.cubin (successful compiles). The CUBIN is written first,
// so a readable JSON implies a complete CUBIN; its size is checked anyway.
bool read_cache(const fs::path& dir, CompileOutput& out) {
  const std::string& key = out.record.cache_key;
  const auto meta_text = read_all(dir / (key + ".json"));
  if (!meta_text) return false;
  try {
    const nlohmann::json meta = nlohmann::json::parse(*meta_text);
    if (meta.at("format").get<int>() != kCacheFormat) return false;
    const bool ok = meta.at("ok").get<bool>();
    const std::size_t cubin_bytes = meta.at("cubin_bytes").get<std::size_t>();
    std::vector<char> cubin;
    if (ok) {
      const auto bytes = read_all(dir / (key + ".cubin"));
      if (!bytes || bytes->size() != cubin_bytes || bytes->empty()) return false;
      cubin.assign(bytes->begin(), bytes->end());
    }
    out.record.ok = ok;
    out.record.lowered_name = meta.at("lowered_name").get<std::string>();
    out.record.log = meta.at("log").get<std::string>();
    out.record.resources = resources_from_json(meta.at("resources"));
    out.record.cubin_bytes = cubin.size();
    out.record.cache_hit = true;
    out.record.compile_ms = 0;
    out.cubin = std::move(cubin);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;  // damaged or foreign entry: compile again and overwrite it
  }
}

void write_cache(const fs::path& dir, const CompileOutput& out) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return;  // the cache only saves time; a read-only or full disk must not fail the compile
  const std::string& key = out.record.cache_key;
  if (out.record.ok &&
      !write_atomically(dir / (key + ".cubin"), std::string_view(out.cubin.data(), out.cubin.size())))
    return;
  const nlohmann::json meta = {{"format", kCacheFormat},
                               {"ok", out.record.ok},
                               {"arch", out.record.arch},
                               {"options", out.record.options},
                               {"name_expression", out.record.name_expression},
                               {"lowered_name", out.record.lowered_name},
                               {"log", out.record.log},
                               {"resources", resources_to_json(out.record.resources)},
                               {"cubin_bytes", out.cubin.size()},
                               {"compile_ms", out.record.compile_ms}};
  write_atomically(dir / (key + ".json"), meta.dump(1));
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

CompileOutput Compiler::compile(const CompileRequest& req) const {
  const std::string key = cache_key(req);
  std::shared_future<CompileOutput> pending;
  std::shared_ptr<std::promise<CompileOutput>> stolen;
  {
    std::lock_guard<std::mutex> lock(m_memo->mutex);
    if (auto it = m_memo->prefetched.find(key); it != m_memo->prefetched.end()) {
      CompileOutput out = std::move(it->second);
      m_memo->prefetched.erase(it);
      return out;
    }
    if (const auto it = m_memo->entries.find(key); it != m_memo->entries.end()) {
      CompileOutput out = it->second;
      out.record.cache_hit = true;
      out.record.compile_ms = 0;
      return out;
    }
    if (const auto it = m_memo->in_flight.find(key); it != m_memo->in_flight.end()) {
      auto& q = m_memo->queue;
      const auto queued = std::find_if(q.begin(), q.end(), [&](const auto& e) { return e.first == key; });
      if (queued == q.end()) {
        pending = it->second;  // a prefetch thread is compiling it
      } else {                 // still queued: compiled here rather than waited for
        stolen = std::move(queued->second.second);
        q.erase(queued);
      }
    }
  }
  if (pending.valid()) {  // the prefetch thread kept its output for its first taker: this call, or a later one
    CompileOutput out = pending.get();
    std::lock_guard<std::mutex> lock(m_memo->mutex);
    if (!m_memo->prefetched.erase(key)) out.record.cache_hit = true, out.record.compile_ms = 0;
    return out;
  }
  if (!stolen) return compile_now(req, key, m_cache_dir, *m_memo);
  return compile_promised(req, key, m_cache_dir, *m_memo, *stolen);
}

CompileOutput Compiler::compile_promised(const CompileRequest& req, const std::string& key,
                                         const std::optional<fs::path>& cache_dir, Memo& memo,
                                         std::promise<CompileOutput>& promise, bool keep_for_first_taker) {
  try {
    CompileOutput out = compile_now(req, key, cache_dir, memo);
    std::lock_guard<std::mutex> lock(memo.mutex);
    if (keep_for_first_taker) memo.prefetched.emplace(key, out);
    promise.set_value(out);
    memo.in_flight.erase(key);
    return out;
  } catch (...) {
    std::lock_guard<std::mutex> lock(memo.mutex);
    promise.set_exception(std::current_exception());
    memo.in_flight.erase(key);
    throw;
  }
}

Compiler::Memo::~Memo() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
    for (auto& q : queue) q.second.second->set_exception(std::make_exception_ptr(std::runtime_error("compiler destroyed")));
    queue.clear();
  }
  for (auto& w : workers)
    if (w.joinable()) w.join();
}

void Compiler::prefetch(std::vector<CompileRequest> reqs, unsigned threads) const {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency() > 1 ? std::thread::hardware_concurrency() - 1 : 1u);
  std::lock_guard<std::mutex> lock(m_memo->mutex);
  for (auto& req : reqs) {
    std::string key = cache_key(req);
    if (m_memo->entries.count(key) || m_memo->in_flight.count(key)) continue;
    auto promise = std::make_shared<std::promise<CompileOutput>>();
    m_memo->in_flight.emplace(key, promise->get_future().share());
    m_memo->queue.emplace_back(std::move(key), std::make_pair(std::move(req), std::move(promise)));
  }
  // At most `threads` run; when none does, the finished ones are joined first.
  if (m_memo->busy_workers == 0) {
    for (auto& w : m_memo->workers) w.join();
    m_memo->workers.clear();
  }
  while (m_memo->busy_workers < threads && m_memo->busy_workers < m_memo->queue.size()) {
    ++m_memo->busy_workers;
    m_memo->workers.emplace_back(&Compiler::prefetch_worker, m_memo.get(), m_cache_dir);
  }
}

std::size_t Compiler::prefetch_pending() const {
  std::lock_guard<std::mutex> lock(m_memo->mutex);
  return m_memo->queue.size();
}

// Takes queued requests until the queue is empty. A thread that finds the queue empty exits; prefetch()
// starts new ones while fewer than its limit are busy, and joins the exited ones when none is busy.
void Compiler::prefetch_worker(Memo* memo, std::optional<fs::path> cache_dir) {
  Memo& m = *memo;
  for (;;) {
    std::string key;
    CompileRequest req;
    std::shared_ptr<std::promise<CompileOutput>> promise;
    {
      std::lock_guard<std::mutex> lock(m.mutex);
      if (m.stop || m.queue.empty()) {
        --m.busy_workers;
        return;
      }
      key = std::move(m.queue.front().first);
      req = std::move(m.queue.front().second.first);
      promise = std::move(m.queue.front().second.second);
      m.queue.pop_front();
    }
    try {
      compile_promised(req, key, cache_dir, m, *promise, true);
    } catch (...) {  // handed to whoever waits on the promise
    }
  }
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

std::optional<fs::path> default_cache_dir() {
  if (const char* v = std::getenv("FLASHTUNE_CACHE_DIR"); v && *v) return fs::path(v);
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return fs::path(v) / "flashtune";
  if (const char* v = std::getenv("HOME"); v && *v) return fs::path(v) / ".cache" / "flashtune";
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// ptxas report parsing. Lines look like (ptxas of CUDA 12/13):
//   ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
//   ptxas info    : Function properties for _Z1kPf
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 9 registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]
namespace {

// The integer that ends (spaces aside) just before position `at` of `line`, or nullopt.
std::optional<int> number_ending_at(std::string_view line, std::size_t at) {
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  if (begin == end) return std::nullopt;
  return std::stoi(std::string(line.substr(begin, end - begin)));
}

// The integer just before `unit` in `line` ("512 bytes smem" -> 512), or nullopt.
std::optional<int> number_before(std::string_view line, std::string_view unit) {
  const std::size_t at = line.find(unit);
  if (at == std::string_view::npos) return std::nullopt;
  return number_ending_at(line, at);
}

std::string quoted_or_rest(std::string_view line, std::string_view after) {
  std::size_t at = line.find(after);
  if (at == std::string_view::npos) return {};
  std::string_view rest = line.substr(at + after.size());
  if (!rest.empty() && rest.front() == '\'') {
    const std::size_t end = rest.find('\'', 1);
    return std::string(rest.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1));
  }
  const std::size_t end = rest.find_first_of(" \t\r");
  return std::string(rest.substr(0, end));
}

}  // namespace

core::KernelResources parse_ptxas_report(std::string_view log, const std::string& lowered_name) {
  std::map<std::string, core::KernelResources> kernels;  // entry functions
  std::map<std::string, core::KernelResources> props;    // stack/spill lines by function
  std::vector<std::string> entry_order;
  std::string entry, props_target;

  std::size_t pos = 0;
  while (pos <= log.size()) {
    std::size_t nl = log.find('\n', pos);
    if (nl == std::string_view::npos) nl = log.size();
    const std::string_view line = log.substr(pos, nl - pos);
    pos = nl + 1;

    if (line.find("Compiling entry function") != std::string_view::npos) {
      entry = quoted_or_rest(line, "Compiling entry function ");
      if (!kernels.count(entry)) entry_order.push_back(entry);
      kernels[entry];
    } else if (line.find("Function properties for ") != std::string_view::npos) {
      props_target = quoted_or_rest(line, "Function properties for ");
    } else if (line.find("bytes stack frame") != std::string_view::npos && !props_target.empty()) {
      core::KernelResources& r = props[props_target];
      r.stack_frame_bytes = number_before(line, "bytes stack frame").value_or(-1);
      r.spill_store_bytes = number_before(line, "bytes spill stores").value_or(-1);
      r.spill_load_bytes = number_before(line, "bytes spill loads").value_or(-1);
    } else if (line.find("Used ") != std::string_view::npos && line.find(" registers") != std::string_view::npos &&
               !entry.empty()) {
      core::KernelResources& r = kernels[entry];
      r.registers = number_before(line, "registers").value_or(-1);
      r.shared_static_bytes = number_before(line, "bytes smem").value_or(0);
      int constant = 0;
      for (std::size_t c = line.find("bytes cmem["); c != std::string_view::npos; c = line.find("bytes cmem[", c + 1)) {
        const std::size_t bank_at = c + 11;
        const bool user_bank = bank_at < line.size() && line[bank_at] != '0';
        if (user_bank) constant += number_ending_at(line, c).value_or(0);
      }
      r.constant_bytes = constant;
    }
  }

  std::string name = lowered_name;
  if (name.empty() && entry_order.size() == 1) name = entry_order.front();
  core::KernelResources result;
  if (auto it = kernels.find(name); it != kernels.end()) result = it->second;
  else return result;
  if (auto it = props.find(name); it != props.end()) {
    result.stack_frame_bytes = it->second.stack_frame_bytes;
    result.spill_store_bytes = it->second.spill_store_bytes;
    result.spill_load_bytes = it->second.spill_load_bytes;
  }
  return result;
}

std::string first_error_line(const std::string& log) {
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line))
    if (line.find("error") != std::string::npos) return line;
  return log.substr(0, std::min<std::size_t>(log.size(), 200));
}

}  // namespace flashtune::jit
