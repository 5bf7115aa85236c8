// tests/kernels/attn_eager_test.cpp (cpu): the attn_eager family's descriptor on the CPU: registration and
// problem, what can run (rows with no visible key are refused: torch.softmax gives NaN there), the name
// expression and arguments against the template, and the memory model: the workspace plan meets the peak
// of live tensors on every variant, never overlaps two live tensors, and on the GStar shape gives the
// seeds' "PyTorch (Naive)" peak of 3.0162 GiB (non-causal; 3.0319 causal, with the bool mask).
#include <gtest/gtest.h>

#include <map>
#include <cstddef>
#include <cstring>
#include <set>

#include "harness/kernels/attn_eager.hpp"
#include "harness/kernels/family.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace flashtune::kernels {
namespace {

const KernelFamily& family() { return testing::registered_family("attn_eager"); }

core::Problem problem(core::DType d, std::int64_t b, std::int64_t hq, std::int64_t hkv, std::int64_t sq,
                      std::int64_t sk, std::int64_t hd, std::map<std::string, std::int64_t> extra = {}) {
  return testing::attention_problem(family(), d, b, hq, hkv, sq, sk, hd, extra);
}

core::Config config(std::int64_t threads) { return core::Config{{{"block_threads", threads}}}; }

// What the runner allocates: every buffer, in whole 32-bit words.
std::int64_t device_bytes(const core::Problem& p) {
  std::int64_t n = 0;
  for (const auto& b : family().buffers(p)) n += (b.elements * std::int64_t(core::dtype_size(b.dtype)) + 3) / 4 * 4;
  return n;
}

// Every mask variant, GQA / MQA, learned sinks, dtypes and ragged lengths of attn_eager_variants.yaml.
std::vector<core::Problem> variants() {
  std::vector<core::Problem> out;
  for (core::DType d : {core::DType::f32, core::DType::f16, core::DType::bf16})
    for (auto [hq, hkv] : {std::pair{3, 3}, std::pair{8, 2}, std::pair{8, 1}})
      for (auto [sq, sk] : {std::pair{1, 17}, std::pair{17, 17}, std::pair{333, 17}, std::pair{77, 333}})
        for (int causal : {0, 1})
          for (int window : {0, 33})
            for (int sinks : {0, 4})
              for (int learned : {0, 1}) {
                if (sinks && !window) continue;
                out.push_back(problem(d, 2, hq, hkv, sq, sk, 64,
                                      {{"causal", causal}, {"window", window}, {"sink_tokens", sinks},
                                       {"learned_sinks", learned}}));
              }
  return out;
}

TEST(AttnEager, DescribesItselfWithTheAttentionProblem) {
  const auto& f = family();
  EXPECT_EQ(f.stage(), "forward");
  EXPECT_TRUE(f.launches_itself());
  EXPECT_FALSE(testing::read_template(f.template_file()).empty());
  ASSERT_EQ(f.tunables().size(), 1u);
  EXPECT_EQ(f.tunables()[0].name, "block_threads");
  const auto* naive = find_family("attn_naive");
  ASSERT_NE(naive, nullptr);
  EXPECT_EQ(f.problem_dims(), naive->problem_dims());
  EXPECT_EQ(f.optional_problem_dims().size(), naive->optional_problem_dims().size());
  const auto p = problem(core::DType::f16, 1, 4, 2, 64, 64, 64);
  EXPECT_EQ(f.bytes_moved(p), naive->bytes_moved(p)) << "workspace traffic is not counted as work";
  EXPECT_EQ(f.flops(p), naive->flops(p));
  EXPECT_GT(f.default_atol(p), naive->default_atol(p)) << "S is rounded twice (GEMM, then the scaling)";
}

TEST(AttnEager, CanRunRefusesRowsWithoutKeysUnlessLearnedSinksGiveThemALogit) {
  const auto& f = family();
  const auto lim = core::DeviceLimits::for_arch("sm_90a");
  EXPECT_EQ(f.can_run(config(256), problem(core::DType::f16, 1, 2, 2, 64, 64, 64, {{"causal", 1}}), lim), std::nullopt);
  EXPECT_EQ(f.can_run(config(256), problem(core::DType::f16, 1, 2, 2, 64, 128, 64, {{"causal", 1}}), lim), std::nullopt);
  EXPECT_EQ(f.can_run(config(256), problem(core::DType::f16, 1, 2, 2, 128, 64, 64), lim), std::nullopt);
  const auto why = f.can_run(config(256), problem(core::DType::f16, 1, 2, 2, 128, 64, 64, {{"causal", 1}}), lim);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("NaN"), std::string::npos) << *why;
  EXPECT_EQ(f.can_run(config(256), problem(core::DType::f16, 1, 2, 2, 128, 64, 64, {{"causal", 1}, {"learned_sinks", 1}}), lim),
            std::nullopt);
  const auto p = problem(core::DType::f32, 1, 2, 2, 64, 64, 64);
  EXPECT_TRUE(f.can_run(config(48), p, lim).has_value());
  EXPECT_TRUE(f.can_run(config(2048), p, lim).has_value());
  EXPECT_EQ(f.can_run(config(1024), p, lim), std::nullopt);
}

