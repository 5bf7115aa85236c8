// tests/kernels/attn_naive_test.cpp (cpu): the attn_naive family's descriptor on the CPU: the shared
// attention problem plus the score-matrix workspace, the softmax kernel's arguments against its template
// and its name expression compiled with NVRTC, and the tolerance checked against a host emulation of the
// naive pipeline's rounding (S and P stored in fp16 / bf16).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>

#include "harness/kernels/family.hpp"
#include "harness/kernels/attention.hpp"
#include "reference/attention.hpp"
#include "reference/compare.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace flashtune::kernels {
namespace {

const KernelFamily& family() { return testing::registered_family("attn_naive"); }

core::Problem problem(core::DType d, std::int64_t b, std::int64_t hq, std::int64_t hkv, std::int64_t sq,
                      std::int64_t sk, std::int64_t hd, std::map<std::string, std::int64_t> extra = {}) {
  return testing::attention_problem(family(), d, b, hq, hkv, sq, sk, hd, extra);
}

core::Config config(std::int64_t threads) { return core::Config{{{"block_threads", threads}}}; }

TEST(AttnNaive, DescribesItself) {
  const auto& f = family();
  EXPECT_EQ(f.stage(), "forward");
  EXPECT_TRUE(f.launches_itself());
  EXPECT_FALSE(f.description().empty());
  EXPECT_FALSE(testing::read_template(f.template_file()).empty());
  ASSERT_EQ(f.tunables().size(), 1u);
  EXPECT_EQ(f.tunables()[0].name, "block_threads");
  EXPECT_EQ(f.tunables()[0].values, (std::vector<std::int64_t>{128, 256, 512, 1024}));
  // The same problem as attn_fwd: the two are compared on the same YAML problems.
  const auto* fwd = find_family("attn_fwd");
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(f.problem_dims(), fwd->problem_dims());
  EXPECT_EQ(f.optional_problem_dims().size(), fwd->optional_problem_dims().size());
}

TEST(AttnNaive, WorkspaceHoldsTheWholeScoreMatrix) {
  const auto* fwd = find_family("attn_fwd");
  for (core::DType d : {core::DType::f32, core::DType::f16, core::DType::bf16}) {
    const auto p = problem(d, 2, 8, 2, 37, 130, 64);
    const auto b = family().buffers(p);
    const auto base = kernels::attn::fwd_buffers(kernels::attn::Shape(p));  // attn_fwd's less its scheduler workspace
    ASSERT_EQ(b.size(), base.size() + 1);
    for (std::size_t i = 0; i < base.size(); ++i) {
      EXPECT_EQ(b[i].name, base[i].name);
      EXPECT_EQ(b[i].elements, base[i].elements);
      EXPECT_EQ(b[i].role, base[i].role);
    }
    const auto& s = b.back();
    EXPECT_EQ(s.name, "s");
    EXPECT_EQ(s.role, BufferRole::workspace);
    EXPECT_EQ(s.dtype, d);  // fp16 / bf16 S like the naive algorithm's matmul output; f32 stays f32
    EXPECT_EQ(s.elements, 2 * 8 * 37 * 130);
    // Counts are the attention convention's, so attn_naive and attn_fwd compare on TFLOP/s and GB/s.
    EXPECT_DOUBLE_EQ(family().bytes_moved(p), fwd->bytes_moved(p));
    EXPECT_DOUBLE_EQ(family().flops(p), fwd->flops(p));
  }
}

// The softmax kernel takes one parameter struct (kernel_templates/attn_params.cuh) binding S (the workspace, P in
// place), LSE and the sinks.
TEST(AttnNaive, ArgumentIsOneParamsStructBindingSLseAndSinks) {
  const auto p = problem(core::DType::bf16, 2, 4, 1, 5, 9, 16, {{"causal", 1}, {"window", 3}, {"sink_tokens", 1}});
  const auto spec = family().specialize(config(256), p);
  EXPECT_EQ(spec.name_expression, "attn_naive_softmax_kernel<ft_bf16, 256, true, true, false>");
  const std::string kernel = spec.name_expression.substr(0, spec.name_expression.find('<'));
  const auto params = testing::kernel_parameters(testing::read_template(family().template_file()), kernel);
  ASSERT_EQ(params.size(), 1u);
  EXPECT_NE(params[0].find("FtAttnNaiveParams<T>"), std::string::npos) << params[0];
  const auto args = family().arguments(config(256), p);
  ASSERT_EQ(args.size(), 1u);
  const auto& a = std::get<ParamsArg>(args[0]);
  using P = FtAttnNaiveParams<void>;
  ASSERT_EQ(a.bytes.size(), sizeof(P));
  std::map<std::size_t, int> bound;
  for (const auto& ptr : a.pointers) bound[ptr.offset] = ptr.buffer;
  const auto buffers = family().buffers(p);
  EXPECT_EQ(bound, (std::map<std::size_t, int>{{offsetof(P, s), int(buffers.size()) - 1},  // the workspace
                                               {offsetof(P, lse), kernels::attn::kLse},
                                               {offsetof(P, sinks), kernels::attn::kSinks}}));
  P v;
  std::memcpy(&v, a.bytes.data(), sizeof v);
  EXPECT_EQ(v.rows, 2 * 4 * 5);  // rows of S
  EXPECT_EQ(v.heads_q, 4);
  EXPECT_EQ(v.seq_k, 9);
  EXPECT_EQ(v.window, 3);
  EXPECT_EQ(v.sink_tokens, 1);
}

TEST(AttnNaive, LaunchesOneBlockPerRowOfS) {
  const auto d = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem(core::DType::f16, 3, 4, 4, 33, 70, 32);
  for (std::int64_t t : {128, 256, 512, 1024}) {
    EXPECT_EQ(family().can_run(config(t), p, d), std::nullopt);
    const auto s = family().launch_shape(config(t), p, d);
    EXPECT_EQ(s.grid[0], 3u * 4u * 33u);
    EXPECT_EQ(s.grid[1] * s.grid[2], 1u);
    EXPECT_EQ(s.threads_per_block(), t);
    EXPECT_EQ(s.dynamic_smem_bytes, 0u);
  }
}

TEST(AttnNaive, CanRunAndCheckProblemGiveReasons) {
  const auto d = core::DeviceLimits::for_arch("sm_80");
  const auto p = problem(core::DType::f32, 1, 2, 2, 8, 8, 16);
  EXPECT_NE(family().can_run(config(2048), p, d), std::nullopt);  // over the device limit
  EXPECT_NE(family().can_run(config(100), p, d), std::nullopt);   // not whole warps
  EXPECT_EQ(family().check_problem(p), std::nullopt);
  // A GQA group's query rows are one cuBLAS operand: 64 heads per kv head x 2^26 rows overflow its int.
  const auto big = problem(core::DType::f16, 1, 64, 1, std::int64_t(1) << 26, 16, 16);
  const auto why = family().check_problem(big);
  ASSERT_NE(why, std::nullopt);
  EXPECT_NE(why->find("cuBLAS"), std::string::npos) << *why;
  EXPECT_NE(family().check_problem(problem(core::DType::f16, 1, 6, 4, 8, 8, 16)), std::nullopt);  // GQA ratio
}

// The family's own name expression compiles as the runner compiles it (every instantiation of the
// template: tests/kernels/templates_compile_test.cpp).
TEST(AttnNaive, NameExpressionCompilesForSm80AndSm90a) {
  const auto p = problem(core::DType::f16, 1, 4, 2, 9, 9, 64, {{"causal", 1}, {"learned_sinks", 1}});
  for (const std::string arch : {"sm_80", "sm_90a"}) {
    const std::string name_expression = family().specialize(config(512), p).name_expression;
    const auto one =
        testing::compile_kernel(testing::read_template("attn_naive.cuh"), "attn_naive.cuh", name_expression, arch);
    ASSERT_TRUE(one.record.ok) << name_expression << "\n" << one.record.log;
    EXPECT_FALSE(one.record.lowered_name.empty());
    EXPECT_EQ(one.record.resources.spill_store_bytes, 0);
  }
}

// The naive pipeline on the host, rounding where the GPU's does: S = scale * Q K^T accumulated in fp32
// and stored in the problem dtype, softmax in fp32, P stored in the dtype, O = P V accumulated in fp32.
void emulate(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<double>& o, std::vector<double>& lse) {
  const auto s = reference::AttnShape{p.at("batch"), p.at("heads_q"), p.at("heads_kv"), p.at("seq_q"), p.at("seq_k"),
                                      p.at("head_dim"), p.get("causal", 0) != 0, p.get("window", 0),
                                      p.get("sink_tokens", 0), p.get("learned_sinks", 0) != 0, 0.0};
  const float scale = float(1.0 / std::sqrt(double(s.head_dim)));
  const auto& q = in[0].values;
  const auto& k = in[1].values;
  const auto& v = in[2].values;
  const auto& sinks = in[3].values;
  o.assign(std::size_t(s.batch * s.heads_q * s.seq_q * s.head_dim), 0.0);
  lse.assign(std::size_t(s.batch * s.heads_q * s.seq_q), -std::numeric_limits<double>::infinity());
  const std::int64_t group = s.heads_q / s.heads_kv;
  std::vector<float> row(std::size_t(s.seq_k));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads_q; ++h) {
      const std::int64_t kv = (b * s.heads_kv + h / group) * s.seq_k * s.head_dim;
      for (std::int64_t i = 0; i < s.seq_q; ++i) {
        const std::int64_t qi = ((b * s.heads_q + h) * s.seq_q + i) * s.head_dim;
        float m = s.learned_sinks ? float(sinks[std::size_t(h)]) : -INFINITY;
        for (std::int64_t j = 0; j < s.seq_k; ++j) {
          float acc = 0;
          for (std::int64_t d = 0; d < s.head_dim; ++d)
            acc += float(q[std::size_t(qi + d)]) * float(k[std::size_t(kv + j * s.head_dim + d)]);
          row[std::size_t(j)] = float(reference::round_to(p.dtype, double(scale * acc)));
          if (reference::attn_visible(s, i, j)) m = std::max(m, row[std::size_t(j)]);
        }
        if (m == -INFINITY) continue;  // no visible key, no sink: O = 0, LSE = -inf
        float l = s.learned_sinks ? std::exp(float(sinks[std::size_t(h)]) - m) : 0.0f;
        for (std::int64_t j = 0; j < s.seq_k; ++j)
          if (reference::attn_visible(s, i, j)) l += std::exp(row[std::size_t(j)] - m);
        lse[std::size_t((b * s.heads_q + h) * s.seq_q + i)] = double(m + std::log(l));
        for (std::int64_t j = 0; j < s.seq_k; ++j)  // P in place, rounded to the dtype; masked keys 0
          row[std::size_t(j)] = reference::attn_visible(s, i, j)
                                    ? float(reference::round_to(p.dtype, double(std::exp(row[std::size_t(j)] - m) / l)))
                                    : 0.0f;
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          float acc = 0;
          for (std::int64_t j = 0; j < s.seq_k; ++j) acc += row[std::size_t(j)] * float(v[std::size_t(kv + j * s.head_dim + d)]);
          o[std::size_t(qi + d)] = reference::round_to(p.dtype, double(acc));
        }
      }
    }
}

