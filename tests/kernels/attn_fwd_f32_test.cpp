// tests/kernels/attn_fwd_f32_test.cpp (label cpu): the fp32 attn_fwd kernels without a GPU. Every variant
// (FFMA / TF32 x causal x window x learned sinks) compiles with NVRTC for sm_80 and sm_90a; the heaviest
// configs can_run admits compile without spills; can_run gives reasons; and the kernels themselves run
// on the CPU (attn_fwd_f32_emulation.hpp) on ragged shapes and pass the family's reference check.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <map>
#include <variant>

#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/attn_fwd_f32.hpp"
#include "harness/kernels/family.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"
// Last: it defines the CUDA keywords as macros and includes the kernel.
#include "tests/kernels/attn_fwd_f32_emulation.hpp"

using namespace flashtune;

namespace {

const kernels::KernelFamily& family() {
  const auto* f = kernels::find_family("attn_fwd");
  if (!f) throw std::runtime_error("attn_fwd family not registered");
  return *f;
}

// One problem: dims as the YAML would give them; the family completes the defaults.
struct Shape {
  std::int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  bool tf32 = false, causal = false;
  std::int64_t window = 0, sink_tokens = 0;
  bool learned_sinks = false;
  std::int64_t qk_range = 1, sink_bias = 0;
};

core::Problem problem_of(const Shape& s) {
  core::Problem p{{{"batch", s.batch},
                   {"heads_q", s.heads_q},
                   {"heads_kv", s.heads_kv},
                   {"seq_q", s.seq_q},
                   {"seq_k", s.seq_k},
                   {"head_dim", s.head_dim},
                   {"causal", s.causal},
                   {"window", s.window},
                   {"sink_tokens", s.sink_tokens},
                   {"learned_sinks", s.learned_sinks},
                   {"tf32", s.tf32},
                   {"qk_range", s.qk_range},
                   {"sink_bias", s.sink_bias}},
                  core::DType::f32};
  family().complete_problem(p);
  return p;
}

// The fp32 kernel's descriptor functions on a config and problem as the runner holds them (their typed views
// built here).
std::optional<std::string> f32_can_run(const core::Config& c, const core::Problem& p, const core::DeviceLimits& d) {
  return kernels::attn_f32::can_run(kernels::attn::Tiles(c), kernels::attn::Shape(p), d);
}
std::string f32_name_expression(const core::Config& c, const core::Problem& p) {
  return kernels::attn_f32::name_expression(kernels::attn::Tiles(c), kernels::attn::Shape(p));
}
unsigned f32_smem_bytes(const core::Config& c, const core::Problem& p) {
  return kernels::attn_f32::dynamic_smem_bytes(kernels::attn::Tiles(c), kernels::attn::Shape(p));
}

core::Config config_of(std::int64_t bm, std::int64_t bn, std::int64_t warps, std::int64_t stages) {
  return core::Config{{{"block_m", bm}, {"block_n", bn}, {"num_warps", warps}, {"num_stages", stages}}};
}

// Every (block_m, num_warps) pair the family constraints allow, times block_n and num_stages.
std::vector<core::Config> default_space() {
  std::vector<core::Config> out;
  for (std::int64_t bm : {16, 32, 64, 128})
    for (std::int64_t w : {1, 2, 4, 8})
      if (bm % (16 * w) == 0 && bm / (16 * w) <= 2)
        for (std::int64_t bn : {16, 32, 64, 128})
          for (std::int64_t st : {1, 2, 3}) out.push_back(config_of(bm, bn, w, st));
  return out;
}

jit::CompileOutput compile(const std::string& name_expression, const std::string& arch) {
  static const jit::Compiler compiler(std::nullopt);
  jit::CompileRequest req;
  req.source = jit::load_template("attn_fwd_f32.cuh", std::nullopt);
  req.source_name = "attn_fwd_f32.cuh";
  req.name_expression = name_expression;
  req.arch = arch;
  req.headers = jit::template_headers(std::nullopt);
  return compiler.compile(req);
}

struct CompileCase {
  core::Config config;
  core::Problem problem;
  std::string arch;
};

// Compiles every case, two at a time (NVRTC is thread safe; this machine has few cores), and checks the
// resources: compiled, a lowered name, 1..255 registers, no spills, no stack frame beyond what spills need.
void expect_compiles_without_spills(const std::vector<CompileCase>& cases) {
  std::vector<std::future<std::pair<std::string, jit::CompileOutput>>> pending;
  auto check = [](const std::string& what, const jit::CompileOutput& out) {
    ASSERT_TRUE(out.record.ok) << what << "\n" << out.record.log;
    EXPECT_NE(out.record.lowered_name.find("attn_fwd_f32_kernel"), std::string::npos) << what;
    const auto& r = out.record.resources;
    EXPECT_GT(r.registers, 0) << what;
    EXPECT_LE(r.registers, 255) << what;
    EXPECT_EQ(r.spill_store_bytes, 0) << what;
    EXPECT_EQ(r.spill_load_bytes, 0) << what;
    EXPECT_EQ(r.shared_static_bytes, 0) << what << ": all shared memory is dynamic";
  };
  for (const auto& c : cases) {
    const std::string expr = f32_name_expression(c.config, c.problem);
    const std::string arch = c.arch;
    pending.push_back(std::async(std::launch::async, [expr, arch] {
      return std::make_pair(arch + " " + expr, compile(expr, arch));
    }));
    if (pending.size() == 2) {
      for (auto& f : pending) {
        auto [what, out] = f.get();
        check(what, out);
      }
      pending.clear();
    }
  }
  for (auto& f : pending) {
    auto [what, out] = f.get();
    check(what, out);
  }
}

// ------------------------------------------------------------------------------------------------
TEST(AttnFwdF32Host, NameExpressionAndSharedMemoryMatchTheKernel) {
  Shape s;
  s.head_dim = 64, s.causal = true, s.window = 8, s.learned_sinks = true, s.seq_q = 100, s.seq_k = 100;
  const auto c = config_of(64, 32, 4, 2);
  EXPECT_EQ(f32_name_expression(c, problem_of(s)),
            "attn_fwd_f32_kernel<64, 64, 32, 4, 2, false, true, true, true>");
  // Q 64 x 68 + 2 stages x (K, V) 32 x 68 + P 64 x 40 floats.
  EXPECT_EQ(f32_smem_bytes(c, problem_of(s)), 4u * (64 * 68 + 4 * 32 * 68 + 64 * 40));
  s.tf32 = true, s.causal = false, s.window = 0, s.learned_sinks = false;
  EXPECT_EQ(f32_name_expression(c, problem_of(s)),
            "attn_fwd_f32_kernel<64, 64, 32, 4, 2, true, false, false, false>");
  EXPECT_EQ(f32_smem_bytes(c, problem_of(s)), 4u * (64 * 68 + 4 * 32 * 68));
  // The family routes f32 here: same name, same shared memory in its launch shape.
  const auto device = core::DeviceLimits::for_arch("sm_90a");
  EXPECT_EQ(family().specialize(c, problem_of(s)).name_expression, f32_name_expression(c, problem_of(s)));
  EXPECT_EQ(family().launch_shape(c, problem_of(s), device).dynamic_smem_bytes,
            f32_smem_bytes(c, problem_of(s)));
}

TEST(AttnFwdF32Host, CanRunGivesReasons) {
  const auto h100 = core::DeviceLimits::for_arch("sm_90a");
  Shape s;
  for (bool tf32 : {false, true}) {
    s.tf32 = tf32;
    s.head_dim = 64;
    EXPECT_EQ(f32_can_run(config_of(64, 64, 4, 2), problem_of(s), h100), std::nullopt);
    auto why = [&](const core::Config& c, const core::DeviceLimits& d) {
      const auto r = f32_can_run(c, problem_of(s), d);
      return r ? *r : std::string("(runs)");
    };
    auto turing = h100;
    turing.arch = "sm_75", turing.sm_major = 7, turing.sm_minor = 5;
    EXPECT_NE(why(config_of(64, 64, 4, 2), turing).find("sm_80"), std::string::npos);
    EXPECT_NE(why(config_of(48, 64, 1, 2), h100).find("rows per warp"), std::string::npos);
    EXPECT_NE(why(config_of(128, 64, 2, 2), h100).find("rows per warp"), std::string::npos);  // 64 rows per warp
    EXPECT_NE(why(config_of(64, 8, 4, 2), h100).find("block_n"), std::string::npos);
    EXPECT_NE(why(config_of(64, 64, 4, 0), h100).find("num_stages"), std::string::npos);
    s.head_dim = 256;
    EXPECT_NE(why(config_of(128, 128, 8, 3), h100).find("shared memory"), std::string::npos);
    EXPECT_NE(why(config_of(32, 16, 1, 1), h100).find("registers"), std::string::npos);
    // A smaller device says no sooner: 64 x 64 tiles of head_dim 128 in 3 stages need ~250 KB.
    s.head_dim = 128;
    const auto a100 = core::DeviceLimits::for_arch("sm_80");
    EXPECT_NE(why(config_of(64, 64, 4, 3), a100).find("shared memory"), std::string::npos);
  }
}

// Each supported head dim has runnable configs in both variants, and what can_run admits fits the device.
TEST(AttnFwdF32Host, EveryHeadDimHasRunnableConfigs) {
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const auto device = core::DeviceLimits::for_arch(arch);
    for (bool tf32 : {false, true})
      for (std::int64_t hd : {16, 32, 64, 128, 256}) {
        Shape s;
        s.tf32 = tf32, s.head_dim = hd;
        const auto p = problem_of(s);
        int runnable = 0;
        for (const auto& c : default_space()) {
          const auto why = f32_can_run(c, p, device);
          if (why) {
            EXPECT_FALSE(why->empty());
            continue;
          }
          ++runnable;
          EXPECT_LE(std::int64_t(f32_smem_bytes(c, p)), device.max_shared_per_block_optin);
        }
        EXPECT_GT(runnable, 0) << arch << " tf32=" << tf32 << " head_dim=" << hd;
      }
  }
}

