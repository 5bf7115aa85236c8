// tests/runtime/runtime_support.hpp: what the runtime's tests share: the handmade export of tests/data (configs valid
// on sm_90, medians that make preprocess + dkdv + dq the fastest way), copies of it with edited medians or entries,
// C shapes, and the C ABI's explain as JSON.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/flashtune_runtime.h"

namespace flashtune::testing {

inline std::filesystem::path runtime_configs() {
  return std::filesystem::path(FT_SOURCE_DIR) / "tests" / "data" / "runtime_configs.json";
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

/// `doc` (an export) written under the test's temporary folder as `name`.
inline std::filesystem::path write_configs(const std::string& name, const nlohmann::json& doc) {
  const auto dir = std::filesystem::temp_directory_path() / "flashtune_runtime_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << doc.dump(1);
  return path;
}

/// A copy of the test export with `edit` applied to each entry (return false to drop it), written under the test's
/// temporary folder as `name`.
inline std::filesystem::path edited_configs(const std::string& name, const std::function<bool(nlohmann::json&)>& edit) {
  auto doc = read_json(runtime_configs());
  nlohmann::json kept = nlohmann::json::array();
  for (auto& e : doc["entries"])
    if (edit(e)) kept.push_back(e);
  doc["entries"] = kept;
  return write_configs(name, doc);
}

// The test table plus an attn_bwd_fused_delta entry (the windowed sweep, mma 92: dK, dV, dQ and D in one pass, head_dim
// 64 under a causal window) for the problem of its first attn_bwd_dq_delta entry (GPT-OSS-like, bf16), at median_ms.
inline std::filesystem::path configs_with_sweep(const std::string& name, double median_ms) {
  auto doc = read_json(runtime_configs());
  for (const auto& e : doc["entries"])
    if (e["family"] == "attn_bwd_dq_delta") {
      auto sweep = e;
      sweep["family"] = "attn_bwd_fused_delta", sweep["stage"] = "backward_fused_delta";
      sweep["config"] = {{"block_m", 64}, {"block_n", 192}, {"dq_order", 1}, {"min_blocks", 1}, {"mma", 92},
                         {"num_stages", 2}, {"num_warps", 12}, {"unit_group", 1}};
      sweep["config_key"] = "block_m=64,block_n=192,dq_order=1,min_blocks=1,mma=92,num_stages=2,num_warps=12,unit_group=1";
      sweep["evidence"]["median_ms"] = median_ms;
      doc["entries"].push_back(sweep);
      break;
    }
  return write_configs(name, doc);
}

inline ft_attn_shape shape(std::int64_t batch, std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t sk,
                           std::int64_t d, int dtype, int causal = 0, int window = 0, int sink_tokens = 0, int sinks = 0) {
  ft_attn_shape s{};
  s.batch = batch, s.heads_q = hq, s.heads_kv = hkv, s.seq_q = sq, s.seq_k = sk, s.head_dim = d;
  s.causal = causal, s.window = window, s.sink_tokens = sink_tokens, s.learned_sinks = sinks, s.dtype = dtype;
  return s;
}

/// A runtime over `configs` with its CUBINs cached in the test's temporary folder; fails the test when it cannot.
inline ft_runtime* make_runtime(const std::filesystem::path& configs) {
  ft_runtime* rt = nullptr;
  const auto cache = std::filesystem::temp_directory_path() / "flashtune_runtime_test" / "cache";
  EXPECT_EQ(ft_runtime_create(configs.c_str(), cache.c_str(), &rt), FT_OK) << ft_last_error();
  return rt;
}

/// explain() as JSON; `arch` nullptr: on the current device. Fails the test on an error.
inline nlohmann::json explain(ft_runtime* rt, const ft_attn_shape& s, bool backward, const char* arch) {
  std::size_t needed = 0;
  std::string buf(1 << 16, '\0');
  const int rc = ft_attention_explain(rt, &s, backward, arch, buf.data(), buf.size(), &needed);
  EXPECT_EQ(rc, FT_OK) << ft_last_error();
  if (rc != FT_OK) return nlohmann::json();
  return nlohmann::json::parse(buf.c_str());
}

}  // namespace flashtune::testing
