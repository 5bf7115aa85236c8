// tests/results/grade_test.cpp: flashtune grade on the fixture database: the grader's pass/fail lines per
// test case, the failing GQA case with its reason, and the benchmark table against attn_naive and attn_eager.
#include <gtest/gtest.h>

#include "tests/results/results_fixture.hpp"

using namespace ft_results_test;

TEST(Grade, PrintsTheGradersLinesAndTheBenchmarkAgainstNaive) {
  Temp tmp("grade");
  const std::string db = (tmp.dir / "r.sqlite").string();
  FixtureDb fx(db);
  const auto r = run_cli("grade --db " + db);
  ASSERT_EQ(r.status, 1) << "the fixture's P5 case failed\n" << r.out;
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
  EXPECT_NE(o.find("attn_fwd is 40.00x faster than attn_naive.\nattn_fwd uses 256.00x less memory than attn_naive.\n"),
            std::string::npos)
      << o;
  EXPECT_EQ(o.find("Problem 2"), std::string::npos) << "no weighted_row_sum trials in the fixture";
}

// The seeds' table (B1 H16 L4096 D16 fp16, non-causal): PyTorch (Naive) 10.6512 ms and 3.0162 GB, Triton
// 0.2424 ms and 0.0157 GB, "43.94x faster", "191.54x less memory". attn_eager's row comes first, with the
// byte count its workspace model gives on that shape (attn_eager_test.cpp), and each baseline gets its lines.
TEST(Grade, ListsAttnEagerAsPyTorchBesideAttnNaive) {
  Temp tmp("grade_eager");
  const std::string db = (tmp.dir / "g.sqlite").string();
  {
    flashtune::db::Store store(db);
    const auto run = begin_fixture_run(store);
    const auto p = attn_problem(4096, 0);
    const flashtune::core::Config threads{{{"block_threads", 256}}};
    store.record_trial(make_trial(run, "attn_fwd", p, attn_config(64, 64, 4), TrialStatus::ok, 0.2424, 0.01, 16908288));
    store.record_trial(make_trial(run, "attn_eager", p, threads, TrialStatus::ok, 10.6512, 0.01, 3238658112));
    store.record_trial(make_trial(run, "attn_naive", p, threads, TrialStatus::ok, 0.75, 0.01, 545259520));
    store.finish_run(run, "finished");
  }
  const auto r = run_cli("grade --db " + db);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string& o = r.out;
  EXPECT_NE(o.find("attn_eager (PyTorch)      | 10.6512              | 3.0162              \n"
                   "attn_naive (naive)        | 0.7500               | 0.5078              \n"
                   "attn_fwd (flashtune)      | 0.2424               | 0.0157              \n"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("attn_fwd is 43.94x faster than attn_eager.\nattn_fwd uses 191.54x less memory than attn_eager.\n"
                   "attn_fwd is 3.09x faster than attn_naive.\nattn_fwd uses 32.25x less memory than attn_naive.\n"),
            std::string::npos)
      << o;
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

// Stages 8 and 9 (the optional grader): per case the forward and every gradient, failures named, the tuned
// forward + backward; a failed check makes the command exit 1.
TEST(Grade, BackwardStagesCheckEveryGradientAndSumTheTunedStages) {
  Temp tmp("grade_bwd");
  const std::string db = (tmp.dir / "b.sqlite").string();
  {
    flashtune::db::Store store(db);
    const auto run = begin_fixture_run(store);
    auto rec = [&](const std::string& family, const flashtune::core::Problem& p, TrialStatus st, double ms) {
      store.record_trial(make_trial(run, family, p, attn_config(64, 64, 4), st, ms));
    };
    auto gqa = attn_problem(4096, 1, 1);  // stage 8
    gqa.dims["learned_sinks"] = 0;
    auto swa = attn_problem(4096, 1, 1, 256, 4);  // stage 9
    swa.dims["learned_sinks"] = 1;
    for (const auto& p : {gqa, swa}) {
      rec("attn_fwd", p, TrialStatus::ok, 0.03);
      rec("attn_bwd_preprocess", p, TrialStatus::ok, 0.005);
      rec("attn_bwd_dkdv", p, TrialStatus::ok, 0.13);
      rec("attn_bwd_dq", p, TrialStatus::ok, 0.03);
    }
    rec("attn_bwd_dsink", swa, TrialStatus::incorrect, 0);
    store.finish_run(run, "finished");
  }
  const auto r = run_cli("grade --db " + db);
  EXPECT_EQ(r.status, 1) << "a failed gradient check fails the command\n" << r.out;
  const std::string& o = r.out;
  EXPECT_NE(o.find("--- Running Autograder for Problem 8: GQA Backward Pass ---\n"
                   "Running test case: batch=1, heads_q=16, heads_kv=1, seq_len=4096, dim=16, causal=1 on NVIDIA H200\n"
                   "\u2705 Forward Pass Results match\n"
                   "\u2705 Backward Pass Results on D = rowsum(dO * O) match\n"
                   "\u2705 Backward Pass Results on dQ match\n"
                   "\u2705 Backward Pass Results on dK match\n"
                   "\u2705 Backward Pass Results on dV match\n"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("flashtune backward (3 stages)       | 0.1650 "), std::string::npos) << o;
  EXPECT_NE(o.find("flashtune forward + backward        | 0.1950 "), std::string::npos) << o;
  EXPECT_NE(o.find("All P8 checks passed!"), std::string::npos) << o;
  EXPECT_NE(o.find("Problem 9: GQA + SWDA + Attention Sinks Backward Pass"), std::string::npos) << o;
  EXPECT_NE(o.find("window_size=256, sink_size=4, learned_sinks=1"), std::string::npos) << o;
  EXPECT_NE(o.find("\u274c Backward Pass Results on dSink do not match: attn_bwd_dsink incorrect"), std::string::npos) << o;
  EXPECT_NE(o.find("P9: 5 checks passed, 1 failed, 0 not run."), std::string::npos) << o;
  EXPECT_EQ(o.find("Problem 3"), std::string::npos) << "the forward of a backward case is graded with it";
}