// ------------------------------------------------------------------------------------------------
// NVRTC: all 16 variants for both archs, at a typical config.
TEST(AttnFwdF32Compile, EveryVariantCompilesForSm80AndSm90a) {
  std::vector<CompileCase> cases;
  for (const char* arch : {"sm_80", "sm_90a"})
    for (int bits = 0; bits < 16; ++bits) {
      Shape s;
      s.head_dim = 64, s.tf32 = bits & 1, s.causal = bits & 2, s.learned_sinks = bits & 8;
      if (bits & 4) s.window = 16, s.sink_tokens = 4;
      cases.push_back({config_of(64, 64, 4, 2), problem_of(s), arch});
    }
  expect_compiles_without_spills(cases);
}

// For each head dim and variant, the runnable config with the largest register footprint (O and S tiles
// per lane, plus TF32's Q fragments when kept in registers; ties: the most stages), every mask switch on,
// compiles without spills for both archs. These sit at the boundary of can_run's register rule; a sweep of
// the whole default space (both archs, 1 and 3 stages near the boundary) found no spill in what it admits.
TEST(AttnFwdF32Compile, HeaviestRunnableConfigsDoNotSpill) {
  std::vector<CompileCase> cases;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const auto device = core::DeviceLimits::for_arch(arch);
    for (bool tf32 : {false, true})
      for (std::int64_t hd : {16, 32, 64, 128, 256}) {
        Shape s;
        s.tf32 = tf32, s.head_dim = hd, s.causal = true, s.window = 16, s.sink_tokens = 4, s.learned_sinks = true;
        const auto p = problem_of(s);
        std::vector<std::pair<std::int64_t, core::Config>> runnable;
        for (const auto& c : default_space()) {
          if (f32_can_run(c, p, device)) continue;
          const std::int64_t rows = c.at("block_m") / c.at("num_warps"), bn = c.at("block_n");
          const std::int64_t footprint = rows * hd + (tf32 ? rows * bn : rows * bn * 5 / 4) +
                                         (tf32 && rows * hd <= 2048 ? rows * hd : 0);
          runnable.push_back({footprint * 8 + c.at("num_stages"), c});
        }
        ASSERT_FALSE(runnable.empty());
        std::sort(runnable.begin(), runnable.end(),
                  [](const auto& a, const auto& b) { return a.first > b.first; });
        cases.push_back({runnable.front().second, p, arch});
      }
  }
  expect_compiles_without_spills(cases);
}

