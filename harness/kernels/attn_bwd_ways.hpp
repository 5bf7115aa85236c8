// harness/kernels/attn_bwd_ways.hpp: the ways the attention backward's stages combine into a whole backward, declared
// once for everything that sums, grades or runs one (cli/results.cpp's `query backward`, runtime/). A way lists its
// stages in launch order; together they read Q, K, V, O, dO and LSE and write dQ, dK, dV (and D on the way, a
// temporary). With learned sinks attn_bwd_dsink runs after any way (it reads D).
#pragma once

#include <string>
#include <vector>

namespace flashtune::kernels::attn_bwd {

/// The backward's ways, each a list of operation names in launch order.
inline const std::vector<std::vector<std::string>>& ways() {
  static const std::vector<std::vector<std::string>> kWays = {
      {"attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq"},
      {"attn_bwd_preprocess", "attn_bwd_fused"},
      {"attn_bwd_dq_delta", "attn_bwd_dkdv"},  // dQ and D first, then dK, dV from that D
      {"attn_bwd_fused_delta"},                 // all of it and D in one pass (the windowed sweep)
  };
  return kWays;
}

/// The stage that adds d(sinks) with learned sinks, after the way (it reads LSE and D).
inline constexpr const char* kDsinkStage = "attn_bwd_dsink";
/// The stages whose ways are one fused pass (dK, dV and dQ together; the second also D).
inline constexpr const char* kFusedStage = "attn_bwd_fused";
inline constexpr const char* kFusedDeltaStage = "attn_bwd_fused_delta";

}  // namespace flashtune::kernels::attn_bwd
