// harness/core/types.hpp: the value types every layer shares (Problem, Config, DType, TrialStatus,
// TrialResult, DeviceLimits, settings). Standard library only: no CUDA, no SQLite, no YAML here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace flashtune::core {

// ---------------------------------------------------------------------------------------------
// Errors. Error is any failure; UserError is a user's mistake (bad YAML, unknown kernel, bad flag):
// main prints its one line and exits with status 2.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class UserError : public Error {
 public:
  using Error::Error;
};

// ---------------------------------------------------------------------------------------------
enum class DType { f32, f16, bf16 };
std::string_view to_string(DType d);
std::optional<DType> parse_dtype(std::string_view s);  ///< "f32"/"fp32"/"float32", "f16"/"fp16", "bf16"
std::size_t dtype_size(DType d);                        ///< [bytes] per element

// ---------------------------------------------------------------------------------------------
// Problem: one shape of work. Named integer dimensions (rows, cols, batch, heads_q, ...) and a dtype.
struct Problem {
  std::map<std::string, std::int64_t> dims;
  DType dtype = DType::f32;

  std::int64_t at(const std::string& name) const;  ///< throws Error when the dimension is missing
  std::int64_t get(const std::string& name, std::int64_t fallback) const;
  std::string key() const;  ///< canonical and stable: "cols=4096,rows=16384,dtype=f32"
  bool operator==(const Problem&) const = default;
};

// Config: named integer values for a family's tunables.
struct Config {
  std::map<std::string, std::int64_t> values;

