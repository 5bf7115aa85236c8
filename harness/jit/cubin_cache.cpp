// harness/jit/cubin_cache.cpp: the CUBIN disk cache: the key (a hash of everything that decides the output) and
// the entries, <key>.json and <key>.cubin, written atomically so that runs can share one folder.
#include "harness/jit/cubin_cache.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace flashtune::jit {

namespace fs = std::filesystem;

namespace {

constexpr int kCacheFormat = 1;  // bump when the cache entry's layout or meaning changes

// Appends a length-prefixed field so that no two different inputs concatenate to the same text.
void add_field(std::string& key_text, std::string_view field) {
  key_text += std::to_string(field.size());
  key_text += ':';
  key_text += field;
  key_text += ';';
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

}  // namespace

namespace detail {

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
    // Every field read before any is set: a damaged entry leaves the record as the caller made it.
    std::string lowered_name = meta.at("lowered_name").get<std::string>();
    std::string log = meta.at("log").get<std::string>();
    core::KernelResources resources = resources_from_json(meta.at("resources"));
    out.record.ok = ok;
    out.record.lowered_name = std::move(lowered_name);
    out.record.log = std::move(log);
    out.record.resources = resources;
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

}  // namespace detail

std::optional<fs::path> default_cache_dir() {
  if (const char* v = std::getenv("FLASHTUNE_CACHE_DIR"); v && *v) return fs::path(v);
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return fs::path(v) / "flashtune";
  if (const char* v = std::getenv("HOME"); v && *v) return fs::path(v) / ".cache" / "flashtune";
  return std::nullopt;
}

}  // namespace flashtune::jit
