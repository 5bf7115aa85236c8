// tests/attention/attn_fwd_test.cpp: the attention problem and the attn_fwd descriptor on the CPU:
// optional dims and their defaults, malformed problems rejected with a reason, buffers and counts, the
// sampled-row reference equal to the full one on the rows it checks, and the fp16 / bf16 kernel
// compiled by NVRTC for sm_80 and sm_90a in every mask variant and head dim, without spills.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/attention.hpp"
#include "harness/kernels/attn_fwd.hpp"
#include "harness/kernels/family.hpp"
#include "reference/dtype.hpp"

using namespace flashtune;

namespace {

const kernels::KernelFamily& fwd() {
  const auto* f = kernels::find_family("attn_fwd");
  if (!f) throw core::Error("attn_fwd is not registered");
  return *f;
}

core::Problem problem(std::map<std::string, std::int64_t> dims, core::DType d = core::DType::f16) {
  core::Problem p{std::move(dims), d};
  for (const auto& o : fwd().optional_problem_dims()) p.dims.try_emplace(o.name, o.fallback);
  fwd().complete_problem(p);
  return p;
}

}  // namespace

TEST(AttnProblem, OptionalDimsDefaultAndSeqKAndHeadsKvFollowTheQuerySide) {
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"seq_q", 100}, {"head_dim", 64}});
  EXPECT_EQ(p.at("heads_kv"), 8);
  EXPECT_EQ(p.at("seq_k"), 100);
  EXPECT_EQ(p.at("causal"), 0);
  EXPECT_EQ(p.at("qk_range"), 1);
  EXPECT_EQ(fwd().check_problem(p), std::nullopt);
  const auto q = problem({{"batch", 1}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 10}, {"seq_k", 30}, {"head_dim", 16}});
  EXPECT_EQ(q.at("heads_kv"), 2);
  EXPECT_EQ(q.at("seq_k"), 30);
}

TEST(AttnProblem, MalformedProblemsAreRejectedWithAReason) {
  auto why = [](std::map<std::string, std::int64_t> d, core::DType t = core::DType::f16) {
    return fwd().check_problem(problem(std::move(d), t)).value_or("");
  };
  const std::map<std::string, std::int64_t> ok{{"batch", 1}, {"heads_q", 8}, {"seq_q", 10}, {"head_dim", 64}};
  auto with = [&](const std::string& k, std::int64_t v) {
    auto d = ok;
    d[k] = v;
    return d;
  };
  EXPECT_NE(why(with("heads_kv", 3)).find("multiple of heads_kv"), std::string::npos);
  EXPECT_NE(why(with("head_dim", 48)).find("head_dim 48 not supported"), std::string::npos);
  EXPECT_NE(why(with("seq_q", 0)).find("seq_q must be >= 1"), std::string::npos);
  EXPECT_NE(why(with("tf32", 1)).find("f32 only"), std::string::npos);
  EXPECT_EQ(why(with("tf32", 1), core::DType::f32), "");
  EXPECT_NE(why(with("sink_tokens", 4)).find("needs a window"), std::string::npos);
  EXPECT_NE(why(with("causal", 2)).find("0 or 1"), std::string::npos);
}

TEST(AttnProblem, ExperimentLoaderFillsOptionalDimsAndRejectsUnknownOnes) {
  const auto exp = experiment::parse_experiment(R"(
name: t
studies:
  - family: attn_fwd
    problems: [{batch: 1, heads_q: 4, seq_q: [16, 32], head_dim: 64, causal: 1, dtype: bf16}]
)", "t.yaml");
  ASSERT_EQ(exp.studies.at(0).problems.size(), 2u);
  const auto& p = exp.studies[0].problems[1];
  EXPECT_EQ(p.at("seq_k"), 32);
  EXPECT_EQ(p.at("heads_kv"), 4);
  EXPECT_EQ(p.at("window"), 0);
  try {
    experiment::parse_experiment(R"(
name: t
studies:
  - family: attn_fwd
    problems: [{batch: 1, heads_q: 4, seq_q: 16, head_dim: 64, windw: 3}]
)", "t.yaml");
    FAIL() << "a misspelt dim must be rejected";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("windw"), std::string::npos) << e.what();
  }
}

