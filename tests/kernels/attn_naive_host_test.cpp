// tests/kernels/attn_naive_host_test.cpp (cpu): the attn_naive pipeline with its middle step, the softmax
// kernel of kernel_templates/attn_naive.cuh, compiled as host C++ (tests/kernels/host_cuda_shim.hpp) and
// run a thread per CUDA thread; the two GEMMs are done on the host as cuBLAS does them (fp32 sums, S and
// O rounded to the dtype). Every mask (causal with rows that see no key, window, sink tokens), GQA,
// learned sinks, 16-byte and element-wise rows, several rows per block (grid stride), in fp32 and bf16,
// must match the reference under the family's tolerance; masked probabilities must be exactly 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>

#include "harness/kernels/family.hpp"
#include "harness/kernels/attention.hpp"
#include "reference/attention.hpp"
#include "reference/compare.hpp"
#include "tests/kernels/kernel_test_support.hpp"

#define __shared__ static
#include "tests/kernels/host_cuda_shim.hpp"
#include "kernel_templates/attn_naive.cuh"

namespace flashtune::kernels {
namespace {

core::Problem problem(core::DType d, std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t sk,
                      std::map<std::string, std::int64_t> extra = {}) {
  const KernelFamily& f = *find_family("attn_naive");
  core::Problem p{{{"batch", 1}, {"heads_q", hq}, {"heads_kv", hkv}, {"seq_q", sq}, {"seq_k", sk}, {"head_dim", 16}}, d};
  for (const auto& o : f.optional_problem_dims()) p.dims.emplace(o.name, o.fallback);
  for (const auto& [k, v] : extra) p.dims[k] = v;
  return p;
}

template <typename T, int kThreads, bool kCausal, bool kWindow, bool kSinks>
void check(const core::Problem& p, unsigned grid) {
  const KernelFamily& f = *find_family("attn_naive");
  const std::string what = p.key() + " threads " + std::to_string(kThreads) + " grid " + std::to_string(grid);
  ASSERT_EQ(f.check_problem(p), std::nullopt) << what;
  ASSERT_EQ(kCausal, p.get("causal", 0) != 0);
  ASSERT_EQ(kWindow, p.get("window", 0) > 0);
  ASSERT_EQ(kSinks, p.get("learned_sinks", 0) != 0);
  std::vector<HostTensor> in, ref64, naive;
  testing::make_tensors(f, p, 23, in, ref64);
  naive = ref64;
  f.reference(p, in, ref64, RefPrecision::f64);
  f.reference(p, in, naive, RefPrecision::same);

  const std::int64_t b = p.at("batch"), hq = p.at("heads_q"), hkv = p.at("heads_kv"), sq = p.at("seq_q");
  const std::int64_t sk = p.at("seq_k"), d = p.at("head_dim"), group = hq / hkv, rows = b * hq * sq;
  const auto& q = in[0].values;
  const auto& k = in[1].values;
  const auto& v = in[2].values;
  std::vector<float> sinks(in[3].values.begin(), in[3].values.end());

  // S = scale * Q K^T as the GEMM makes it: fp32 sums, scaled, rounded to the dtype.
  const float scale = float(1.0 / std::sqrt(double(d)));
  std::vector<double> s(std::size_t(rows * sk));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t bh = r / sq, kv = (bh / hq * hkv + bh % hq / group) * sk * d;
    for (std::int64_t j = 0; j < sk; ++j) {
      float acc = 0;
      for (std::int64_t e = 0; e < d; ++e) acc += float(q[std::size_t(r * d + e)]) * float(k[std::size_t(kv + j * d + e)]);
      s[std::size_t(r * sk + j)] = double(scale * acc);
    }
  }
  const auto packed = reference::pack(p.dtype, s);
  std::vector<T> st(s.size());
  std::memcpy(st.data(), packed.data(), packed.size());
  std::vector<float> lse(std::size_t(rows), std::nanf(""));

  // The family's own argument, packed as the runner packs it, with host addresses for the buffers.
  std::vector<std::uint64_t> addresses(f.buffers(p).size(), 0);
  addresses.back() = reinterpret_cast<std::uint64_t>(st.data());  // S, the workspace
  addresses[kernels::attn::kLse] = reinterpret_cast<std::uint64_t>(lse.data());
  addresses[kernels::attn::kSinks] = reinterpret_cast<std::uint64_t>(sinks.data());
  const auto args = kernels::pack_kernel_args(f.arguments(core::Config{{{"block_threads", kThreads}}}, p), addresses);
  ASSERT_EQ(args.values.size(), 1u);
  FtAttnNaiveParams<T> params;
  std::memcpy(&params, args.values[0].data(), sizeof params);
  ASSERT_EQ(params.rows, rows);
  ASSERT_EQ(params.s, st.data());
  ft_host::launch(dim3{grid, 1, 1}, kThreads,
                  [&] { attn_naive_softmax_kernel<T, kThreads, kCausal, kWindow, kSinks>(params); });
  const auto pr = reference::unpack(p.dtype, st.data(), st.size());