  std::int64_t at(const std::string& name) const;  ///< throws Error when the tunable is missing
  /// The tunable's value, or `fallback` when the config has none (configs older than the tunable).
  std::int64_t get(const std::string& name, std::int64_t fallback) const {
    const auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
  std::string key() const;                          ///< canonical and stable: "block=256,vec=4"
  bool operator==(const Config&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Outcome of a trial. `compiled` is the success status of a compile-only trial (no GPU).
enum class TrialStatus {
  ok,
  compiled,
  invalid_config,
  compile_failed,
  resource_exceeded,
  launch_failed,
  incorrect,
  timeout,
  crashed,
};
std::string_view to_string(TrialStatus s);
std::optional<TrialStatus> parse_trial_status(std::string_view s);

// Resources of one compiled kernel, from the ptxas report or the loaded function. -1: unknown.
struct KernelResources {
  int registers = -1;            ///< per thread
  int spill_store_bytes = -1;    ///< [bytes]
  int spill_load_bytes = -1;     ///< [bytes]
  int stack_frame_bytes = -1;    ///< [bytes] per thread
  int shared_static_bytes = -1;  ///< [bytes] static __shared__ per block
  int constant_bytes = -1;       ///< [bytes]
};

struct CompileRecord {
  bool ok = false;
  bool cache_hit = false;
  std::string arch;            ///< "sm_90a"
  std::string options;         ///< NVRTC options, space separated
  std::string name_expression; ///< "weighted_row_sum_kernel<float, 256, 4>"
  std::string lowered_name;    ///< mangled name of the instantiation
  std::string cache_key;       ///< hex hash of source, options, arch, NVRTC version, name expression
  std::string log;             ///< NVRTC log incl. the ptxas report
  KernelResources resources;
  double compile_ms = 0;       ///< [ms] wall time of the NVRTC call (0 on a cache hit)
  std::size_t cubin_bytes = 0; ///< [bytes]
};

struct Timing {
  std::vector<double> samples_ms;  ///< [ms] every sample, in order
  double median_ms = 0, iqr_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0;
  double rel_stdev = 0;   ///< stdev / mean of the samples
  bool converged = false; ///< the noise target was reached before the budget ran out
  bool cold = true;       ///< L2 flushed before each sample
  bool stopped_early = false; ///< measurement abandoned against an incumbent (tuner early exit)
  /// While the samples ran (NVML polled every 2 ms; nullopt without NVML): the mean SM clock [MHz] and the
  /// fraction [0, 1] of polls with the power cap holding the clock down (SW power cap or HW power brake).
  std::optional<double> sm_clock_mhz, power_capped;
};

struct Validation {
  bool checked = false;
  double max_abs_err = 0;      ///< max |out - ref64|
  double max_rel_err = 0;      ///< max |out - ref64| / max(|ref64|, tiny)
  double naive_err = 0;        ///< max |naive same precision - ref64|
  double tolerance = 0;        ///< 2 * naive_err + atol
  std::int64_t nan_count = 0;  ///< NaN or Inf in the output (includes unwritten poisoned elements)
  bool passed = false;
};

struct TrialResult {
  TrialStatus status = TrialStatus::ok;
  std::string reason;  ///< why it is not ok (empty when ok)
  std::optional<CompileRecord> compile;
  std::optional<Timing> timing;
  std::optional<Validation> validation;
  double gbps = 0;    ///< [GB/s] family bytes / median time (0 when not measured)
  double tflops = 0;  ///< [TFLOP/s] family flops / median time
  /// [bytes] device memory the trial allocated (inputs, outputs, workspaces; library-internal
  /// workspaces such as cuBLAS's are not seen); 0 when nothing was allocated (compile-only).
  std::int64_t device_bytes = 0;
};

// ---------------------------------------------------------------------------------------------
// What a config is checked against before compiling (can_run) and after (resources).
struct DeviceLimits {
  std::string arch = "sm_90a";          ///< NVRTC target
  int sm_major = 9, sm_minor = 0;
  int num_sms = 132;
  int max_threads_per_block = 1024;
  int max_shared_per_block = 48 * 1024;          ///< [bytes] without opt-in
  int max_shared_per_block_optin = 227 * 1024;   ///< [bytes] with cuFuncSetAttribute
  int max_shared_per_sm = 228 * 1024;            ///< [bytes]
  int max_regs_per_block = 65536;
  int max_regs_per_thread = 255;
  std::int64_t l2_bytes = 50 * 1024 * 1024;      ///< [bytes]

  static DeviceLimits for_arch(const std::string& arch);  ///< table for sm_80/86/89/90/90a; throws UserError otherwise
};

// ---------------------------------------------------------------------------------------------
// Settings read from the experiment YAML.
struct MeasureSettings {
  bool cold = true;            ///< flush L2 before each sample
  int warmup = 3;              ///< launches before the first sample
  /// [s] of kernel time the warm-up lasts at least (launches past `warmup`, as many as the first one's time says):
  /// a card that slows under sustained load (an H100 at its power cap: 1980 -> ~1700 MHz within ~25 ms of the
  /// Hopper backward, docs/NOTES.md session 24) is then sampled in the steady state its peers' benchmarks see.
  /// 0: the `warmup` launches only.
  double warmup_s = 0;
  int min_samples = 10;
  int max_samples = 500;
  double noise_target = 0.01;  ///< stop once stdev/mean of the samples is below this
  double min_time_s = 0.02;    ///< [s] of kernel time before the noise test applies
  double max_time_s = 1.0;     ///< [s] of wall time per trial, whatever the noise
  double watchdog_s = 10.0;    ///< [s] per launch waited for: past it the trial is a timeout (0: no watchdog)
};

struct ValidateSettings {
  bool enabled = true;
  std::uint64_t seed = 0;  ///< 0: a fresh seed per trial (recorded); else the first trial's seed
  double atol = -1;        ///< < 0: the family's default
};

struct StrategySettings {
  std::string name = "exhaustive";
  std::int64_t budget_trials = 0;  ///< 0: no limit
  double budget_seconds = 0;       ///< 0: no limit
  std::uint64_t seed = 1;
  std::map<std::string, double> options;  ///< the strategy's own settings (tuner::strategy_options); absent: default
  double early_exit = 0;     ///< k > 1: stop measuring a config once its median > k x the best so far; 0: off
  int finalists = 3;         ///< re-measure the fastest this many interleaved before naming a winner; <= 1: off
  int finalist_rounds = 5;   ///< rounds of the interleaved re-measurement (A B C, B C A, C A B, ...)
  double tie_band = 0.01;    ///< finalists within this fraction (or their noise) of the fastest tie with it
};

// ---------------------------------------------------------------------------------------------
// Stable 64-bit FNV-1a hash, printed as 16 hex digits. Used for cache keys and source hashes.
std::uint64_t fnv1a64(std::string_view data, std::uint64_t seed = 0xcbf29ce484222325ULL);
std::string hex64(std::uint64_t v);
std::string hash_hex(std::string_view data);  ///< hex64(fnv1a64(data))

}  // namespace flashtune::core