TEST(AttnProblem, BuffersAndCountsFollowTheConventions) {
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 100}, {"seq_k", 300},
                          {"head_dim", 64}, {"causal", 1}});
  const auto b = fwd().buffers(p);
  ASSERT_EQ(b.size(), 7u);
  EXPECT_EQ(b[kernels::attn::kSchedule].role, kernels::BufferRole::workspace);  // the scheduler's 2 counters
  EXPECT_EQ(b[kernels::attn::kSchedule].elements * core::dtype_size(b[kernels::attn::kSchedule].dtype), 8u);
  EXPECT_EQ(b[kernels::attn::kQ].elements, 2 * 8 * 100 * 64);
  EXPECT_EQ(b[kernels::attn::kK].elements, 2 * 2 * 300 * 64);
  EXPECT_EQ(b[kernels::attn::kSinks].elements, 8);
  EXPECT_EQ(b[kernels::attn::kLse].dtype, core::DType::f32);
  EXPECT_EQ(b[kernels::attn::kO].role, kernels::BufferRole::output);
  // Causal, seq_k - seq_q = 200: row i sees 201 + i keys.
  double pairs = 0;
  for (int i = 0; i < 100; ++i) pairs += 201 + i;
  EXPECT_DOUBLE_EQ(fwd().flops(p), 4.0 * 64 * pairs * 2 * 8);
}

TEST(AttnReference, SampledRowsAreAllRowsWhenSmallAndCoverBothEndsWhenLarge) {
  const auto small = problem({{"batch", 1}, {"heads_q", 2}, {"seq_q", 100}, {"head_dim", 64}});
  EXPECT_TRUE(kernels::attn::reference_rows(kernels::attn::Shape(small), 1e9).empty());
  const auto big = problem({{"batch", 1}, {"heads_q", 16}, {"seq_q", 16384}, {"head_dim", 128}});
  const auto rows = kernels::attn::reference_rows(kernels::attn::Shape(big), kernels::attn::kReferenceBudget);
  ASSERT_GE(rows.size(), 16u);
  EXPECT_LT(rows.size(), 16384u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), 16383);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_LE(double(rows.size()) * 16 * 16384 * 128, std::max(kernels::attn::kReferenceBudget, 16.0 * 16 * 16384 * 128));
}

TEST(AttnReference, SampledRowsEqualTheFullReferenceOnEveryCheckedRow) {
  reference::AttnShape s;
  s.batch = 2, s.heads_q = 4, s.heads_kv = 2, s.seq_q = 77, s.seq_k = 90, s.head_dim = 16;
  s.causal = true, s.window = 20, s.sink_tokens = 3, s.learned_sinks = true;
  auto q = reference::uniform(std::size_t(2 * 4 * 77 * 16), -1, 1, 1);
  auto k = reference::uniform(std::size_t(2 * 2 * 90 * 16), -1, 1, 2);
  auto v = reference::uniform(std::size_t(2 * 2 * 90 * 16), -1, 1, 3);
  auto sinks = reference::uniform(4, -1, 1, 4);
  std::vector<double> o_all, lse_all, o, lse;
  reference::attention_naive<double>(s, q, k, v, sinks, o_all, lse_all);
  const std::vector<std::int64_t> rows{0, 5, 40, 76};
  reference::attention_naive_rows<double>(s, q, k, v, sinks, rows, o, lse);
  for (std::int64_t bh = 0; bh < 8; ++bh)
    for (std::int64_t i = 0; i < 77; ++i) {
      const bool listed = std::find(rows.begin(), rows.end(), i) != rows.end();
      const std::size_t r = std::size_t(bh * 77 + i);
      if (listed) {
        EXPECT_EQ(lse[r], lse_all[r]);
        for (int d = 0; d < 16; ++d) EXPECT_EQ(o[r * 16 + d], o_all[r * 16 + d]);
      } else {
        EXPECT_TRUE(std::isinf(lse[r]) && lse[r] < 0);
      }
    }
  EXPECT_THROW(reference::attention_naive_rows<double>(s, q, k, v, sinks, {77}, o, lse), core::Error);
}