TEST(AttnEager, NameExpressionAndArgumentsMatchTheTemplate) {
  const auto& f = family();
  EXPECT_EQ(f.specialize(config(256), problem(core::DType::f16, 1, 2, 2, 64, 64, 16, {{"causal", 1}})).name_expression,
            "attn_eager_kernel<ft_half, 256, true, false>");
  EXPECT_EQ(f.specialize(config(128), problem(core::DType::bf16, 1, 2, 1, 64, 64, 16, {{"window", 8}})).name_expression,
            "attn_eager_kernel<ft_bf16, 128, false, true>");
  EXPECT_EQ(f.specialize(config(1024), problem(core::DType::f32, 1, 2, 2, 64, 64, 16)).name_expression,
            "attn_eager_kernel<float, 1024, false, false>");
  // One parameter struct (kernel_templates/attn_params.cuh) whose a, b and out are the op's buffers.
  const auto p = problem(core::DType::f16, 1, 4, 2, 64, 64, 64);
  const auto params = testing::kernel_parameters(testing::read_template(f.template_file()), "attn_eager_kernel");
  ASSERT_EQ(params.size(), 1u);
  EXPECT_NE(params[0].find("FtAttnEagerParams"), std::string::npos) << params[0];
  const auto args = f.arguments(config(256), p);
  ASSERT_EQ(args.size(), 1u);
  const auto& a = std::get<ParamsArg>(args[0]);
  ASSERT_EQ(a.bytes.size(), sizeof(FtAttnEagerParams));
  std::set<std::size_t> bound;
  for (const auto& ptr : a.pointers) bound.insert(ptr.offset);
  EXPECT_EQ(bound, (std::set<std::size_t>{offsetof(FtAttnEagerParams, a), offsetof(FtAttnEagerParams, b),
                                          offsetof(FtAttnEagerParams, out)}));
  FtAttnEagerParams v;
  std::memcpy(&v, a.bytes.data(), sizeof v);
  EXPECT_EQ(v.heads_q, 4);
  EXPECT_EQ(v.group, 2);
  EXPECT_EQ(v.head_dim, 64);
  EXPECT_FLOAT_EQ(v.scale, 0.125f);
}

// B1 H16 L4096 D16 fp16, n = 2^28 scores: the seeds' table prints 3.0162 GB for PyTorch (Naive), non-causal
// (000_*.txt), and its Triton row 0.0157 GB with "191.54x less memory". attn_eager.cpp derives it.
TEST(AttnEager, GStarShapeGivesTheSeedsPeakMemory) {
  const std::int64_t n = std::int64_t(16) * 4096 * 4096, mib = 1 << 20;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  for (int causal : {0, 1}) {
    const auto p = problem(core::DType::f16, 1, 16, 16, 4096, 4096, 16, {{"causal", causal}});
    const auto plan = eager::plan(p);
    const std::int64_t mask = causal ? 4096 * 4096 : 0;
    // S (2n), P (2n), S.to(float32) (4n), S - max (4n), the row maxima, the cuBLAS workspace, the mask.
    EXPECT_EQ(plan.peak, 12 * n + 16 * 4096 * 4 + eager::kCublasWorkspaceBytes + mask) << causal;
    EXPECT_EQ(plan.bytes, plan.peak) << causal;
    // Q, K, V, O (2 MiB each), LSE (256 KiB), the learned-sink logits (16 x f32, flashtune's) beside it.
    const std::int64_t total = device_bytes(p);
    EXPECT_EQ(total, plan.bytes + 8 * mib + mib / 4 + 64) << causal;
    char printed[32];
    std::snprintf(printed, sizeof printed, "%.4f", double(total) / gib);
    EXPECT_STREQ(printed, causal ? "3.0319" : "3.0162") << total;
  }
  const auto p = problem(core::DType::f16, 1, 16, 16, 4096, 4096, 16);
  EXPECT_EQ(device_bytes(p), 3238658112);
  // The Triton row: Q, K, V, O and the same cuBLAS workspace; the ratio the grader printed.
  const double triton = double(8 * mib + eager::kCublasWorkspaceBytes);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2f", double(device_bytes(p) - 64) / triton);  // less flashtune's sinks
  EXPECT_STREQ(ratio, "191.54");
}

