// tests/attention/attn_bwd_f32_test.cpp (labels cpu, slow): the fp32 backward stages (exact FFMA and TF32,
// attn_bwd_f32.cuh) without a GPU: f32 accepted, reasons for what does not run, name expressions and shared
// memory; NVRTC for sm_80 and sm_90a (every mask variant, the heaviest admitted configs, no spills); and the
// dkdv and dq kernels run on the CPU emulator (tests/kernels/attn_fwd_f32_emulation.hpp) on ragged shapes of
// every variant, passing the pass rule against the double reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <variant>

#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/attn_bwd.hpp"
#include "harness/kernels/attn_bwd_f32.hpp"
#include "harness/kernels/family.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"
#include "tests/kernels/kernel_test_support.hpp"
// Last: it defines the CUDA keywords as macros and includes attn_fwd_f32.cuh (the PTX wrappers).
#include "tests/kernels/attn_fwd_f32_emulation.hpp"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include "kernel_templates/attn_bwd_f32.cuh"
#pragma GCC diagnostic pop

using namespace flashtune;

namespace {

using flashtune::testing::default_space;

const kernels::KernelFamily& fam(const std::string& name) {
  const auto* f = kernels::find_family(name);
  if (!f) throw std::runtime_error(name + " is not registered");
  return *f;
}

core::Problem problem(const kernels::KernelFamily& f, std::map<std::string, std::int64_t> dims) {
  core::Problem p{std::move(dims), core::DType::f32};
  for (const auto& o : f.optional_problem_dims()) p.dims.try_emplace(o.name, o.fallback);
  f.complete_problem(p);
  return p;
}

core::Config cfg(std::int64_t bm, std::int64_t bn, std::int64_t warps, std::int64_t stages) {
  return core::Config{{{"block_m", bm}, {"block_n", bn}, {"num_warps", warps}, {"num_stages", stages}}};
}

}  // namespace

TEST(AttnBwdF32Host, FamiliesAcceptF32AndTf32) {
  for (const char* name : {"attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq", "attn_bwd_dsink"}) {
    const auto& f = fam(name);
    const auto d = f.dtypes();
    EXPECT_NE(std::find(d.begin(), d.end(), core::DType::f32), d.end()) << name;
    for (std::int64_t tf32 : {0, 1})
      EXPECT_EQ(f.check_problem(problem(f, {{"batch", 1}, {"heads_q", 2}, {"seq_q", 10}, {"head_dim", 64},
                                            {"learned_sinks", 1}, {"tf32", tf32}})),
                std::nullopt)
          << name;
  }
  // tf32 is an f32 switch (the forward's problem dim)
  const auto& dq = fam("attn_bwd_dq");
  core::Problem h{{{"batch", 1}, {"heads_q", 2}, {"seq_q", 10}, {"head_dim", 64}, {"tf32", 1}}, core::DType::bf16};
  dq.complete_problem(h);
  EXPECT_NE(dq.check_problem(h).value_or("").find("tf32"), std::string::npos);
  // The tolerances: exact fp32 tight, TF32 as fp16 (a 10-bit mantissa), both below bf16's.
  const auto exact = problem(dq, {{"batch", 1}, {"heads_q", 2}, {"seq_q", 10}, {"head_dim", 64}});
  const auto tf32 = problem(dq, {{"batch", 1}, {"heads_q", 2}, {"seq_q", 10}, {"head_dim", 64}, {"tf32", 1}});
  EXPECT_LT(dq.default_atol(exact), 1e-4);
  EXPECT_GT(dq.default_atol(tf32), 10 * dq.default_atol(exact));
}