TEST(AttnReference, FamilyReferenceMarksTheRowsItChecked) {
  const auto p = problem({{"batch", 1}, {"heads_q", 64}, {"seq_q", 4096}, {"head_dim", 128}}, core::DType::bf16);
  // Only the shapes matter here: call the reference on small random inputs of the right size would be
  // costly, so check the mask bookkeeping on the sampled path through reference_rows.
  const auto rows = kernels::attn::reference_rows(kernels::attn::Shape(p), kernels::attn::kReferenceBudget);
  ASSERT_FALSE(rows.empty());
  const auto q = problem({{"batch", 1}, {"heads_q", 2}, {"seq_q", 3000}, {"seq_k", 3000}, {"head_dim", 128}});
  std::vector<kernels::HostTensor> in, out;
  for (const auto& b : fwd().buffers(q)) {
    if (b.role == kernels::BufferRole::input)
      in.push_back({b.dtype, reference::uniform(std::size_t(b.elements), b.lo, b.hi, 9), {}});
    else if (b.role == kernels::BufferRole::output)
      out.push_back({b.dtype, std::vector<double>(std::size_t(b.elements)), {}});
  }
  for (auto& t : in) reference::round_all(t.dtype, t.values);
  fwd().reference(q, in, out, kernels::RefPrecision::f64);
  const bool sampled = !kernels::attn::reference_rows(kernels::attn::Shape(q), kernels::attn::kReferenceBudget).empty();
  EXPECT_EQ(out[0].checked.empty(), !sampled);
  if (sampled) {
    ASSERT_EQ(out[0].checked.size(), out[0].values.size());
    EXPECT_EQ(out[1].checked[0], 1);
    EXPECT_EQ(out[1].checked[2999], 1);
  }
}

// Every mask variant and head dim of the fp16 / bf16 kernel compiles for both archs, within the
// register file and without spills in the default configuration.
TEST(AttnFwdCompile, EveryVariantAndHeadDimCompilesForSm80AndSm90a) {
  jit::Compiler compiler(std::nullopt);
  const auto headers = jit::template_headers(std::nullopt);
  const std::string source = jit::load_template("attn_fwd.cuh", std::nullopt);
  const core::Config c{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}}};
  int compiled = 0;
  for (const char* arch : {"sm_80", "sm_90a"})
    for (core::DType dt : {core::DType::f16, core::DType::bf16})
      for (int hd : {16, 32, 64, 128})
        for (int variant = 0; variant < 8; ++variant) {
          // Every head dim with all switches on and off; at head_dim 64 every combination.
          if (hd != 64 && variant != 0 && variant != 7) continue;
          std::map<std::string, std::int64_t> dims{{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", hd}};
          if (variant & 1) dims["causal"] = 1;
          if (variant & 2) dims["window"] = 32, dims["sink_tokens"] = 4;
          if (variant & 4) dims["learned_sinks"] = 1;
          const auto p = problem(dims, dt);
          const auto spec = fwd().specialize(c, p);
          jit::CompileRequest req;
          req.source = source;
          req.source_name = "attn_fwd.cuh";
          req.name_expression = spec.name_expression;
          req.arch = arch;
          req.headers = headers;
          const auto out = compiler.compile(req);
          ASSERT_TRUE(out.record.ok) << spec.name_expression << " " << arch << "\n" << out.record.log;
          EXPECT_GT(out.record.resources.registers, 32) << spec.name_expression;
          EXPECT_LE(out.record.resources.registers, 255) << spec.name_expression;
          EXPECT_EQ(out.record.resources.spill_store_bytes, 0) << spec.name_expression << " " << arch;
          EXPECT_EQ(fwd().can_run(c, p, core::DeviceLimits::for_arch(arch)), std::nullopt);
          ++compiled;
        }
  EXPECT_EQ(compiled, 2 * 2 * (3 * 2 + 8));
}

TEST(AttnFwdCanRun, RejectsWithReasons) {
  const auto d = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}});
  const core::Config bad_rows{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 1}, {"num_stages", 2}}};
  EXPECT_NE(fwd().can_run(bad_rows, p, d).value_or("").find("rows per warp"), std::string::npos);
  const core::Config big{{{"block_m", 128}, {"block_n", 128}, {"num_warps", 4}, {"num_stages", 3}}};
  const auto p256 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 256}});
  EXPECT_NE(fwd().can_run(big, p256, d).value_or("").find("shared memory"), std::string::npos);
  const core::Config ok{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}}};
  EXPECT_EQ(fwd().can_run(ok, p, d), std::nullopt);
  const auto s = fwd().launch_shape(ok, p, d);
  EXPECT_EQ(s.grid[0], 2u);
  EXPECT_EQ(s.grid[1], 4u);
  EXPECT_EQ(s.block[0], 128u);
  EXPECT_EQ(s.dynamic_smem_bytes, (64u + 2 * 2 * 64) * 128 * 2);
}