// The family's atol must forgive S stored in fp16 / bf16 (the fp32 naive reference keeps it in fp32),
// also with large logits (qk_range 4) and every mask; with default logits it must still catch a 5% error.
TEST(AttnNaive, ToleranceCoversTheNaivePipelinesRounding) {
  int cases = 0;
  for (core::DType d : {core::DType::f16, core::DType::bf16, core::DType::f32})
    for (std::int64_t r : {1, 4})
      for (const auto& extra : std::vector<std::map<std::string, std::int64_t>>{
               {}, {{"causal", 1}}, {{"causal", 1}, {"window", 40}, {"sink_tokens", 3}, {"learned_sinks", 1}},
               {{"window", 7}, {"learned_sinks", 1}, {"sink_bias", 2}}}) {
        auto more = extra;
        more["qk_range"] = r;
        const auto p = problem(d, 1, 4, 2, 70, 300, 64, more);
        const std::string what = p.key();
        std::vector<HostTensor> in, ref64, naive;
        testing::make_tensors(family(), p, 1234 + std::uint64_t(cases), in, ref64);
        naive = ref64;
        family().reference(p, in, ref64, RefPrecision::f64);
        family().reference(p, in, naive, RefPrecision::same);
        std::vector<double> o, lse;
        emulate(p, in, o, lse);
        const double atol = family().default_atol(p);
        const auto vo = reference::compare(o, ref64[0].values, naive[0].values, atol);
        const auto vl = reference::compare(lse, ref64[1].values, naive[1].values, atol);
        EXPECT_TRUE(vo.passed) << what << ": O error " << vo.max_abs_err << " > " << vo.tolerance;
        EXPECT_TRUE(vl.passed) << what << ": LSE error " << vl.max_abs_err << " > " << vl.tolerance;
        if (r == 1) {  // default logits: a 5% error in the softmax denominator must not pass
          std::vector<double> bad = lse;
          for (double& x : bad)
            if (std::isfinite(x)) x += 0.05;
          EXPECT_FALSE(reference::compare(bad, ref64[1].values, naive[1].values, atol).passed) << what;
        }
        ++cases;
      }
  EXPECT_EQ(cases, 24);
  // Looser than the fused kernels' only where S is rounded, and more so for larger logits.
  const auto* fwd = find_family("attn_fwd");
  const auto f32 = problem(core::DType::f32, 1, 1, 1, 8, 8, 16);
  EXPECT_DOUBLE_EQ(family().default_atol(f32), fwd->default_atol(f32));
  const auto bf16 = problem(core::DType::bf16, 1, 1, 1, 8, 8, 16);
  EXPECT_GT(family().default_atol(bf16), fwd->default_atol(bf16));
  EXPECT_GT(family().default_atol(problem(core::DType::bf16, 1, 1, 1, 8, 8, 16, {{"qk_range", 4}})),
            family().default_atol(bf16));
}

}  // namespace
}  // namespace flashtune::kernels
