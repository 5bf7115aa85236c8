// tests/results/grade_test.cpp: flashtune grade on the fixture database: the grader's pass/fail lines per
// test case, the failing GQA case with its reason, and the benchmark table against attn_naive.
#include <gtest/gtest.h>

#include "tests/results/results_fixture.hpp"

using namespace ft_results_test;

TEST(Grade, PrintsTheGradersLinesAndTheBenchmarkAgainstNaive) {
  Temp tmp("grade");
  const std::string db = (tmp.dir / "r.sqlite").string();
  FixtureDb fx(db);
  const auto r = run_cli("grade --db " + db);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string& o = r.out;
  EXPECT_NE(o.find("--- Running Autograder for Problem 3: Non-Causal Flash Attention ---\n"
                   "\u2705 P3 Correctness Test Passed! (B=1, H=16, L=1024, D=16) on NVIDIA H200\n"
                   "\u2705 P3 Correctness Test Passed! (B=1, H=16, L=4096, D=16) on NVIDIA H200\n\n"
                   "All P3 correctness tests passed!\n"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("Problem 4: Causal Flash Attention"), std::string::npos) << o;
  EXPECT_NE(o.find("\u274c P5 Correctness Test Failed! (B=1, Hq=16, Hkv=4, L=1024, D=16, causal=0) on NVIDIA H200: incorrect"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("P5: 0 passed, 1 failed, 0 not run."), std::string::npos) << o;
  // L = 4096 non-causal: naive 16 ms and 1 GiB, attn_fwd 0.4 ms and 4 MiB
  EXPECT_NE(o.find("Benchmark Config: B=1, H=16, L=4096, D=16, Causal=False, GPU=NVIDIA H200\n"), std::string::npos) << o;
  EXPECT_NE(o.find("Implementation            | Avg Time (ms)        | Peak Memory (GB)    \n"), std::string::npos) << o;
  EXPECT_NE(o.find("attn_naive (naive)        | 16.0000              | 1.0000              \n"
                   "attn_fwd (flashtune)      | 0.4000               | 0.0039              \n"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("attn_fwd is 40.00x faster than attn_naive.\nattn_fwd uses 256.00x less memory.\n"), std::string::npos) << o;
  EXPECT_EQ(o.find("Problem 2"), std::string::npos) << "no weighted_row_sum trials in the fixture";
}

TEST(Grade, SaysWhatToRunOnAnEmptyDatabase) {
  Temp tmp("grade_empty");
  const std::string db = (tmp.dir / "e.sqlite").string();
  { flashtune::db::Store store(db); }
  const auto r = run_cli("grade --db " + db);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("no trials of a GStar stage"), std::string::npos) << r.out;
  EXPECT_EQ(run_cli("grade --db " + (tmp.dir / "missing.sqlite").string()).status, 2);
}