TEST(AttnEager, WorkspacePlanMeetsThePeakAndNeverOverlapsLiveTensors) {
  for (const auto& p : variants()) {
    const auto t = eager::tensors(p);
    const auto plan = eager::plan(p);
    ASSERT_EQ(t.size(), std::size_t(eager::kNumTensors));
    EXPECT_EQ(plan.bytes, plan.peak) << p.key();
    auto size = [](std::int64_t b) { return (b + eager::kAllocGranule - 1) / eager::kAllocGranule * eager::kAllocGranule; };
    for (std::size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(plan.offsets[i] % eager::kAllocGranule, 0) << p.key() << " " << t[i].name;
      for (std::size_t j = i + 1; j < t.size(); ++j) {
        const bool same_time = t[i].born <= t[j].dies && t[j].born <= t[i].dies;
        const bool same_bytes = plan.offsets[i] < plan.offsets[j] + size(t[j].bytes) &&
                                plan.offsets[j] < plan.offsets[i] + size(t[i].bytes);
        EXPECT_FALSE(same_time && same_bytes && t[i].bytes > 0 && t[j].bytes > 0)
            << p.key() << ": " << t[i].name << " and " << t[j].name;
      }
    }
    // The workspace buffer holds the plan.
    const auto buffers = family().buffers(p);
    ASSERT_EQ(buffers.back().role, BufferRole::workspace);
    EXPECT_EQ(buffers.back().elements * 4, plan.bytes) << p.key();
  }
}

TEST(AttnEager, WorkspaceHoldsWhatEagerPyTorchHolds) {
  const std::int64_t n = 2 * 8 * 77 * 333;  // batch 2, heads_q 8, seq_q 77, seq_k 333
  auto bytes = [](const core::Problem& p, eager::Tensor t) { return eager::tensors(p)[t].bytes; };
  const auto gqa = problem(core::DType::bf16, 2, 8, 2, 77, 333, 64, {{"causal", 1}});
  EXPECT_EQ(bytes(gqa, eager::kKRep), 2 * 8 * 333 * 64 * 2) << "K repeated to every query head";
  EXPECT_EQ(bytes(gqa, eager::kMask), 77 * 333) << "one bool per (query, key)";
  EXPECT_EQ(bytes(gqa, eager::kSoftmaxIn), 4 * n) << "bf16: softmax(dtype=float32) converts first";
  EXPECT_EQ(bytes(gqa, eager::kS32), 4 * n);
  const auto half = problem(core::DType::f16, 2, 8, 8, 77, 333, 64);
  EXPECT_EQ(bytes(half, eager::kKRep), 0);
  EXPECT_EQ(bytes(half, eager::kMask), 0) << "no mask without causal or window";
  EXPECT_EQ(bytes(half, eager::kSoftmaxIn), 0) << "fp16 on CUDA: half_to_float in one kernel";
  const auto f32 = problem(core::DType::f32, 2, 8, 8, 77, 333, 64);
  EXPECT_EQ(bytes(f32, eager::kP), 0) << "f32: P is the softmax output";
  EXPECT_EQ(bytes(f32, eager::kS32), 0) << "f32: S.to(float32) is S";
  auto rounded = [](std::int64_t b) { return (b + eager::kAllocGranule - 1) / eager::kAllocGranule * eager::kAllocGranule; };
  EXPECT_EQ(eager::plan(f32).peak, 3 * rounded(4 * n) + rounded(2 * 8 * 77 * 4) + eager::kCublasWorkspaceBytes)
      << "S, P, S - max";
  const auto sinks = problem(core::DType::f16, 2, 8, 8, 77, 333, 64, {{"learned_sinks", 1}});
  const std::int64_t n1 = 2 * 8 * 77 * 334;
  EXPECT_EQ(bytes(sinks, eager::kSCat), 4 * n1) << "cat with the f32 sinks promotes to f32";
  EXPECT_EQ(bytes(sinks, eager::kS32), 0);
}

TEST(AttentionWorkspace, PlanReusesTheBytesOfDeadTensors) {
  // a [0, 1] and c [2, 3] never live together and share bytes; b lives throughout.
  const std::vector<attn::LiveTensor> t = {{"a", 1000, 0, 1}, {"b", 100, 0, 3}, {"c", 1000, 2, 3}};
  const auto plan = attn::plan_workspace(t, 512);
  EXPECT_EQ(plan.peak, 1024 + 512);
  EXPECT_EQ(plan.bytes, 1024 + 512);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(attn::plan_workspace({}, 512).bytes, 0);
}

}  // namespace
}  // namespace flashtune::kernels