// ------------------------------------------------------------------------------------------------
// The kernels on the CPU emulator against the reference.

using KernelFn = void (*)(FtAttnFwdParams<float>);

struct Emulated {
  std::string error;  // emulator: deadlock, bad address, guard zone
  core::Validation o, lse;
};

// Runs `kernel` (the instantiation for config c and problem p) over the whole grid on the emulator, with
// the arguments, grid and shared memory the family gives, and validates O and LSE with the pass rule.
Emulated emulate(KernelFn kernel, const core::Config& c, const core::Problem& p, std::uint64_t seed) {
  const auto& f = family();
  Emulated r;
  const auto device = core::DeviceLimits::for_arch("sm_90a");
  const auto specs = f.buffers(p);
  std::vector<kernels::HostTensor> inputs, ref64, naive;
  std::uint64_t stream = 0;
  for (const auto& b : specs) {
    if (b.role == kernels::BufferRole::input) {
      kernels::HostTensor t{b.dtype, reference::uniform(std::size_t(b.elements), b.lo, b.hi, seed + 7919 * ++stream), {}};
      reference::round_all(b.dtype, t.values);
      inputs.push_back(std::move(t));
    } else if (b.role == kernels::BufferRole::output) {
      ref64.push_back({b.dtype, std::vector<double>(std::size_t(b.elements)), {}});
    }
  }
  naive = ref64;
  f.reference(p, inputs, ref64, kernels::RefPrecision::f64);
  f.reference(p, inputs, naive, kernels::RefPrecision::same);

  // Device buffers: inputs as floats; outputs NaN-poisoned between canary guard zones.
  constexpr std::size_t kGuard = 64;
  constexpr float kCanary = 12345.678f;
  std::vector<std::vector<float>> in(inputs.size());
  ft_emu::g_inputs.clear();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in[i].assign(inputs[i].values.begin(), inputs[i].values.end());
    ft_emu::g_inputs.push_back({reinterpret_cast<const char*>(in[i].data()), in[i].size() * 4});
  }
  std::vector<std::vector<float>> out(ref64.size());
  for (std::size_t i = 0; i < ref64.size(); ++i) {
    out[i].assign(ref64[i].values.size() + 2 * kGuard, kCanary);
    std::fill(out[i].begin() + kGuard, out[i].end() - kGuard, std::nanf(""));
  }
  // The family's parameter struct, its pointers bound to the emulator's buffers (q, k, v, sinks, o, lse).
  std::vector<std::uint64_t> addresses;
  for (auto& b : in) addresses.push_back(reinterpret_cast<std::uint64_t>(b.data()));
  for (auto& b : out) addresses.push_back(reinterpret_cast<std::uint64_t>(b.data() + kGuard));
  const auto packed = kernels::pack_kernel_args(f.arguments(c, p), addresses);
  if (packed.pointers.size() != 1) r.error = "the kernel takes one parameter struct";
  FtAttnFwdParams<float> params{};
  std::memcpy(&params, packed.pointers.at(0), sizeof params);
  const auto shape = f.launch_shape(c, p, device);
  for (unsigned z = 0; z < shape.grid[2] && r.error.empty(); ++z)
    for (unsigned y = 0; y < shape.grid[1] && r.error.empty(); ++y)
      for (unsigned x = 0; x < shape.grid[0] && r.error.empty(); ++x) {
        r.error = ft_emu::run_block({x, y, z}, int(shape.block[0]), shape.dynamic_smem_bytes, [&] {
          kernel(params);
        });
        if (!r.error.empty()) r.error = "block (" + std::to_string(x) + ", " + std::to_string(y) + ", " +
                                        std::to_string(z) + "): " + r.error;
      }
  for (const auto& buf : out)
    for (std::size_t i = 0; i < kGuard; ++i)
      if (buf[i] != kCanary || buf[buf.size() - 1 - i] != kCanary) r.error = "global write outside an output";
  const double atol = f.default_atol(p);
  auto validate = [&](std::size_t i) {
    const std::vector<double> got(out[i].begin() + kGuard, out[i].end() - kGuard);
    return reference::compare(got, ref64[i].values, naive[i].values, atol, ref64[i].checked);
  };
  r.o = validate(0);
  r.lse = validate(1);
  return r;
}

