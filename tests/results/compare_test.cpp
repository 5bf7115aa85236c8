// tests/results/compare_test.cpp: `query compare`'s table (cli::compare_runs) with the trials' SM clocks: each row's
// a_mhz / b_mhz and the cycle difference (median x clock), and the summary's clock and cycle ratios over the configs
// whose trials both carry a clock; trials without one leave those columns empty.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "harness/cli/results.hpp"

namespace {

using flashtune::cli::TrialRow;

TrialRow trial(std::int64_t run, const std::string& config, double ms, std::optional<double> mhz) {
  TrialRow t;
  t.family = t.stage = "attn_bwd_fused", t.problem = "batch=2,head_dim=128", t.gpu = "H200", t.status = "ok";
  t.config = config, t.run_id = run, t.median_ms = ms, t.rel_stdev = 0.001, t.sm_clock_mhz = mhz;
  return t;
}

std::string cell(const flashtune::cli::Table& t, std::size_t row, const std::string& column) {
  for (std::size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c] == column) return t.rows.at(row).at(c);
  ADD_FAILURE() << "no column " << column;
  return "";
}

}  // namespace

TEST(CompareRuns, CarriesTheClocksAndTheCycleDifference) {
  // block_m=64: B 2 % faster at a 4 % higher clock (2 % more cycles); block_m=80: B at par, same clock;
  // block_m=128: no clock on A's trial (a run recorded before schema v7).
  const std::vector<TrialRow> a = {trial(1, "block_m=64", 5.0, 1700), trial(1, "block_m=80", 4.0, 1750),
                                   trial(1, "block_m=128", 6.0, std::nullopt)};
  const std::vector<TrialRow> b = {trial(2, "block_m=64", 4.9, 1768), trial(2, "block_m=80", 4.0, 1750),
                                   trial(2, "block_m=128", 6.0, 1800)};
  std::string summary;
  const auto t = flashtune::cli::compare_runs(a, b, &summary);
  ASSERT_EQ(t.rows.size(), 3u);
  // Rows are sorted by config key: block_m=128, block_m=64, block_m=80.
  EXPECT_EQ(cell(t, 1, "a_mhz"), "1700");
  EXPECT_EQ(cell(t, 1, "b_mhz"), "1768");
  EXPECT_EQ(cell(t, 1, "diff"), "-2.00%");
  EXPECT_EQ(cell(t, 1, "cycles_diff"), "+1.92%");  // 0.98 x 1.04 = 1.0192
  EXPECT_EQ(cell(t, 2, "cycles_diff"), "+0.00%");
  EXPECT_EQ(cell(t, 0, "a_mhz"), "");
  EXPECT_EQ(cell(t, 0, "b_mhz"), "1800");
  EXPECT_EQ(cell(t, 0, "cycles_diff"), "") << "one clock missing: no cycle difference";
  EXPECT_NE(summary.find("over 3 configs"), std::string::npos) << summary;
  EXPECT_NE(summary.find("clock ratio 1.02"), std::string::npos) << summary;  // sqrt(1.04 x 1) = 1.0198
  EXPECT_NE(summary.find("cycle ratio 1.01 "), std::string::npos) << summary;  // sqrt(1.0192 x 1) = 1.0095, 4 digits
  EXPECT_NE(summary.find("over the 2 with SM clocks"), std::string::npos) << summary;
}

TEST(CompareRuns, SaysNothingOfClocksWhenNoTrialHasOne) {
  const std::vector<TrialRow> a = {trial(1, "block_m=64", 5.0, std::nullopt)};
  const std::vector<TrialRow> b = {trial(2, "block_m=64", 4.0, std::nullopt)};
  std::string summary;
  const auto t = flashtune::cli::compare_runs(a, b, &summary);
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(cell(t, 0, "cycles_diff"), "");
  EXPECT_EQ(summary.find("clock ratio"), std::string::npos) << summary;
  EXPECT_NE(summary.find("geometric mean time ratio B/A 0.8"), std::string::npos) << summary;
}
