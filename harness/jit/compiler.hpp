// harness/jit/compiler.hpp: NVRTC as a typed chain, CUDA C++ text -> CUBIN for a named arch, with the
// ptxas resource report parsed and a disk cache keyed by everything that decides the output. Runs without
// a GPU or driver (compiling for sm_90a on a laptop works). A compile error is a result, never an exception.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/core/types.hpp"
#include "harness/jit/compile_log.hpp"
#include "harness/jit/template_store.hpp"

namespace flashtune::jit {

/// An NVRTC call failed for a reason other than the program's text (out of memory, missing builtins).
class NvrtcError : public core::Error {
 public:
  NvrtcError(int code, const std::string& call, const char* file, int line);
  int code() const noexcept { return m_code; }  ///< the nvrtcResult

 private:
  int m_code;
};

struct CompileRequest {
  std::string source;           ///< CUDA C++ text of the translation unit
  std::string source_name;      ///< shown in the log: "weighted_row_sum.cuh"
  std::string name_expression;  ///< "weighted_row_sum_kernel<float, 256, 4>"; empty: no lowered name
  std::vector<std::string> defines;  ///< "FT_FOO=1" -> -DFT_FOO=1
  std::string arch = "sm_90a";       ///< NVRTC target, compiled straight to CUBIN
  std::vector<std::string> extra_options;
  /// Headers `#include "x.cuh"` can name, besides the embedded templates (same name: this one wins).
  /// Pass template_headers(override_dir) when templates come from an override folder.
  std::vector<TemplateFile> headers;
};

struct CompileOutput {
  core::CompileRecord record;  ///< ok=false with the log on a compile error
  std::vector<char> cubin;     ///< empty unless record.ok
};

class Compiler {
 public:
  /// `cache_dir`: where CUBINs are kept between runs (created on first write). nullopt: no cache on disk;
  /// the compiler then remembers its own successful compiles in memory (up to kMemoBytes of CUBIN), so
  /// that a run meeting the same specialization on many problems still compiles it once.
  explicit Compiler(std::optional<std::filesystem::path> cache_dir = std::nullopt);

  /// Compiles `req`. Options: --gpu-architecture=<arch> -std=c++17 -lineinfo --ptxas-options=-v,
  /// --no-cache (NVRTC >= 12.9, whose own cache would skip ptxas and its report), the defines, the extra
  /// options, and -I<CUDA include dir> when one exists on this machine. Thread safe.
  /// Throws NvrtcError only for infrastructure failures; compile errors give record.ok == false.
  /// A request that prefetch() has queued or is compiling is waited for, not compiled twice.
  CompileOutput compile(const CompileRequest& req) const;

  /// Compiles `reqs` ahead, in order, on background threads (`threads`; 0: all cores but one, at least
  /// one), so that a later compile() of any of them is a cache hit or a short wait: NVRTC runs on every CPU
  /// core while the GPU measures. Results land in the disk cache, or without one in memory. Returns at once.
  /// Requests already compiled or queued are skipped. Compile errors are kept for compile() to report.
  void prefetch(std::vector<CompileRequest> reqs, unsigned threads = 0) const;
  /// Requests prefetch() has queued and not yet started.
  std::size_t prefetch_pending() const;

  /// The options compile() would pass for `req`, in order.
  static std::vector<std::string> options_for(const CompileRequest& req);
  /// The cache key compile() would use for `req`: hex hash of the source, the headers it can reach,
  /// the options, the arch, the NVRTC version and the name expression.
  static std::string cache_key(const CompileRequest& req);

  static std::string nvrtc_version();  ///< "13.0"
  const std::optional<std::filesystem::path>& cache_dir() const noexcept { return m_cache_dir; }

 private:
  static constexpr std::size_t kMemoBytes = std::size_t(256) << 20;

  struct Memo;
  // Compiles without looking at the memory cache or the queue (the disk cache is used).
  static CompileOutput compile_now(const CompileRequest& req, const std::string& key,
                                   const std::optional<std::filesystem::path>& cache_dir, Memo& memo);
  // compile_now, whose result or exception also goes to `promise`; the key then leaves memo.in_flight.
  // keep_for_first_taker (prefetch threads): the result also waits in memo.prefetched for compile().
  static CompileOutput compile_promised(const CompileRequest& req, const std::string& key,
                                        const std::optional<std::filesystem::path>& cache_dir, Memo& memo,
                                        std::promise<CompileOutput>& promise, bool keep_for_first_taker = false);
  static void prefetch_worker(Memo* memo, std::optional<std::filesystem::path> cache_dir);

  std::optional<std::filesystem::path> m_cache_dir;
  // Shared by copies of a compiler: what it compiled (memory cache), what it is compiling or will compile
  // (prefetch), and its background threads, joined when the last copy goes.
  struct Memo {
    std::mutex mutex;
    std::map<std::string, CompileOutput> entries;  // by cache key (only without a disk cache)
    std::size_t bytes = 0;
    std::map<std::string, std::shared_future<CompileOutput>> in_flight;  // queued or compiling, by key
    // Compiled by a prefetch thread and not yet asked for: the first compile() of the key gets it as it
    // was made (cache_hit false, compile_ms the NVRTC time), so that the time is recorded once, not lost.
    std::map<std::string, CompileOutput> prefetched;
    std::deque<std::pair<std::string, std::pair<CompileRequest, std::shared_ptr<std::promise<CompileOutput>>>>> queue;
    std::vector<std::thread> workers;
    unsigned busy_workers = 0;
    bool stop = false;
    ~Memo();
  };
  std::shared_ptr<Memo> m_memo = std::make_shared<Memo>();
};

/// $FLASHTUNE_CACHE_DIR, else $XDG_CACHE_HOME/flashtune, else $HOME/.cache/flashtune; nullopt when none
/// of these variables is set.
std::optional<std::filesystem::path> default_cache_dir();

}  // namespace flashtune::jit