struct Case {
  std::string name;
  KernelFn kernel;
  core::Config config;
  Shape shape;
};

// The case for instantiation <kHd, kBm, kBn, kWarps, kStages, kTf32, kCausal, kWindow, kSinks> on `s`
// (whose switches are set from the template arguments, so the family's name expression must match).
template <int kHd, int kBm, int kBn, int kWarps, int kStages, bool kTf32, bool kCausal, bool kWindow, bool kSinks>
Case make_case(const std::string& name, Shape s) {
  s.head_dim = kHd, s.tf32 = kTf32, s.causal = kCausal, s.learned_sinks = kSinks;
  if (!kWindow) s.window = 0, s.sink_tokens = 0;
  if (kWindow && s.window == 0) s.window = 7;
  return {name, &attn_fwd_f32_kernel<kHd, kBm, kBn, kWarps, kStages, kTf32, kCausal, kWindow, kSinks>,
          config_of(kBm, kBn, kWarps, kStages), s};
}

Shape shape(std::int64_t batch, std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t sk,
            std::int64_t window = 0, std::int64_t sink_tokens = 0, std::int64_t qk_range = 1, std::int64_t bias = 0) {
  Shape s;
  s.batch = batch, s.heads_q = hq, s.heads_kv = hkv, s.seq_q = sq, s.seq_k = sk;
  s.window = window, s.sink_tokens = sink_tokens, s.qk_range = qk_range, s.sink_bias = bias;
  return s;
}

