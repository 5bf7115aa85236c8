// tests/cuda/cublas_test.cpp (cpu): the cuBLAS loader on any machine. Absent files give one error that
// names every file tried and what to do; a library without cuBLAS's entry points is refused by name;
// the process-wide answer is consistent; gemm() refuses sizes cuBLAS cannot take and fails with a
// core::Error (never a crash) without a driver or a current context.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>

#include "harness/cuda/cublas.hpp"
#include "harness/cuda/driver.hpp"

using namespace flashtune;

TEST(Cublas, AbsentLibraryGivesAClearErrorNamingEveryFileTried) {
  const auto r = cuda::probe_cublas({"/nonexistent/libcublas.so.13", "libcublas_flashtune_absent.so.12"});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.path.empty());
  EXPECT_NE(r.why.find("cuBLAS not found"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("/nonexistent/libcublas.so.13"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("libcublas_flashtune_absent.so.12"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("LD_LIBRARY_PATH"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("attn_naive"), std::string::npos) << r.why << ": say who needs it";

  const auto none = cuda::probe_cublas({});
  EXPECT_FALSE(none.ok);
  EXPECT_NE(none.why.find("no candidate files"), std::string::npos) << none.why;
}

TEST(Cublas, ALibraryWithoutCublasEntryPointsIsRefused) {
  const auto r = cuda::probe_cublas({"libm.so.6"});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.why.find("libm.so.6: loaded but lacks cublasCreate_v2"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("cublasGemmStridedBatchedEx"), std::string::npos) << r.why;
}

TEST(Cublas, CandidatesTryTheSonamesFirstThenTheToolkit) {
  const auto c = cuda::cublas_library_candidates();
  ASSERT_GE(c.size(), 6u);
  EXPECT_EQ(c[0], "libcublas.so.13");
  EXPECT_EQ(c[1], "libcublas.so.12");
  EXPECT_EQ(c[2], "libcublas.so");
  EXPECT_NE(std::find(c.begin(), c.end(), "/usr/local/cuda/lib64/libcublas.so.13"), c.end());
}

TEST(Cublas, ProcessWideAnswerIsConsistent) {
  std::string why = "untouched";
  const bool available = cuda::cublas_available(&why);
  EXPECT_EQ(cuda::cublas_available(), available);
  EXPECT_EQ(cuda::probe_cublas(cuda::cublas_library_candidates()).ok, available);
  if (available) {
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_FALSE(cuda::cublas_library().path.empty());
    EXPECT_GE(cuda::cublas_library().version, 110000);  // cuBLAS 11.0 or newer
  } else {
    EXPECT_NE(why.find("cuBLAS not found"), std::string::npos) << why;
    try {
      cuda::cublas_library();
      ADD_FAILURE() << "cublas_library() must throw without cuBLAS";
    } catch (const core::Error& e) {
      EXPECT_EQ(std::string(e.what()), why);
    }
  }
}

TEST(Cublas, GemmRefusesSizesBeyondCublasInts) {
  cuda::StridedBatchedGemm g;
  g.m = std::int64_t(INT_MAX) + 1, g.n = 1, g.k = 1, g.lda = g.ldb = g.ldc = 1;
  try {
    cuda::gemm(g, nullptr);
    ADD_FAILURE() << "m > INT_MAX accepted";
  } catch (const core::Error& e) {
    const std::string what = e.what();
    // Without cuBLAS the loader's error comes first; with it, the size is refused before any call.
    if (cuda::cublas_available()) EXPECT_NE(what.find("m = 2147483648 does not fit"), std::string::npos) << what;
    else EXPECT_NE(what.find("cuBLAS not found"), std::string::npos) << what;
  }
}

TEST(Cublas, GemmWithoutDriverOrContextIsAnError) {
  cuda::StridedBatchedGemm g;
  g.m = g.n = g.k = 1, g.lda = g.ldb = g.ldc = 1;
  // No cuda::Context exists in this process: whatever is missing (cuBLAS, the driver, a current
  // context) is reported as a core::Error, and nothing is launched.
  EXPECT_THROW(cuda::gemm(g, nullptr), core::Error);
}

TEST(Cublas, ErrorNamesTheCallAndTheStatus) {
  const cuda::CublasError e(13, "cublasGemmStridedBatchedEx(m 1, n 2, k 3, batch 4)", "x.cpp", 7);
  const std::string what = e.what();
  EXPECT_EQ(e.status(), 13);
  EXPECT_NE(what.find("cublasGemmStridedBatchedEx(m 1, n 2, k 3, batch 4) failed"), std::string::npos) << what;
  EXPECT_NE(what.find("x.cpp:7"), std::string::npos) << what;
  // With the library: its name for status 13; without: the number.
  if (cuda::cublas_available()) EXPECT_NE(what.find("CUBLAS_STATUS_EXECUTION_FAILED"), std::string::npos) << what;
  else EXPECT_NE(what.find("13"), std::string::npos) << what;
}