// block_n 16 and 32 on wgmma (m64n16k16 / m64n32k16 for Q K^T, P V in one or two k16 steps): short windowed
// rows waste fewer keys on thin tiles. Both compile for sm_90a without spills on the GPT-OSS variant, packed
// and unpacked; other tile widths are turned away with a reason.
TEST(AttnFwdCompile, WgmmaKeyTilesOf16And32CompileWithoutSpills) {
  const auto d = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 1}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 333}, {"head_dim", 64},
                          {"causal", 1}, {"window", 128}, {"learned_sinks", 1}},
                         core::DType::bf16);
  jit::Compiler compiler(std::nullopt);
  const auto headers = jit::template_headers(std::nullopt);
  const std::string source = jit::load_template("attn_fwd_sm90.cuh", std::nullopt);
  for (std::int64_t bn : {16, 32})
    for (std::int64_t pack : {1, 4}) {
      const core::Config c{{{"block_m", 64}, {"block_n", bn}, {"num_warps", 4}, {"num_stages", 2}, {"mma", 90},
                            {"mma_pipe", 2}, {"pack_heads", pack}}};
      ASSERT_EQ(fwd().can_run(c, p, d), std::nullopt) << bn << " " << pack;
      const auto spec = fwd().specialize(c, p);
      EXPECT_NE(spec.name_expression.find("attn_fwd_wgmma_kernel<ft_bf16, 64, " + std::to_string(bn) + ", 1, 2, 2,"),
                std::string::npos)
          << spec.name_expression;
      jit::CompileRequest req;
      req.source = source;
      req.source_name = "attn_fwd_sm90.cuh";
      req.name_expression = spec.name_expression;
      req.arch = "sm_90a";
      req.headers = headers;
      const auto out = compiler.compile(req);
      ASSERT_TRUE(out.record.ok) << spec.name_expression << "\n" << out.record.log;
      EXPECT_EQ(out.record.resources.spill_store_bytes, 0) << spec.name_expression;
    }
  const core::Config odd{{{"block_m", 64}, {"block_n", 48}, {"num_warps", 4}, {"num_stages", 1}, {"mma", 90}}};
  EXPECT_NE(fwd().can_run(odd, p, d).value_or("").find("block_n must be 16, 32, 64 or 128"), std::string::npos);
}

