// harness/core/types.cpp: string forms, lookups and hashes of the core value types.
#include "harness/core/types.hpp"

#include <cstdio>

namespace flashtune::core {

std::string_view to_string(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  return std::nullopt;
}

std::size_t dtype_size(DType d) { return d == DType::f32 ? 4 : 2; }

namespace {
std::string join_map(const std::map<std::string, std::int64_t>& m) {
  std::string out;
  for (const auto& [k, v] : m) {
    if (!out.empty()) out += ',';
    out += k + '=' + std::to_string(v);
  }
  return out;
}
}  // namespace

std::int64_t Problem::at(const std::string& name) const {
  auto it = dims.find(name);
  if (it == dims.end()) throw Error("problem " + key() + " has no dimension '" + name + "'");
  return it->second;
}
std::int64_t Problem::get(const std::string& name, std::int64_t fallback) const {
  auto it = dims.find(name);
  return it == dims.end() ? fallback : it->second;
}
std::string Problem::key() const {
  std::string k = join_map(dims);
  return k + (k.empty() ? "" : ",") + "dtype=" + std::string(to_string(dtype));
}

std::int64_t Config::at(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) throw Error("config " + key() + " has no tunable '" + name + "'");
  return it->second;
}
std::string Config::key() const { return join_map(values); }

std::string_view to_string(TrialStatus s) {
  switch (s) {
    case TrialStatus::ok: return "ok";
    case TrialStatus::compiled: return "compiled";
    case TrialStatus::invalid_config: return "invalid_config";
    case TrialStatus::compile_failed: return "compile_failed";
    case TrialStatus::resource_exceeded: return "resource_exceeded";
    case TrialStatus::launch_failed: return "launch_failed";
    case TrialStatus::incorrect: return "incorrect";
    case TrialStatus::timeout: return "timeout";
    case TrialStatus::crashed: return "crashed";
  }
  return "?";
}

std::optional<TrialStatus> parse_trial_status(std::string_view s) {
  for (auto st : {TrialStatus::ok, TrialStatus::compiled, TrialStatus::invalid_config,
                  TrialStatus::compile_failed, TrialStatus::resource_exceeded, TrialStatus::launch_failed,
                  TrialStatus::incorrect, TrialStatus::timeout, TrialStatus::crashed})
    if (to_string(st) == s) return st;
  return std::nullopt;
}

DeviceLimits DeviceLimits::for_arch(const std::string& arch) {
  DeviceLimits d;
  d.arch = arch;
  if (arch == "sm_90a" || arch == "sm_90") {
    d.sm_major = 9, d.sm_minor = 0, d.num_sms = 132;
    d.max_shared_per_block_optin = 227 * 1024, d.max_shared_per_sm = 228 * 1024, d.l2_bytes = 50 << 20;
  } else if (arch == "sm_80") {
    d.sm_major = 8, d.sm_minor = 0, d.num_sms = 108;
    d.max_shared_per_block_optin = 163 * 1024, d.max_shared_per_sm = 164 * 1024, d.l2_bytes = 40 << 20;
  } else if (arch == "sm_86" || arch == "sm_89") {
    d.sm_major = 8, d.sm_minor = arch == "sm_86" ? 6 : 9, d.num_sms = arch == "sm_86" ? 84 : 128;
    d.max_shared_per_block_optin = 99 * 1024, d.max_shared_per_sm = 100 * 1024, d.l2_bytes = arch == "sm_86" ? 6 << 20 : 72 << 20;
  } else {
    throw UserError("unknown target arch '" + arch + "' (known: sm_80, sm_86, sm_89, sm_90, sm_90a)");
  }
  return d;
}

std::uint64_t fnv1a64(std::string_view data, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string hash_hex(std::string_view data) { return hex64(fnv1a64(data)); }

}  // namespace flashtune::core
