// harness/jit/cubin_cache.hpp: private to harness/jit. The CUBIN disk cache behind Compiler: the key of a request,
// and reading and writing the entry <key>.json (+ <key>.cubin when the compile succeeded) in a folder.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "harness/jit/compiler.hpp"

namespace flashtune::jit::detail {

/// Hex hash of the cache format, the NVRTC version, req.arch, `options` (in order), the name expression, the
/// source's name and text, and `headers` (name and text, in the order given: by name).
std::string cache_key_for(const CompileRequest& req, const std::vector<std::string>& options,
                          const std::vector<TemplateFile>& headers);

/// Fills `out` (record and CUBIN) from the entry of out.record.cache_key in `dir`, as a cache hit (cache_hit true,
/// compile_ms 0). False when there is no entry, or it is damaged, of another format, or its CUBIN is missing or of
/// the wrong size: the caller compiles again and overwrites it; `out` is then left as it came in.
bool read_cache(const std::filesystem::path& dir, CompileOutput& out);
/// Writes `out` as the entry of out.record.cache_key in `dir` (created if need be), the CUBIN before the JSON, each
/// through a temporary file and a rename. Never fails: a folder that cannot be written only loses the entry.
void write_cache(const std::filesystem::path& dir, const CompileOutput& out);

}  // namespace flashtune::jit::detail