TEST(AttnBwdF32Host, NameExpressionsAndSharedMemoryMatchTheKernels) {
  const auto dev = core::DeviceLimits::for_arch("sm_80");
  const auto& dkdv = fam("attn_bwd_dkdv");
  const auto& dq = fam("attn_bwd_dq");
  const auto p = problem(dkdv, {{"batch", 2}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 100}, {"head_dim", 64},
                                {"causal", 1}, {"window", 16}, {"sink_tokens", 4}});
  auto pt = p;
  pt.dims["tf32"] = 1;
  const auto c = cfg(32, 64, 4, 2);
  EXPECT_EQ(dkdv.specialize(c, p).name_expression, "attn_bwd_dkdv_f32_kernel<64, 32, 64, 4, 2, false, true, true>");
  EXPECT_EQ(dq.specialize(c, pt).name_expression, "attn_bwd_dq_f32_kernel<64, 32, 64, 4, 2, true, true, true>");
  // dkdv: K, V (64 rows of 68 floats each), 2 stages of Q, dO (32 rows of 68) + LSE, D (32 each); FFMA adds
  // P^T and dS^T (64 x 40 each).
  EXPECT_EQ(dkdv.launch_shape(c, p, dev).dynamic_smem_bytes, unsigned(4 * (2 * 64 * 68 + 2 * (2 * 32 * 68 + 64) + 2 * 64 * 40)));
  EXPECT_EQ(dkdv.launch_shape(c, pt, dev).dynamic_smem_bytes, unsigned(4 * (2 * 64 * 68 + 2 * (2 * 32 * 68 + 64))));
  // dq: Q, dO (32 rows), 2 stages of K, V (64 rows); FFMA adds dS (32 x 72).
  EXPECT_EQ(dq.launch_shape(c, p, dev).dynamic_smem_bytes, unsigned(4 * (2 * 32 * 68 + 2 * 2 * 64 * 68 + 32 * 72)));
  EXPECT_EQ(dq.launch_shape(c, pt, dev).dynamic_smem_bytes, unsigned(4 * (2 * 32 * 68 + 2 * 2 * 64 * 68)));
  // the grids are the fp16 / bf16 kernels'
  EXPECT_EQ(dkdv.launch_shape(c, p, dev).grid[0], 2u);
  EXPECT_EQ(dq.launch_shape(c, p, dev).grid[0], 4u);
  EXPECT_EQ(fam("attn_bwd_preprocess").specialize(core::Config{{{"block_m", 64}, {"num_warps", 4}}}, p).name_expression,
            "attn_bwd_preprocess_kernel<float, 64, 64, 4>");
}

