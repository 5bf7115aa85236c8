// tests/experiment/experiment_files_test.cpp: every experiments/**/*.yaml loads and checks cleanly against
// the built-in kernel families, so a broken experiment file fails CI before anyone runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "harness/experiment/experiment.hpp"

namespace fs = std::filesystem;
namespace fx = flashtune::experiment;

TEST(ExperimentFiles, EveryShippedExperimentLoads) {
  const fs::path dir = fs::path(FT_SOURCE_DIR) / "experiments";
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) GTEST_SKIP() << "no *.yaml in " << dir;
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    try {
      const fx::Experiment ex = fx::load_experiment(f);
      EXPECT_FALSE(ex.name.empty());
      ASSERT_FALSE(ex.studies.empty());
      for (const auto& st : ex.studies) {
        ASSERT_NE(st.kernel, nullptr);
        EXPECT_FALSE(st.problems.empty());
        EXPECT_FALSE(fx::candidates(st, st.problems.front()).empty());
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

// Issue 23: sink_bias (learned sink logits drawn from [b - 1, b + 1]) was refused below 0, so negative
// learned sinks could not be tested. Any integer is taken now; keys of existing problems are unchanged,
// and the dims that are sizes or derived from others still refuse what they did.
TEST(ExperimentFiles, AttentionTakesANegativeSinkBias) {
  const std::string head = "name: sinks\nstudies:\n  - family: attn_fwd\n    problems:\n      - ";
  const auto ex = fx::parse_experiment(
      head + "{batch: 1, heads_q: 2, seq_q: 64, head_dim: 64, dtype: bf16, learned_sinks: 1, sink_bias: [-20, 0, 3]}\n",
      "sinks.yaml");
  ASSERT_EQ(ex.studies.at(0).problems.size(), 3u);
  const auto& negative = ex.studies[0].problems[0];
  EXPECT_EQ(negative.at("sink_bias"), -20);
  EXPECT_NE(negative.key().find("sink_bias=-20"), std::string::npos) << negative.key();
  EXPECT_NE(ex.studies[0].problems[1].key().find("sink_bias=0,"), std::string::npos);  // the key it always had
  // The sinks are drawn from [b - 1, b + 1].
  for (const auto& b : ex.studies[0].kernel->buffers(negative))
    if (b.name == "sinks") EXPECT_EQ(std::make_pair(b.lo, b.hi), std::make_pair(-21.0, -19.0));
  auto error_of = [&](const std::string& problem) -> std::string {
    try {
      fx::parse_experiment(head + problem + "\n", "sinks.yaml");
    } catch (const flashtune::core::UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("{batch: 1, heads_q: 2, seq_q: 64, head_dim: 64, window: -1}").find("window must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of("{batch: 1, heads_q: 2, seq_q: 64, head_dim: 64, heads_kv: -2}").find("must be >= 0, got -2"),
            std::string::npos);
  EXPECT_NE(error_of("{batch: 0, heads_q: 2, seq_q: 64, head_dim: 64}").find("must be >= 1 (a size), got 0"),
            std::string::npos);
}