// Both variants over: one key, seq_q > seq_k under causal (rows that see nothing), seq_q < seq_k, GQA and
// MQA head maps, windows with sink tokens, learned sinks that dominate (bias 20) or not, large logits
// (qk_range 8), 16 and 32 rows per warp, Q fragments in registers and from shared memory (TF32), one to
// three stages with fewer tiles than stages, and every head dim.
std::vector<Case> cases() {
  std::vector<Case> v;
  for (int tf32 = 0; tf32 < 2; ++tf32) {
    const std::string t = tf32 ? "tf32_" : "ffma_";
#define FT_CASE(name, hd, bm, bn, w, st, c, win, ls, shp)                                           \
  v.push_back(tf32 ? make_case<hd, bm, bn, w, st, true, c, win, ls>(t + name, shp)               \
                   : make_case<hd, bm, bn, w, st, false, c, win, ls>(t + name, shp))
    FT_CASE("d16_bm16_bn16_w1_s1_seq1", 16, 16, 16, 1, 1, false, false, false, shape(1, 1, 1, 1, 1));
    FT_CASE("d16_bm16_bn16_w1_s3_causal_q17_k1", 16, 16, 16, 1, 3, true, false, false, shape(1, 2, 1, 17, 1));
    FT_CASE("d64_bm64_bn32_w4_s2_causal_gqa_q70_k45_qk8", 64, 64, 32, 4, 2, true, false, false,
            shape(2, 4, 2, 70, 45, 0, 0, 8));
    FT_CASE("d32_bm32_bn16_w1_s3_causal_window_sinks_q50_k83", 32, 32, 16, 1, 3, true, true, false,
            shape(1, 2, 2, 50, 83, 9, 3));
    FT_CASE("d128_bm32_bn32_w2_s2_learned_q17_k33_bias20", 128, 32, 32, 2, 2, false, false, true,
            shape(1, 2, 1, 17, 33, 0, 0, 1, 20));
    FT_CASE("d128_bm64_bn16_w2_s2_all_q40_k61", 128, 64, 16, 2, 2, true, true, true, shape(1, 2, 1, 40, 61, 11, 2));
    FT_CASE("d16_bm128_bn64_w8_s3_all_q150_k150_qk8", 16, 128, 64, 8, 3, true, true, true,
            shape(1, 1, 1, 150, 150, 20, 5, 8));
    FT_CASE("d64_bm32_bn32_w1_s2_window_q33_k100", 64, 32, 32, 1, 2, false, true, false, shape(1, 3, 1, 33, 100, 30, 0));
    FT_CASE("d32_bm64_bn128_w4_s1_learned_causal_q5_k200", 32, 64, 128, 4, 1, true, false, true,
            shape(1, 1, 1, 5, 200, 0, 0, 1, 0));
    FT_CASE("d256_bm16_bn16_w1_s2_q20_k40", 256, 16, 16, 1, 2, false, false, false, shape(1, 1, 1, 20, 40));
    FT_CASE("d64_bm64_bn32_w4_s2_causal_gqa_q300_qk30", 64, 64, 32, 4, 2, true, false, false,
            shape(1, 4, 2, 300, 300, 0, 0, 30));
#undef FT_CASE
  }
  return v;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AttnFwdF32Emulated : public testing::TestWithParam<Case> {};

TEST_P(AttnFwdF32Emulated, MatchesTheReference) {
  const Case& k = GetParam();
  const auto p = problem_of(k.shape);
  ASSERT_EQ(family().check_problem(p), std::nullopt);
  ASSERT_EQ(f32_can_run(k.config, p, core::DeviceLimits::for_arch("sm_90a")), std::nullopt);
  const auto r = emulate(k.kernel, k.config, p, 1234);
  ASSERT_EQ(r.error, "");
  if (std::getenv("FT_VERBOSE"))
    std::printf("  O err %.3g (naive %.3g, tol %.3g)  LSE err %.3g (naive %.3g, tol %.3g)\n", r.o.max_abs_err,
                r.o.naive_err, r.o.tolerance, r.lse.max_abs_err, r.lse.naive_err, r.lse.tolerance);
  EXPECT_TRUE(r.o.passed) << "O: max err " << r.o.max_abs_err << " tolerance " << r.o.tolerance << " NaN "
                          << r.o.nan_count;
  EXPECT_TRUE(r.lse.passed) << "LSE: max err " << r.lse.max_abs_err << " tolerance " << r.lse.tolerance << " NaN "
                            << r.lse.nan_count;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnFwdF32Emulated, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) { return i.param.name; });