TEST(AttnBwdF32Host, CanRunGivesReasons) {
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  const auto& dkdv = fam("attn_bwd_dkdv");
  const auto& dq = fam("attn_bwd_dq");
  const auto p = problem(dkdv, {{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}, {"causal", 1},
                                {"window", 16}, {"sink_tokens", 4}});
  EXPECT_EQ(dkdv.can_run(cfg(32, 64, 4, 2), p, dev), std::nullopt);
  auto split = cfg(32, 64, 4, 2);
  split.values["sink_split"] = 4;
  EXPECT_NE(dkdv.can_run(split, p, dev).value_or("").find("sink_split 1"), std::string::npos);
  auto wgmma = cfg(64, 64, 4, 2);
  wgmma.values["mma"] = 90;
  EXPECT_NE(dkdv.can_run(wgmma, p, dev).value_or("").find("mma 80"), std::string::npos);
  EXPECT_NE(dkdv.can_run(cfg(32, 64, 8, 2), p, dev).value_or("").find("rows per warp"), std::string::npos);
  EXPECT_NE(dq.can_run(cfg(64, 64, 1, 2), p, dev).value_or("").find("rows per warp"), std::string::npos);
  EXPECT_NE(dkdv.can_run(cfg(64, 64, 2, 1), p, dev).value_or("").find("registers"), std::string::npos);
  EXPECT_NE(dq.can_run(cfg(64, 128, 4, 4), p, dev).value_or("").find("shared memory"), std::string::npos);
  auto turing = dev;
  turing.sm_major = 7;
  EXPECT_NE(dq.can_run(cfg(32, 64, 2, 1), p, turing).value_or("").find("sm_80"), std::string::npos);
  // every head dim keeps some config of each default space, FFMA and TF32
  for (const char* name : {"attn_bwd_dkdv", "attn_bwd_dq"})
    for (std::int64_t tf32 : {0, 1})
      for (std::int64_t hd : {16, 32, 64, 128}) {
        const auto& f = fam(name);
        const auto q = problem(f, {{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", hd}, {"tf32", tf32}});
        int ok = 0;
        for (const auto& c : default_space(f)) ok += !f.can_run(c, q, dev);
        EXPECT_GT(ok, 0) << name << " " << q.key();
      }
}

// The runner's data path on the CPU for f32 (exact and TF32): the same-precision reference (fp32; for TF32 on
// operands rounded to tf32) passes the pass rule, a perturbed output fails, outputs dwarf the tolerance.
TEST(AttnBwdF32Reference, SamePrecisionPassesAndAPerturbedOutputFails) {
  for (const char* name : {"attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq", "attn_bwd_dsink"})
    for (std::int64_t tf32 : {0, 1})
      for (int variant = 0; variant < 3; ++variant) {
        const auto& f = fam(name);
        std::map<std::string, std::int64_t> dims{{"batch", 2}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 37},
                                                 {"seq_k", 45}, {"head_dim", 16}, {"learned_sinks", 1}, {"tf32", tf32}};
        if (variant == 1) dims["causal"] = 1, dims["window"] = 8, dims["sink_tokens"] = 3;
        if (variant == 2) dims["sink_bias"] = 20, dims["heads_kv"] = 1;
        const auto p = problem(f, dims);
        std::vector<kernels::HostTensor> in, ref64, naive;
        flashtune::testing::make_tensors(f, p, 5 + variant, in, ref64);
        naive = ref64;
        f.reference(p, in, ref64, kernels::RefPrecision::f64);
        f.reference(p, in, naive, kernels::RefPrecision::same);
        for (std::size_t o = 0; o < ref64.size(); ++o) {
          const std::string what = std::string(name) + " " + p.key() + " output " + std::to_string(o);
          const double atol = f.default_atol(p);
          const auto ok = reference::compare(naive[o].values, ref64[o].values, naive[o].values, atol, ref64[o].checked);
          EXPECT_TRUE(ok.passed) << what;
          double biggest = 0;
          for (double v : ref64[o].values) biggest = std::max(biggest, std::abs(v));
          EXPECT_GT(biggest, 10 * atol) << what << ": outputs too small to check anything";
          auto bad = naive[o].values;
          bad[bad.size() / 2] += 3 * ok.tolerance + 1e-6;
          EXPECT_FALSE(reference::compare(bad, ref64[o].values, naive[o].values, atol).passed) << what;
        }
      }
}

// ------------------------------------------------------------------------------------------------
// NVRTC: every mask variant (one config; head dim 64, and every head dim with all switches on), and per
// (stage, FFMA / TF32, head dim) the admitted config of the default space with the most estimated
// registers, in the heaviest mask variant, compile without spills for sm_80 and sm_90a. FT_BWD_F32_ALL_CONFIGS=1 compiles every
// admitted config instead (how the register estimate was calibrated; minutes).
TEST(AttnBwdF32Compile, VariantsAndHeaviestConfigsCompileWithoutSpills) {
  const bool all = std::getenv("FT_BWD_F32_ALL_CONFIGS") != nullptr;
  const std::string source = flashtune::testing::read_template("attn_bwd_f32.cuh");
  for (const std::string arch : {"sm_80", "sm_90a"}) {
    const auto dev = core::DeviceLimits::for_arch(arch);
    std::vector<std::string> names;
    for (const char* name : {"attn_bwd_dkdv", "attn_bwd_dq"}) {
      const auto& f = fam(name);
      const auto space = default_space(f);
      for (std::int64_t tf32 : {0, 1})
        for (std::int64_t hd : {16, 32, 64, 128}) {
          for (int variant = 0; variant < 4; ++variant) {
            if (variant != 3 && hd != 64) continue;  // the lighter mask variants at one head dim
            std::map<std::string, std::int64_t> dims{{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", hd}, {"tf32", tf32}};
            if (variant & 1) dims["causal"] = 1;
            if (variant & 2) dims["window"] = 16, dims["sink_tokens"] = 4;
            const auto p = problem(f, dims);
            const auto one = cfg(32, 32, 2, 1);
            ASSERT_EQ(f.can_run(one, p, dev), std::nullopt) << name << " " << p.key();
            names.push_back(f.specialize(one, p).name_expression);
            if (variant != 3) continue;
            std::vector<std::pair<std::int64_t, core::Config>> admitted;
            for (const auto& c : space)
              if (!f.can_run(c, p, dev))
                admitted.emplace_back(kernels::attn_bwd_f32::registers(
                                          f.name() == "attn_bwd_dkdv" ? kernels::attn_bwd_f32::Stage::dkdv
                                                                      : kernels::attn_bwd_f32::Stage::dq,
                                          kernels::attn::Tiles(c), kernels::attn::Shape(p)),
                                      c);
            ASSERT_FALSE(admitted.empty()) << name << " " << p.key();
            std::stable_sort(admitted.begin(), admitted.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
            for (const auto& [regs, c] : admitted) {
              names.push_back(f.specialize(c, p).name_expression);
              if (!all) break;  // the heaviest one
            }
          }
        }
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::vector<std::string> inst;
    for (const auto& n : names) inst.push_back(flashtune::testing::attn_instantiation(n));
    ASSERT_GE(inst.size(), 36u) << arch;
    std::printf("%s: %zu kernels\n", arch.c_str(), inst.size());
    const auto r = flashtune::testing::compile_instantiations_parallel(source, "attn_bwd_f32.cuh", inst, arch);
    ASSERT_TRUE(r.record.ok) << arch << "\n" << r.record.log.substr(0, 4000);
    EXPECT_EQ(r.entries, int(inst.size())) << arch;
    EXPECT_EQ(r.spilling, 0) << arch << "\n" << r.record.log;
    EXPECT_LE(r.max_registers, 255) << arch;
  }
}

// ------------------------------------------------------------------------------------------------
// The kernels on the CPU emulator against the family's reference (the runner's pass rule).

namespace {

using KernelFn = void (*)(FtAttnBwdParams<float>);

struct Case {
  std::string name;
  std::string family;
  KernelFn kernel;
  core::Config config;
  std::map<std::string, std::int64_t> dims;
};

// Runs the case's kernel over the whole grid on the emulator with the family's buffers, arguments, grid and
// shared memory, and validates every output; returns the emulator's error, if any.
std::string emulate(const Case& k, std::vector<core::Validation>& results) {
  const auto& f = fam(k.family);
  const auto p = problem(f, k.dims);
  if (auto why = f.check_problem(p)) return "problem: " + *why;
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  if (auto why = f.can_run(k.config, p, dev)) return "can_run: " + *why;
  std::vector<kernels::HostTensor> inputs, ref64, naive;
  flashtune::testing::make_tensors(f, p, 1234, inputs, ref64);
  naive = ref64;
  f.reference(p, inputs, ref64, kernels::RefPrecision::f64);
  f.reference(p, inputs, naive, kernels::RefPrecision::same);

  constexpr std::size_t kGuard = 64;
  constexpr float kCanary = 12345.678f;
  std::vector<std::vector<float>> in(inputs.size()), out(ref64.size());
  ft_emu::g_inputs.clear();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in[i].assign(inputs[i].values.begin(), inputs[i].values.end());
    ft_emu::g_inputs.push_back({reinterpret_cast<const char*>(in[i].data()), in[i].size() * 4});
  }
  for (std::size_t i = 0; i < ref64.size(); ++i) {
    out[i].assign(ref64[i].values.size() + 2 * kGuard, kCanary);
    std::fill(out[i].begin() + kGuard, out[i].end() - kGuard, std::nanf(""));
  }
  // The family's parameter struct, its pointers bound to the emulator's buffers (inputs, then outputs, as
  // buffers() lists them; the workspace, unused without split sink tiles, gets no memory).
  std::vector<std::uint64_t> addresses;
  for (auto& b : in) addresses.push_back(reinterpret_cast<std::uint64_t>(b.data()));
  for (auto& b : out) addresses.push_back(reinterpret_cast<std::uint64_t>(b.data() + kGuard));
  while (addresses.size() < f.buffers(p).size()) addresses.push_back(0);
  const auto packed = kernels::pack_kernel_args(f.arguments(k.config, p), addresses);
  if (packed.pointers.size() != 1) return "the kernel takes one parameter struct";
  FtAttnBwdParams<float> params{};
  std::memcpy(&params, packed.pointers.at(0), sizeof params);
  const auto shape = f.launch_shape(k.config, p, dev);
  ft_emu::g_grid = {shape.grid[0], shape.grid[1], shape.grid[2]};
  std::string error;
  for (unsigned z = 0; z < shape.grid[2] && error.empty(); ++z)
    for (unsigned y = 0; y < shape.grid[1] && error.empty(); ++y)
      for (unsigned x = 0; x < shape.grid[0] && error.empty(); ++x) {
        error = ft_emu::run_block({x, y, z}, int(shape.block[0]), shape.dynamic_smem_bytes, [&] {
          k.kernel(params);
        });
        if (!error.empty()) error = "block (" + std::to_string(x) + ", " + std::to_string(y) + ", " + std::to_string(z) + "): " + error;
      }
  for (const auto& o : out)
    for (std::size_t i = 0; i < kGuard; ++i)
      if (o[i] != kCanary || o[o.size() - 1 - i] != kCanary) error = "global write outside an output";
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::vector<double> got(out[i].begin() + kGuard, out[i].end() - kGuard);
    results.push_back(reference::compare(got, ref64[i].values, naive[i].values, f.default_atol(p), ref64[i].checked));
  }
  return error;
}

using M = std::map<std::string, std::int64_t>;

// dims with the kernel's compile-time switches (tf32, causal, window) set to match the instantiation.
template <int kHd, int kBm, int kBn, int kW, int kSt, bool kTf32, bool kCausal, bool kWindow>
Case dkdv_case(const std::string& name, M dims) {
  dims["head_dim"] = kHd, dims["tf32"] = kTf32, dims["causal"] = kCausal;
  if (!kWindow) dims["window"] = 0, dims["sink_tokens"] = 0;
  auto c = cfg(kBm, kBn, kW, kSt);
  c.values["sink_split"] = 1;
  return {name, "attn_bwd_dkdv", KernelFn(&attn_bwd_dkdv_f32_kernel<kHd, kBm, kBn, kW, kSt, kTf32, kCausal, kWindow>), c, dims};
}
template <int kHd, int kBm, int kBn, int kW, int kSt, bool kTf32, bool kCausal, bool kWindow>
Case dq_case(const std::string& name, M dims) {
  dims["head_dim"] = kHd, dims["tf32"] = kTf32, dims["causal"] = kCausal;
  if (!kWindow) dims["window"] = 0, dims["sink_tokens"] = 0;
  return {name, "attn_bwd_dq", KernelFn(&attn_bwd_dq_f32_kernel<kHd, kBm, kBn, kW, kSt, kTf32, kCausal, kWindow>),
          cfg(kBm, kBn, kW, kSt), dims};
}

M shape(std::int64_t batch, std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t sk, std::int64_t window = 0,
        std::int64_t sinks = 0, std::int64_t learned = 0, std::int64_t bias = 0) {
  return {{"batch", batch}, {"heads_q", hq}, {"heads_kv", hkv}, {"seq_q", sq}, {"seq_k", sk}, {"window", window},
          {"sink_tokens", sinks}, {"learned_sinks", learned}, {"sink_bias", bias}};
}

// Both variants of both stages over: one query / one key, seq_q > seq_k and < seq_k under causal, GQA and
// MQA, window 1 and a band with sink tokens more than the window, learned sinks, 16 and 32 rows per warp,
// one to three stages with fewer tiles than stages, every head dim.
std::vector<Case> cases() {
  std::vector<Case> v;
  for (int tf32 = 0; tf32 < 2; ++tf32) {
    const std::string t = tf32 ? "tf32_" : "ffma_";
#define FT_KV(name, hd, bm, bn, w, st, c, win, shp) \
  v.push_back(tf32 ? dkdv_case<hd, bm, bn, w, st, true, c, win>("dkdv_" + t + name, shp) \
                   : dkdv_case<hd, bm, bn, w, st, false, c, win>("dkdv_" + t + name, shp))
#define FT_Q(name, hd, bm, bn, w, st, c, win, shp) \
  v.push_back(tf32 ? dq_case<hd, bm, bn, w, st, true, c, win>("dq_" + t + name, shp) \
                   : dq_case<hd, bm, bn, w, st, false, c, win>("dq_" + t + name, shp))
    FT_KV("d16_bm16_bn32_w2_s1_seq1", 16, 16, 32, 2, 1, false, false, shape(1, 1, 1, 1, 1));
    FT_KV("d64_bm32_bn64_w4_s2_causal_gqa_q45_k70", 64, 32, 64, 4, 2, true, false, shape(2, 4, 2, 45, 70));
    FT_KV("d32_bm16_bn32_w1_s3_causal_q70_k17", 32, 16, 32, 1, 3, true, false, shape(1, 2, 1, 70, 17));
    FT_KV("d32_bm64_bn64_w4_s2_causal_window_sinks_q90_k90", 32, 64, 64, 4, 2, true, true, shape(1, 4, 1, 90, 90, 9, 13, 1, 2));
    FT_KV("d128_bm16_bn32_w2_s2_window1_q40_k33", 128, 16, 32, 2, 2, false, true, shape(1, 2, 2, 40, 33, 1, 0));
    FT_Q("d16_bm32_bn32_w2_s1_seq1", 16, 32, 32, 2, 1, false, false, shape(1, 1, 1, 1, 1));
    FT_Q("d64_bm64_bn32_w2_s2_causal_gqa_q70_k45", 64, 64, 32, 2, 2, true, false, shape(2, 4, 2, 70, 45));
    FT_Q("d32_bm16_bn16_w1_s3_causal_q17_k50", 32, 16, 16, 1, 3, true, false, shape(1, 2, 1, 17, 50, 0, 0, 1, 3));
    FT_Q("d32_bm32_bn32_w1_s2_causal_window_sinks_q90_k90", 32, 32, 32, 1, 2, true, true, shape(1, 4, 1, 90, 90, 9, 13));
    FT_Q("d128_bm32_bn32_w2_s2_window1_q33_k40", 128, 32, 32, 2, 2, false, true, shape(1, 2, 2, 33, 40, 1, 0));
#undef FT_KV
#undef FT_Q
  }
  return v;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AttnBwdF32Emulated : public ::testing::TestWithParam<Case> {};

TEST_P(AttnBwdF32Emulated, MatchesTheReference) {
  const Case& k = GetParam();
  std::vector<core::Validation> r;
  ASSERT_EQ(emulate(k, r), "");
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (std::getenv("FT_VERBOSE"))
      std::printf("  output %zu: err %.3g (naive %.3g, tol %.3g)\n", i, r[i].max_abs_err, r[i].naive_err, r[i].tolerance);
    EXPECT_TRUE(r[i].passed) << "output " << i << ": max err " << r[i].max_abs_err << " tolerance " << r[i].tolerance
                             << " NaN " << r[i].nan_count;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnBwdF32Emulated, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