// pack_heads (wgmma only): a block holds block_m / pack_heads queries of pack_heads query heads of one GQA
// group; the grid shrinks accordingly, the name expression gains the count, and what cannot be packed is
// turned away with a reason.
TEST(AttnFwdCanRun, PackHeadsPacksAGqaGroupIntoOneWgmmaBlock) {
  const auto d = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 2}, {"heads_q", 16}, {"heads_kv", 2}, {"seq_q", 1000}, {"head_dim", 64},
                          {"causal", 1}, {"window", 128}, {"learned_sinks", 1}},
                         core::DType::bf16);
  auto cfg = [](std::int64_t bm, std::int64_t warps, std::int64_t pack) {
    return core::Config{{{"block_m", bm}, {"block_n", 64}, {"num_warps", warps}, {"num_stages", 2}, {"mma", 90},
                         {"pack_heads", pack}}};
  };
  EXPECT_EQ(fwd().can_run(cfg(128, 8, 8), p, d), std::nullopt);
  const auto s = fwd().launch_shape(cfg(128, 8, 8), p, d);
  EXPECT_EQ(s.grid[0], 63u);  // ceil(1000 / 16 queries)
  EXPECT_EQ(s.grid[1], 2u);   // 16 heads / 8 per block
  EXPECT_EQ(s.grid[2], 2u);
  EXPECT_EQ(fwd().specialize(cfg(128, 8, 8), p).name_expression,
            "attn_fwd_wgmma_kernel<ft_bf16, 64, 64, 2, 2, 1, 1, 1, true, true, true, 8>");
  // pack 1, or no key: the name expression of the unpacked kernel (the template's default), one head per block
  EXPECT_EQ(fwd().specialize(cfg(64, 4, 1), p).name_expression,
            "attn_fwd_wgmma_kernel<ft_bf16, 64, 64, 1, 2, 1, 1, 1, true, true, true>");
  EXPECT_EQ(fwd().launch_shape(cfg(64, 4, 1), p, d).grid[1], 16u);
  EXPECT_NE(fwd().can_run(cfg(64, 4, 3), p, d).value_or("").find("must divide the GQA group (heads_q / heads_kv = 8)"),
            std::string::npos);
  const auto mha = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}}, core::DType::bf16);
  EXPECT_NE(fwd().can_run(cfg(64, 4, 2), mha, d).value_or("").find("GQA group"), std::string::npos);
  auto mma80 = cfg(64, 4, 2);
  mma80.values["mma"] = 80;
  EXPECT_NE(fwd().can_run(mma80, p, d).value_or("").find("pack_heads, mma_sched, exp_poly, rescale and persistent are wgmma (mma 90 / 91)"), std::string::npos);
  const auto p32 = problem({{"batch", 1}, {"heads_q", 4}, {"heads_kv", 1}, {"seq_q", 100}, {"head_dim", 64}}, core::DType::f32);
  mma80.values["block_m"] = 32, mma80.values["num_warps"] = 2;
  EXPECT_NE(fwd().can_run(mma80, p32, d).value_or("").find("fp32 uses mma 80 and 1 for each of them"), std::string::npos);
}

// mma 91's arguments: the forward's struct grown to FtAttnFwdTmaParams, with the four tensor maps over Q, K, V and O
// (64 columns; Q: block_m / pack_heads rows x pack_heads heads, K and V: block_n rows, O: one warpgroup's 64 rows),
// and the schedule counter bound.
TEST(AttnFwdTma, ArgumentsCarryTheFourTensorMaps) {
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 300}, {"head_dim", 128}}, core::DType::bf16);
  const core::Config c{{{"mma", 91}, {"block_m", 128}, {"block_n", 128}, {"num_warps", 8}, {"num_stages", 2},
                        {"pack_heads", 2}, {"persistent", 3}}};
  const auto args = fwd().arguments(c, p);
  ASSERT_EQ(args.size(), 1u);
  const auto& a = std::get<kernels::ParamsArg>(args[0]);
  ASSERT_EQ(a.bytes.size(), sizeof(FtAttnFwdTmaParams<void>));
  using Tma = FtAttnFwdTmaParams<void>;
  struct Want {
    int buffer;
    std::uint64_t seq, heads;
    std::vector<std::uint32_t> box;
  };
  const std::map<std::size_t, Want> want{
      {offsetof(Tma, q_map), {kernels::attn::kQ, 300, 8, {64, 64, 2, 1}}},
      {offsetof(Tma, k_map), {kernels::attn::kK, 300, 2, {64, 128, 1, 1}}},
      {offsetof(Tma, v_map), {kernels::attn::kV, 300, 2, {64, 128, 1, 1}}},
      {offsetof(Tma, o_map), {kernels::attn::kO, 300, 8, {64, 64, 1, 1}}}};
  ASSERT_EQ(a.maps.size(), want.size());
  for (const auto& m : a.maps) {
    ASSERT_TRUE(want.count(m.offset)) << "map at " << m.offset;
    const auto& w = want.at(m.offset);
    EXPECT_EQ(m.buffer, w.buffer);
    EXPECT_EQ(m.dims, (std::vector<std::uint64_t>{128, w.seq, w.heads, 2}));
    EXPECT_EQ(m.strides, (std::vector<std::uint64_t>{128 * 2, w.seq * 128 * 2, w.heads * w.seq * 128 * 2}));
    EXPECT_EQ(m.box, w.box) << "map at " << m.offset;
  }
  bool sched = false;
  for (const auto& ptr : a.pointers) sched |= ptr.offset == offsetof(Tma, sched) && ptr.buffer == kernels::attn::kSchedule;
  EXPECT_TRUE(sched);
}
