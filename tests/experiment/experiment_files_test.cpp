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