// The emulator is strict enough to catch what it claims to: a kernel that skips the cp.async wait before
// reading Q reads poisoned shared memory, and an output written past its end hits the guard zone.
template <int kHd>
void kernel_without_wait(FtAttnFwdParams<float> p) {
  const float* q = p.q;
  float* o = p.o;
  float* lse = p.lse;
  // Q has kHd floats: threads 0 .. kHd / 4 - 1 copy 16 bytes each; O has kHd floats too.
  float* s = reinterpret_cast<float*>(ft_attn_f32_smem);
  if (threadIdx.x < kHd / 4) ft_attn_f32::cp_async_16(s + 4 * threadIdx.x, q + 4 * threadIdx.x, true);
  ft_attn_f32::cp_async_commit();
  __syncthreads();
  if (threadIdx.x < kHd) o[threadIdx.x] = s[threadIdx.x];
  if (threadIdx.x == 0) lse[0] = 0.0f;
  ft_attn_f32::cp_async_wait<0>();
}

TEST(AttnFwdF32Emulator, CatchesAMissingWait) {
  Shape s;
  s.head_dim = 16, s.seq_q = 1, s.seq_k = 1;
  const auto r = emulate(&kernel_without_wait<16>, config_of(16, 16, 1, 1), problem_of(s), 1);
  EXPECT_EQ(r.error, "");
  EXPECT_GT(r.o.nan_count, 0) << "the poisoned shared memory was read as data";
}

TEST(AttnFwdF32Emulator, CatchesADeadlock) {
  const std::string e = ft_emu::run_block({0, 0, 0}, 64, 0, [] {
    if (threadIdx.x < 32) __syncthreads();
  });
  EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
}

}  // namespace