  // O = P V as the GEMM makes it; masked keys must have P exactly 0.
  const auto shape = reference::AttnShape{b, hq, hkv, sq, sk, d, p.get("causal", 0) != 0, p.get("window", 0),
                                          p.get("sink_tokens", 0), p.get("learned_sinks", 0) != 0, 0.0};
  std::vector<double> o(std::size_t(rows * d));
  int masked = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t bh = r / sq, i = r % sq, kv = (bh / hq * hkv + bh % hq / group) * sk * d;
    for (std::int64_t j = 0; j < sk; ++j)
      if (!reference::attn_visible(shape, i, j)) {
        ++masked;
        ASSERT_EQ(pr[std::size_t(r * sk + j)], 0.0) << what << " row " << r << " key " << j;
      }
    for (std::int64_t e = 0; e < d; ++e) {
      float acc = 0;
      for (std::int64_t j = 0; j < sk; ++j) acc += float(pr[std::size_t(r * sk + j)]) * float(v[std::size_t(kv + j * d + e)]);
      o[std::size_t(r * d + e)] = double(acc);
    }
  }
  reference::round_all(p.dtype, o);
  const double atol = f.default_atol(p);
  const auto vo = reference::compare(o, ref64[0].values, naive[0].values, atol);
  const auto vl = reference::compare(std::vector<double>(lse.begin(), lse.end()), ref64[1].values, naive[1].values, atol);
  EXPECT_TRUE(vo.passed) << what << ": O error " << vo.max_abs_err << " > " << vo.tolerance << ", " << vo.nan_count << " NaN";
  EXPECT_TRUE(vl.passed) << what << ": LSE error " << vl.max_abs_err << " > " << vl.tolerance << ", " << vl.nan_count
                         << " NaN/Inf";
  if (kCausal || kWindow) {
    EXPECT_GT(masked, 0) << what;
  }
}

// Few rows and 64-thread blocks (the template allows any whole number of warps): every barrier of the
// block is a rendezvous of host threads.
template <typename T>
void check_all(core::DType d) {
  // Unmasked, two batches; element-wise rows (seq_k 37) and 16-byte rows (seq_k 64); grid stride.
  check<T, 64, false, false, false>(problem(d, 2, 2, 5, 37, {{"batch", 2}}), 3);
  check<T, 64, false, false, false>(problem(d, 2, 2, 5, 64), 3);
  // Causal with seq_q > seq_k: the first rows see no key (O = 0, LSE = -inf); GQA.
  check<T, 64, true, false, false>(problem(d, 2, 1, 12, 8, {{"causal", 1}}), 5);
  check<T, 64, true, false, false>(problem(d, 4, 1, 6, 64, {{"causal", 1}}), 2);
  // Sliding window, sink tokens, causal or not.
  check<T, 64, false, true, false>(problem(d, 2, 2, 10, 20, {{"window", 5}}), 4);
  check<T, 64, true, true, false>(problem(d, 2, 1, 12, 40, {{"causal", 1}, {"window", 7}, {"sink_tokens", 2}}), 4);
  // Learned sinks: plain, and with every mask and empty rows (LSE = the sink's logit there).
  check<T, 64, false, false, true>(problem(d, 4, 2, 4, 37, {{"learned_sinks", 1}, {"sink_bias", 3}}), 3);
  check<T, 64, true, true, true>(
      problem(d, 2, 1, 20, 12, {{"causal", 1}, {"window", 6}, {"sink_tokens", 3}, {"learned_sinks", 1}}), 4);
  // The largest block: 32 warps merge their statistics.
  check<T, 1024, true, false, true>(problem(d, 1, 1, 3, 64, {{"causal", 1}, {"learned_sinks", 1}}), 1);
}

TEST(AttnNaiveOnHost, SoftmaxKernelMatchesTheReferenceOnEveryMaskInFp32) { check_all<float>(core::DType::f32); }
TEST(AttnNaiveOnHost, SoftmaxKernelMatchesTheReferenceOnEveryMaskInBf16) { check_all<ft_bf16>(core::DType::bf16); }

}  // namespace
}  // namespace flashtune::kernels
