// tests/results/backward_table_test.cpp: `query backward`'s table (cli::backward_end_to_end) is driven by the
// backward's ways as kernels/attn_bwd_ways.hpp declares them: one column per stage of any way, and the sum of the
// fastest complete way (+ dsink with learned sinks).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/cli/results.hpp"
#include "harness/kernels/attn_bwd_ways.hpp"

namespace {

using flashtune::cli::TrialRow;

TrialRow trial(const std::string& family, double ms, const std::string& problem) {
  TrialRow t;
  t.family = family, t.stage = family, t.problem = problem, t.gpu = "H100", t.status = "ok", t.median_ms = ms;
  t.config = "block_m=64", t.run_id = 1;
  t.shape.dims = {{"batch", 1}, {"heads_q", 64}, {"heads_kv", 8}, {"seq_q", 4096}, {"head_dim", 64}, {"causal", 1},
                  {"window", 128}, {"learned_sinks", 1}};
  t.shape.dtype = flashtune::core::DType::bf16;
  return t;
}

}  // namespace

TEST(BackwardTable, HasAColumnPerDeclaredStageAndSumsTheFastestWay) {
  namespace ways = flashtune::kernels::attn_bwd;
  std::vector<std::string> expected = {"problem", "gpu", "fwd_ms"};
  for (const auto& way : ways::ways())
    for (const auto& f : way)
      if (std::find(expected.begin(), expected.end(), f.substr(9) + "_ms") == expected.end())
        expected.push_back(f.substr(9) + "_ms");
  expected.push_back("dsink_ms");

  const std::string p = "batch=1,causal=1,head_dim=64,heads_kv=8,heads_q=64,learned_sinks=1,seq_q=4096,window=128,dtype=bf16";
  // preprocess + dkdv + dq = 0.9; dq_delta + dkdv = 0.7 (the way taken); preprocess + fused = 0.8
  const std::vector<TrialRow> trials = {trial("attn_fwd", 0.2, p),          trial("attn_bwd_preprocess", 0.1, p),
                                        trial("attn_bwd_dkdv", 0.4, p),     trial("attn_bwd_dq", 0.4, p),
                                        trial("attn_bwd_dq_delta", 0.3, p), trial("attn_bwd_fused", 0.7, p),
                                        trial("attn_bwd_dsink", 0.01, p)};
  const auto t = flashtune::cli::backward_end_to_end(trials);
  ASSERT_GE(t.columns.size(), expected.size());
  EXPECT_EQ(std::vector<std::string>(t.columns.begin(), t.columns.begin() + std::ptrdiff_t(expected.size())), expected);
  ASSERT_EQ(t.rows.size(), 1u);
  const auto col = [&](const std::string& name) {
    return t.rows[0][std::size_t(std::find(t.columns.begin(), t.columns.end(), name) - t.columns.begin())];
  };
  EXPECT_EQ(std::stod(col("bwd_ms")), 0.71);
  EXPECT_EQ(std::stod(col("fwd_bwd_ms")), 0.91);
  EXPECT_EQ(std::stod(col("dq_delta_ms")), 0.3);
  EXPECT_EQ(std::stod(col("dsink_ms")), 0.01);
  EXPECT_NE(col("configs").find("dq_delta: block_m=64"), std::string::npos) << col("configs");
  EXPECT_EQ(col("configs").find("preprocess:"), std::string::npos) << "a stage outside the summed way is listed";
}
