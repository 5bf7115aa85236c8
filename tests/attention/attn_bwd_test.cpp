// tests/attention/attn_bwd_test.cpp: the attention backward families on the CPU: registered, one stage
// each; arguments are one parameter struct binding every buffer; launch shapes cover the problem; can_run gives reasons;
// the references (O built so rowsum(dO * O) is the D input, sampled rows) agree with the naive backward;
// the same-precision reference passes the pass rule and a perturbed output fails; and every kernel of
// every mask variant and head dim compiles with NVRTC for sm_80 and sm_90a without spills.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <set>
#include <sstream>

#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/attn_bwd.hpp"
#include "harness/kernels/family.hpp"
#include "kernel_templates/attn_params.cuh"
#include "reference/attention_bwd.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"
#include "tests/kernels/kernel_test_support.hpp"

using namespace flashtune;

namespace {

using flashtune::testing::default_space;

const char* kFamilies[] = {"attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq", "attn_bwd_dq_delta", "attn_bwd_dsink"};

const kernels::KernelFamily& fam(const std::string& name) {
  const auto* f = kernels::find_family(name);
  if (!f) throw core::Error(name + " is not registered");
  return *f;
}

core::Problem problem(const kernels::KernelFamily& f, std::map<std::string, std::int64_t> dims,
                      core::DType d = core::DType::f16) {
  core::Problem p{std::move(dims), d};
  for (const auto& o : f.optional_problem_dims()) p.dims.try_emplace(o.name, o.fallback);
  f.complete_problem(p);
  return p;
}

// The entry functions of a ptxas log that spill, with their register counts.
std::string spilling_kernels(const std::string& log) {
  std::string out, current;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (const auto at = line.find("Compiling entry function '"); at != std::string::npos) current = line.substr(at + 26);
    if (line.find("bytes spill stores") != std::string::npos && line.find(" 0 bytes spill stores") == std::string::npos)
      out += current + ": " + line + "\n";
  }
  return out;
}

}  // namespace

TEST(AttnBwdFamilies, AreRegisteredEachAsItsOwnStage) {
  std::set<std::string> stages;
  for (const char* name : kFamilies) {
    const auto& f = fam(name);
    // The row kernels have a template of their own; dK / dV, dQ (mma.sync) share attn_bwd.cuh.
    const bool rows = std::string(name) == "attn_bwd_preprocess" || std::string(name) == "attn_bwd_dsink";
    EXPECT_EQ(f.template_file(), rows ? "attn_bwd_rows.cuh" : "attn_bwd.cuh") << name;
    EXPECT_FALSE(f.description().empty());
    // f16, bf16, f32 (attn_bwd_f32_test.cpp); dq_delta: f16, bf16
    EXPECT_EQ(f.dtypes().size(), std::string(name) == "attn_bwd_dq_delta" ? 2u : 3u) << name;
    stages.insert(f.stage());
  }
  EXPECT_EQ(stages.size(), 5u);
}

// Every backward kernel takes one FtAttnBwdParams; the host binds each of the stage's buffers to one pointer
// member: the const members (Q, K, V, O, dO, LSE, sinks) to inputs, dQ / dK / dV / dsinks to outputs, ws to
// the workspace, and D to an input (dkdv, dq, fused, dsink) or the output (preprocess, dq_delta).
TEST(AttnBwdFamilies, ArgumentsAreOneParamsStructBindingEveryBuffer) {
  using P = FtAttnBwdParams<void>;
  const std::set<std::size_t> inputs{offsetof(P, q),    offsetof(P, k),   offsetof(P, v),    offsetof(P, o),
                                     offsetof(P, dout), offsetof(P, lse), offsetof(P, sinks)};
  const std::set<std::size_t> outputs{offsetof(P, dq), offsetof(P, dk), offsetof(P, dv), offsetof(P, dsinks)};
  const std::string source = flashtune::testing::read_template("attn_bwd.cuh") +
                             flashtune::testing::read_template("attn_bwd_rows.cuh") +
                             flashtune::testing::read_template("attn_bwd_sm90.cuh") +
                             flashtune::testing::read_template("attn_bwd_f32.cuh");
  for (const char* name : kFamilies)
    for (std::int64_t mma : {80, 90, 32}) {  // dkdv: the mma.sync and the wgmma kernel; 32: the fp32 kernels
      const auto& f = fam(name);
      if (mma == 32 && f.name() != "attn_bwd_dkdv" && f.name() != "attn_bwd_dq") continue;  // one kernel for all dtypes
      auto dims = std::map<std::string, std::int64_t>{{"batch", 2}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 33},
                                                      {"seq_k", 70}, {"head_dim", 64}, {"learned_sinks", 1}};
      const auto p = problem(f, dims, mma == 32 ? core::DType::f32 : core::DType::f16);
      ASSERT_EQ(f.check_problem(p), std::nullopt) << name;
      core::Config c;
      for (const auto& t : f.tunables()) c.values[t.name] = t.values[t.values.size() / 2];
      if (!c.values.count("mma") && mma == 90) continue;
      if (c.values.count("mma")) c.values["mma"] = mma == 32 ? 80 : mma;
      const std::string expr = f.specialize(c, p).name_expression;
      const std::string kernel = expr.substr(0, expr.find('<'));
      EXPECT_TRUE(flashtune::testing::takes_params_struct(source, kernel, "FtAttnBwdParams")) << kernel;
      const auto args = f.arguments(c, p);
      const auto buffers = f.buffers(p);
      ASSERT_EQ(flashtune::testing::check_params_arg(args, sizeof(P), buffers), "") << name << " mma " << mma;
      for (const auto& ptr : std::get<kernels::ParamsArg>(args[0]).pointers) {
        const auto role = buffers[std::size_t(ptr.buffer)].role;
        const std::string what = std::string(name) + " member at byte " + std::to_string(ptr.offset);
        if (inputs.count(ptr.offset)) EXPECT_EQ(role, kernels::BufferRole::input) << what;
        if (outputs.count(ptr.offset)) EXPECT_EQ(role, kernels::BufferRole::output) << what;
        if (ptr.offset == offsetof(P, ws)) EXPECT_EQ(role, kernels::BufferRole::workspace) << what;
        const bool writes_delta = f.name() == "attn_bwd_preprocess" || f.name() == "attn_bwd_dq_delta";
        if (ptr.offset == offsetof(P, delta))
          EXPECT_EQ(role, writes_delta ? kernels::BufferRole::output : kernels::BufferRole::input) << what;
      }
    }
}

TEST(AttnBwdFamilies, ProblemsAreCheckedWithReasons) {
  const auto& dq = fam("attn_bwd_dq");
  const std::map<std::string, std::int64_t> ok{{"batch", 1}, {"heads_q", 4}, {"seq_q", 10}, {"head_dim", 64}};
  EXPECT_EQ(dq.check_problem(problem(dq, ok)), std::nullopt);
  EXPECT_EQ(dq.check_problem(problem(dq, ok, core::DType::f32)), std::nullopt);
  auto d256 = ok;
  d256["head_dim"] = 256;
  EXPECT_NE(dq.check_problem(problem(dq, d256)).value_or("").find("head_dim 256"), std::string::npos);
  const auto& ds = fam("attn_bwd_dsink");
  EXPECT_NE(ds.check_problem(problem(ds, ok)).value_or("").find("learned_sinks"), std::string::npos);
  const auto& dqd = fam("attn_bwd_dq_delta");
  EXPECT_EQ(dqd.check_problem(problem(dqd, ok, core::DType::bf16)), std::nullopt);
  EXPECT_NE(dqd.check_problem(problem(dqd, ok, core::DType::f32)).value_or("").find("attn_bwd_preprocess + attn_bwd_dq"),
            std::string::npos);
}

// attn_bwd_dq_delta's reference: D = rowsum(dO * O) of its O input, and the dQ that attn_bwd_dq's reference
// gives for that D (dQ sees O only through D), on every row; its kernel is attn_bwd_dq_delta_kernel, with
// attn_bwd_dq_kernel's template arguments.
TEST(AttnBwdReference, DqDeltaIsTheDqOfItsOwnD) {
  const auto& dqd = fam("attn_bwd_dq_delta");
  const auto& dq = fam("attn_bwd_dq");
  for (int variant = 0; variant < 2; ++variant) {
    std::map<std::string, std::int64_t> dims{{"batch", 2}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 29},
                                             {"seq_k", 41}, {"head_dim", 32}};
    if (variant) dims["causal"] = 1, dims["window"] = 9, dims["sink_tokens"] = 2;
    const auto p = problem(dqd, dims, core::DType::bf16);
    std::vector<kernels::HostTensor> in, out;
    flashtune::testing::make_tensors(dqd, p, 11 + variant, in, out);
    ASSERT_EQ(in.size(), 6u);
    ASSERT_EQ(out.size(), 2u);
    dqd.reference(p, in, out, kernels::RefPrecision::f64);
    const auto& o = in[kernels::attn_bwd::kDqdO].values;
    const auto& dout = in[kernels::attn_bwd::kDout].values;
    const auto& delta = out[1].values;
    ASSERT_EQ(delta.size(), std::size_t(2 * 4 * 29));
    for (std::size_t r = 0; r < delta.size(); ++r) {
      double sum = 0;
      for (std::size_t e = 0; e < 32; ++e) sum += o[r * 32 + e] * dout[r * 32 + e];
      ASSERT_NEAR(delta[r], sum, 1e-12) << r;
    }
    // attn_bwd_dq on the same Q, K, V, dO, LSE with this D as its input
    std::vector<kernels::HostTensor> in_dq(in.begin(), in.begin() + 5), out_dq{out[0]};
    in_dq.push_back(out[1]);
    dq.reference(p, in_dq, out_dq, kernels::RefPrecision::f64);
    ASSERT_EQ(out_dq[0].values.size(), out[0].values.size());
    double biggest = 0;
    for (std::size_t i = 0; i < out[0].values.size(); ++i) {
      ASSERT_NEAR(out[0].values[i], out_dq[0].values[i], 1e-12) << i;
      biggest = std::max(biggest, std::abs(out[0].values[i]));
    }
    EXPECT_GT(biggest, 1e-2);
  }
  const auto p = problem(dqd, {{"batch", 1}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 64}, {"head_dim", 64}},
                         core::DType::bf16);
  core::Config c{{{"block_m", 32}, {"block_n", 32}, {"num_warps", 1}, {"num_stages", 1}, {"min_blocks", 12}}};
  EXPECT_EQ(dqd.specialize(c, p).name_expression, "attn_bwd_dq_delta_kernel<ft_bf16, 64, 32, 32, 1, 1, false, false, 12>");
  c.values["pack_heads"] = 2;
  EXPECT_EQ(dqd.specialize(c, p).name_expression, "attn_bwd_dq_delta_kernel<ft_bf16, 64, 32, 32, 1, 1, false, false, 12, 2>");
  EXPECT_EQ(dq.specialize(c, p).name_expression, "attn_bwd_dq_kernel<ft_bf16, 64, 32, 32, 1, 1, false, false, 12, 2>");
  EXPECT_EQ(dqd.flops(p), dq.flops(p) + 2.0 * 8 * 64 * 64);
}

TEST(AttnBwdFamilies, EveryDefaultConfigIsRejectedWithAReasonOrCoversTheProblem) {
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  for (const char* name : kFamilies) {
    const auto& f = fam(name);
    int runnable = 0;
    for (std::int64_t hd : {16, 32, 64, 128})
      for (std::int64_t seq : {1, 100, 1000}) {
        const auto p = problem(f, {{"batch", 3}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", seq}, {"seq_k", seq + 7},
                                   {"head_dim", hd}, {"learned_sinks", 1}});
        for (const auto& c : default_space(f)) {
          const std::string what = std::string(name) + " " + p.key() + " " + c.key();
          if (const auto why = f.can_run(c, p, dev)) {
            EXPECT_FALSE(why->empty()) << what;
            continue;
          }
          ++runnable;
          const auto s = f.launch_shape(c, p, dev);
          EXPECT_EQ(s.threads_per_block(), 32 * c.at("num_warps")) << what;
          EXPECT_LE(s.dynamic_smem_bytes, unsigned(dev.max_shared_per_block_optin)) << what;
          if (f.name() == "attn_bwd_dkdv") {
            EXPECT_EQ(std::int64_t(s.grid[0]), (p.at("seq_k") + c.at("block_n") - 1) / c.at("block_n")) << what;
            EXPECT_EQ(s.grid[1], 2u) << what;
            EXPECT_EQ(s.grid[2], 3u) << what;
          } else if (f.name() == "attn_bwd_dsink") {
            EXPECT_EQ(s.grid[0], 8u) << what;
          } else {
            EXPECT_EQ(std::int64_t(s.grid[0]), (seq + c.at("block_m") - 1) / c.at("block_m")) << what;
            EXPECT_EQ(s.grid[1], 8u) << what;
          }
        }
      }
    EXPECT_GT(runnable, 0) << name;
  }
}

TEST(AttnBwdFamilies, CanRunRejectsBadConfigsWithReasons) {
  const auto dev = core::DeviceLimits::for_arch("sm_80");
  const auto& dkdv = fam("attn_bwd_dkdv");
  const auto p = problem(dkdv, {{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}});
  const core::Config ok{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 1}}};
  EXPECT_EQ(dkdv.can_run(ok, p, dev), std::nullopt);
  const core::Config deep{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}}};
  EXPECT_NE(dkdv.can_run(deep, p, dev).value_or("").find("registers"), std::string::npos);
  const core::Config rows{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 8}, {"num_stages", 2}}};
  EXPECT_NE(dkdv.can_run(rows, p, dev).value_or("").find("rows per warp"), std::string::npos);
  const core::Config regs{{{"block_m", 128}, {"block_n", 128}, {"num_warps", 4}, {"num_stages", 1}}};
  EXPECT_NE(dkdv.can_run(regs, p, dev).value_or("").find("registers"), std::string::npos);
  const auto& dq = fam("attn_bwd_dq");
  const core::Config smem{{{"block_m", 64}, {"block_n", 128}, {"num_warps", 4}, {"num_stages", 4}}};
  EXPECT_NE(dq.can_run(smem, p, dev).value_or("").find("shared memory"), std::string::npos);
}

// dkdv's Hopper kernel (mma 90): sm_90a only, a warpgroup per 64 keys, block_m 64 / 128, head_dim a
// multiple of 64, no sink-token split; configs without the key stay mma 80; its smem and name expression.
TEST(AttnBwdFamilies, DkdvWgmmaIsCheckedAndSpecialized) {
  const auto sm80 = core::DeviceLimits::for_arch("sm_80"), sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto& dkdv = fam("attn_bwd_dkdv");
  const auto p = problem(dkdv, {{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}}, core::DType::bf16);
  auto cfg = [](std::int64_t bm, std::int64_t bn, std::int64_t warps, std::int64_t stages) {
    return core::Config{{{"block_m", bm}, {"block_n", bn}, {"num_warps", warps}, {"num_stages", stages}, {"mma", 90}}};
  };
  const auto ok = cfg(64, 128, 8, 2);
  EXPECT_EQ(dkdv.can_run(ok, p, sm90), std::nullopt);
  EXPECT_NE(dkdv.can_run(ok, p, sm80).value_or("").find("needs sm_90a"), std::string::npos);
  EXPECT_EQ(dkdv.specialize(ok, p).name_expression, "attn_bwd_dkdv_wgmma_kernel<ft_bf16, 128, 64, 2, 2, false, false>");
  // K, V (2 x 128 x 128 x 2 B), two stages of Q, dO (2 x 64 x 128 x 2 B) + LSE, D (512 B) rounded to 1 KiB, align.
  EXPECT_EQ(dkdv.launch_shape(ok, p, sm90).dynamic_smem_bytes, unsigned(65536 + 2 * 33792 + 1024));
  EXPECT_EQ(dkdv.launch_shape(ok, p, sm90).grid[0], 1u);
  EXPECT_EQ(dkdv.launch_shape(ok, p, sm90).threads_per_block(), 256);
  EXPECT_NE(dkdv.can_run(cfg(64, 64, 8, 1), p, sm90).value_or("").find("64 keys per warpgroup"), std::string::npos);
  EXPECT_NE(dkdv.can_run(cfg(32, 64, 4, 1), p, sm90).value_or("").find("block_m must be 64 or 128"), std::string::npos);
  EXPECT_NE(dkdv.can_run(cfg(128, 64, 4, 1), p, sm90).value_or("").find("registers"), std::string::npos);  // d128
  const auto p32 = problem(dkdv, {{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 32}}, core::DType::bf16);
  EXPECT_NE(dkdv.can_run(cfg(64, 64, 4, 1), p32, sm90).value_or("").find("multiple of 64"), std::string::npos);
  auto split = cfg(64, 64, 4, 1);
  split.values["sink_split"] = 4;
  const auto ps = problem(dkdv, {{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}, {"causal", 1},
                                 {"window", 16}, {"sink_tokens", 4}}, core::DType::bf16);
  EXPECT_NE(dkdv.can_run(split, ps, sm90).value_or("").find("sink_split must be 1"), std::string::npos);
  split.values["sink_split"] = 1;
  EXPECT_EQ(dkdv.can_run(split, ps, sm90), std::nullopt);
  auto bad = cfg(64, 64, 4, 1);
  bad.values["mma"] = 70;
  EXPECT_NE(dkdv.can_run(bad, p, sm90).value_or("").find("mma must be 80"), std::string::npos);
  // Without the key: mma 80, the mma.sync kernel.
  const core::Config old{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 1}}};
  EXPECT_EQ(dkdv.specialize(old, p).name_expression.rfind("attn_bwd_dkdv_kernel<", 0), 0u);
}

// pack_heads (attn_bwd_dq, fp16 / bf16): block_m / pack_heads queries of pack_heads heads of one GQA group
// per block, after min_blocks in the name expression; the grid shrinks; what cannot be packed is turned away.
TEST(AttnBwdFamilies, PackHeadsPacksAGqaGroupIntoOneDqBlock) {
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto& dq = fam("attn_bwd_dq");
  const std::map<std::string, std::int64_t> gpt{{"batch", 3}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 300}, {"head_dim", 64},
                                                {"causal", 1}, {"window", 128}, {"learned_sinks", 1}};
  const auto p = problem(dq, gpt, core::DType::bf16);
  auto cfg = [](std::int64_t bm, std::int64_t warps, std::int64_t pack) {
    return core::Config{{{"block_m", bm}, {"block_n", 32}, {"num_warps", warps}, {"num_stages", 2}, {"min_blocks", 4},
                         {"pack_heads", pack}}};
  };
  EXPECT_EQ(dq.can_run(cfg(64, 2, 4), p, sm90), std::nullopt);
  EXPECT_EQ(dq.specialize(cfg(64, 2, 4), p).name_expression, "attn_bwd_dq_kernel<ft_bf16, 64, 64, 32, 2, 2, true, true, 4, 4>");
  EXPECT_EQ(dq.specialize(cfg(64, 2, 1), p).name_expression, "attn_bwd_dq_kernel<ft_bf16, 64, 64, 32, 2, 2, true, true, 4>");
  const auto s = dq.launch_shape(cfg(64, 2, 4), p, sm90);
  EXPECT_EQ(s.grid[0], 19u);  // ceil(300 / 16 queries)
  EXPECT_EQ(s.grid[1], 2u);   // 8 heads / 4 per block
  EXPECT_EQ(s.grid[2], 3u);
  EXPECT_EQ(dq.launch_shape(cfg(64, 2, 1), p, sm90).grid[1], 8u);
  EXPECT_NE(dq.can_run(cfg(64, 2, 3), p, sm90).value_or("").find("must divide the GQA group (heads_q / heads_kv = 4)"),
            std::string::npos);
  auto mqa = gpt;
  mqa["heads_q"] = 32, mqa["heads_kv"] = 1;
  EXPECT_NE(dq.can_run(cfg(16, 1, 32), problem(dq, mqa, core::DType::bf16), sm90).value_or("").find("must divide block_m 16"),
            std::string::npos);
  EXPECT_EQ(dq.can_run(cfg(16, 1, 4), p, sm90), std::nullopt);  // 4 queries of 4 heads
  const auto p32 = problem(dq, gpt, core::DType::f32);
  auto c32 = cfg(32, 2, 2);
  c32.values["min_blocks"] = 1;
  EXPECT_NE(dq.can_run(c32, p32, sm90).value_or("").find("fp16 / bf16 option"), std::string::npos);
}

// min_blocks (attn_bwd_dq and attn_bwd_dkdv's mma 80, fp16 / bf16): the last template argument, checked
// against threads, shared memory and registers per SM; capped, the kernel compiles into fewer registers.
TEST(AttnBwdFamilies, MinBlocksCapsTheMmaSyncKernelsRegisters) {
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto& dq = fam("attn_bwd_dq");
  const auto& dkdv = fam("attn_bwd_dkdv");
  const std::map<std::string, std::int64_t> gpt{{"batch", 1}, {"heads_q", 8}, {"heads_kv", 1}, {"seq_q", 300}, {"head_dim", 64},
                                                {"causal", 1}, {"window", 128}, {"learned_sinks", 1}};
  const auto p = problem(dq, gpt, core::DType::bf16);
  auto cfg = [](std::int64_t bm, std::int64_t bn, std::int64_t warps, std::int64_t mb) {
    return core::Config{{{"block_m", bm}, {"block_n", bn}, {"num_warps", warps}, {"num_stages", 2}, {"min_blocks", mb}}};
  };
  EXPECT_EQ(dq.can_run(cfg(32, 32, 2, 8), p, sm90), std::nullopt);
  const std::string name = dq.specialize(cfg(32, 32, 2, 8), p).name_expression;
  EXPECT_EQ(name, "attn_bwd_dq_kernel<ft_bf16, 64, 32, 32, 2, 2, true, true, 8>");
  EXPECT_EQ(dq.specialize(core::Config{{{"block_m", 32}, {"block_n", 32}, {"num_warps", 2}, {"num_stages", 2}}}, p).name_expression,
            "attn_bwd_dq_kernel<ft_bf16, 64, 32, 32, 2, 2, true, true, 1>");  // without the key: no cap
  // 4 x 128 threads: 128 registers, fewer than the 96 accumulators and ~40 others; 12 x 24 KiB of shared memory
  EXPECT_NE(dq.can_run(cfg(64, 64, 4, 4), p, sm90).value_or("").find("caps registers at 128"), std::string::npos);
  EXPECT_NE(dq.can_run(cfg(32, 32, 2, 12), p, sm90).value_or("").find("shared memory"), std::string::npos);
  EXPECT_NE(dq.can_run(cfg(64, 32, 4, 17), p, sm90).value_or("").find("threads > 2048"), std::string::npos);
  EXPECT_NE(dq.can_run(cfg(32, 32, 2, 0), p, sm90).value_or("").find("1..32"), std::string::npos);
  const auto p32 = problem(dq, gpt, core::DType::f32);
  EXPECT_NE(dq.can_run(cfg(32, 32, 2, 4), p32, sm90).value_or("").find("fp16 / bf16 option"), std::string::npos);
  EXPECT_EQ(dq.specialize(cfg(32, 32, 2, 1), p32).name_expression.find(", 1>"), std::string::npos);  // fp32: its own kernel
  // dkdv: mma 80 takes it, mma 90 does not.
  auto k80 = core::Config{{{"block_m", 32}, {"block_n", 32}, {"num_warps", 2}, {"num_stages", 2}, {"mma", 80}, {"min_blocks", 6}}};
  EXPECT_EQ(dkdv.can_run(k80, p, sm90), std::nullopt);
  EXPECT_EQ(dkdv.specialize(k80, p).name_expression, "attn_bwd_dkdv_kernel<ft_bf16, 64, 32, 32, 2, 2, true, true, 6>");
  auto k90 = core::Config{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}, {"mma", 90}, {"min_blocks", 2}}};
  EXPECT_NE(dkdv.can_run(k90, p, sm90).value_or("").find("mma 80 option"), std::string::npos);

  // ptxas: uncapped the dq kernel takes more than 128 registers; min_blocks 8 (2 warps) caps it at 128, unspilled.
  const std::string source = flashtune::testing::read_template("attn_bwd.cuh");
  const auto free = flashtune::testing::compile_instantiations(
      source, "attn_bwd.cuh", {flashtune::testing::attn_instantiation(dq.specialize(cfg(32, 32, 2, 1), p).name_expression)}, "sm_90a");
  const auto capped = flashtune::testing::compile_instantiations(
      source, "attn_bwd.cuh", {flashtune::testing::attn_instantiation(name)}, "sm_90a");
  ASSERT_TRUE(free.record.ok && capped.record.ok) << free.record.log.substr(0, 2000) << capped.record.log.substr(0, 2000);
  EXPECT_GT(free.max_registers, 128);
  EXPECT_LE(capped.max_registers, 128);
  EXPECT_EQ(capped.spilling, 0) << spilling_kernels(capped.record.log);
}

// The sink-token split of dkdv: extra blocks per key tile holding sink tokens (window only), an fp32
// workspace of kMaxSinkSplit + 1 slots of the sink rows, sink_split and reduce passed to the kernel.
TEST(AttnBwdFamilies, DkdvSinkSplitSizesTheGridAndWorkspace) {
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  const auto& dkdv = fam("attn_bwd_dkdv");
  auto config = [](std::int64_t split) {
    return core::Config{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 1}, {"sink_split", split}}};
  };
  const std::map<std::string, std::int64_t> base{{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 1000}, {"head_dim", 16}, {"causal", 1}};
  auto sinks = base;
  sinks["window"] = 64, sinks["sink_tokens"] = 100;  // 100 sink tokens: key tiles 0 and 1 of 64 keys
  const auto p = problem(dkdv, sinks);
  const auto workspace = dkdv.buffers(p).at(kernels::attn_bwd::kWorkspace);
  EXPECT_EQ(workspace.role, kernels::BufferRole::workspace);
  EXPECT_EQ(workspace.dtype, core::DType::f32);
  // the larger of the sink split's (dK and dV x batch x heads_kv x slots x rows x dim) and the item split's 16 slots
  // of (dK and dV x batch x heads_kv x seq_k x dim)
  const std::int64_t item_slots = 16 * 2 * 2 * 2 * 1000 * 16;
  EXPECT_EQ(workspace.elements, std::max<std::int64_t>(2 * 2 * 2 * 65 * 100 * 16, item_slots));
  for (std::int64_t split : {1, 5, 64}) {
    const auto c = config(split);
    ASSERT_EQ(dkdv.can_run(c, p, dev), std::nullopt) << split;
    const auto s = dkdv.launch_shape(c, p, dev);
    EXPECT_EQ(s.grid[0], unsigned(16 + (split > 1 ? 2 * split : 0))) << split;  // 1000 keys: 16 tiles
    const auto args = dkdv.arguments(c, p);
    ASSERT_EQ(flashtune::testing::check_params_arg(args, sizeof(FtAttnBwdParams<void>), dkdv.buffers(p)), "");
    const auto& a = std::get<kernels::ParamsArg>(args[0]);
    FtAttnBwdParams<void> prm;
    std::memcpy(&prm, a.bytes.data(), sizeof prm);
    EXPECT_EQ(prm.sink_tokens, 100);
    EXPECT_EQ(prm.sink_split, split);
    EXPECT_EQ(prm.reduce, 0);  // the main launch
    const auto ws = std::find_if(a.pointers.begin(), a.pointers.end(),
                                 [](const auto& ptr) { return ptr.offset == offsetof(FtAttnBwdParams<void>, ws); });
    ASSERT_NE(ws, a.pointers.end());
    EXPECT_EQ(ws->buffer, int(kernels::attn_bwd::kWorkspace));
  }
  // sink tokens past seq_k: every key tile holds sinks, the workspace rows stop at seq_k
  auto few_keys = sinks;
  few_keys["seq_k"] = 40;
  const auto pk = problem(dkdv, few_keys);
  EXPECT_EQ(dkdv.buffers(pk).at(kernels::attn_bwd::kWorkspace).elements,
            std::max<std::int64_t>(2 * 2 * 2 * 65 * 40 * 16, 16 * 2 * 2 * 2 * 40 * 16));
  EXPECT_EQ(dkdv.launch_shape(config(3), pk, dev).grid[0], 1u + 3u);
  // No sink tile to split: sink_split > 1 is refused with a reason and the workspace holds the item split's only.
  for (const auto& dims : {base, [&] { auto d = base; d["window"] = 64; return d; }(),
                           [&] { auto d = base; d["sink_tokens"] = 4; return d; }()}) {
    const auto q = problem(dkdv, dims);
    EXPECT_EQ(dkdv.buffers(q).at(kernels::attn_bwd::kWorkspace).elements, item_slots) << q.key();
    EXPECT_EQ(dkdv.can_run(config(1), q, dev), std::nullopt) << q.key();
    EXPECT_NE(dkdv.can_run(config(4), q, dev).value_or("").find("sink_split > 1 needs"), std::string::npos) << q.key();
    EXPECT_EQ(dkdv.launch_shape(config(1), q, dev).grid[0], 16u) << q.key();
  }
  EXPECT_NE(dkdv.can_run(config(65), p, dev).value_or("").find("sink_split must be in 1..64"), std::string::npos);
  EXPECT_TRUE(dkdv.launches_itself());
  // the workspace is scratch: not part of the bytes moved
  double io = 0;
  for (const auto& b : dkdv.buffers(p))
    if (b.role != kernels::BufferRole::workspace) io += double(b.elements) * double(core::dtype_size(b.dtype));
  EXPECT_EQ(dkdv.bytes_moved(p), io);
}

// The item split of dkdv (mma 80): item_split blocks per key tile, block x = tile * item_split + chunk, an fp32
// workspace of max_item_split slots of dK and dV of every key row (within 64 MiB), item_split passed to the kernel;
// refused past the workspace, beside an active sink_split, and by mma 90 and the fp32 kernel.
TEST(AttnBwdFamilies, DkdvItemSplitSizesTheGridAndWorkspace) {
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  const auto& dkdv = fam("attn_bwd_dkdv");
  auto config = [](std::int64_t items, std::int64_t sinks = 1) {
    return core::Config{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 1}, {"sink_split", sinks},
                         {"item_split", items}}};
  };
  // GStar stage 8: MQA 16 / 1, seq 4096, head_dim 16: 64 key tiles of 64; one slot is 2 x 4096 x 16 floats
  const auto p = problem(dkdv, {{"batch", 1}, {"heads_q", 16}, {"heads_kv", 1}, {"seq_q", 4096}, {"head_dim", 16}, {"causal", 1}});
  const auto workspace = dkdv.buffers(p).at(kernels::attn_bwd::kWorkspace);
  EXPECT_EQ(workspace.role, kernels::BufferRole::workspace);
  EXPECT_EQ(workspace.elements, 16 * 2 * 4096 * 16);
  for (std::int64_t items : {1, 3, 16}) {
    const auto c = config(items);
    ASSERT_EQ(dkdv.can_run(c, p, dev), std::nullopt) << items;
    EXPECT_EQ(dkdv.launch_shape(c, p, dev).grid[0], unsigned(64 * items)) << items;
    const auto args = dkdv.arguments(c, p);
    ASSERT_EQ(flashtune::testing::check_params_arg(args, sizeof(FtAttnBwdParams<void>), dkdv.buffers(p)), "");
    FtAttnBwdParams<void> prm;
    std::memcpy(&prm, std::get<kernels::ParamsArg>(args[0]).bytes.data(), sizeof prm);
    EXPECT_EQ(prm.item_split, items);
    EXPECT_EQ(prm.sink_split, 1);
    EXPECT_EQ(prm.reduce, 0);
  }
  EXPECT_NE(dkdv.can_run(config(17), p, dev).value_or("").find("item_split must be in 1..16"), std::string::npos);
  // a problem whose slot is 2 x 8 x 8192 x 128 x 4 bytes = 64 MiB admits no item split, and has no workspace
  const auto big = problem(dkdv, {{"batch", 1}, {"heads_q", 32}, {"heads_kv", 8}, {"seq_q", 8192}, {"head_dim", 128}, {"causal", 1}});
  EXPECT_EQ(dkdv.buffers(big).at(kernels::attn_bwd::kWorkspace).elements, 0);
  EXPECT_EQ(dkdv.can_run(config(1), big, dev), std::nullopt);
  EXPECT_NE(dkdv.can_run(config(2), big, dev).value_or("").find("admits item_split <= 1"), std::string::npos);
  // half that admits 2: the workspace holds two slots
  const auto half = problem(dkdv, {{"batch", 1}, {"heads_q", 32}, {"heads_kv", 4}, {"seq_q", 8192}, {"head_dim", 128}, {"causal", 1}});
  EXPECT_EQ(dkdv.buffers(half).at(kernels::attn_bwd::kWorkspace).elements, 2 * 2 * 4 * 8192 * 128);
  EXPECT_EQ(dkdv.can_run(config(2), half, dev), std::nullopt);
  EXPECT_NE(dkdv.can_run(config(3), half, dev).value_or("").find("admits item_split <= 2"), std::string::npos);
  // beside the sink-token split: refused where that split is active, allowed where it is not (no sink tiles)
  const auto sinks = problem(dkdv, {{"batch", 1}, {"heads_q", 16}, {"heads_kv", 1}, {"seq_q", 4096}, {"head_dim", 16},
                                    {"causal", 1}, {"window", 256}, {"sink_tokens", 4}});
  EXPECT_EQ(dkdv.can_run(config(4), sinks, dev), std::nullopt);
  EXPECT_EQ(dkdv.can_run(config(1, 8), sinks, dev), std::nullopt);
  EXPECT_NE(dkdv.can_run(config(4, 8), sinks, dev).value_or("").find("exclude each other"), std::string::npos);
  // the workspace serves both: the larger of the sink split's and the item split's
  EXPECT_EQ(dkdv.buffers(sinks).at(kernels::attn_bwd::kWorkspace).elements, 16 * 2 * 4096 * 16);
  // the other variants refuse it
  const auto d64 = problem(dkdv, {{"batch", 1}, {"heads_q", 16}, {"heads_kv", 1}, {"seq_q", 4096}, {"head_dim", 64}, {"causal", 1}});
  auto wgmma = core::Config{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}, {"mma", 90}, {"item_split", 1}}};
  EXPECT_EQ(dkdv.can_run(wgmma, d64, dev), std::nullopt);
  wgmma.values["item_split"] = 4;
  EXPECT_NE(dkdv.can_run(wgmma, d64, dev).value_or("").find("item_split must be 1"), std::string::npos);
  const auto f32 = problem(dkdv, {{"batch", 1}, {"heads_q", 16}, {"heads_kv", 1}, {"seq_q", 512}, {"head_dim", 64}, {"causal", 1}},
                           core::DType::f32);
  EXPECT_NE(dkdv.can_run(config(4), f32, dev).value_or("").find("item_split 1"), std::string::npos);
}

// The runner's data path on the CPU: inputs filled as it fills them, both references, the pass rule.
TEST(AttnBwdReference, SamePrecisionPassesAndAPerturbedOutputFails) {
  for (const char* name : kFamilies)
    for (core::DType d : {core::DType::f16, core::DType::bf16})
      for (int variant = 0; variant < 3; ++variant) {
        const auto& f = fam(name);
        std::map<std::string, std::int64_t> dims{{"batch", 2}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 37},
                                                 {"seq_k", 45}, {"head_dim", 16}, {"learned_sinks", 1}};
        if (variant == 1) dims["causal"] = 1, dims["window"] = 8, dims["sink_tokens"] = 3;
        if (variant == 2) dims["sink_bias"] = 20, dims["heads_kv"] = 1;
        const auto p = problem(f, dims, d);
        std::vector<kernels::HostTensor> in, ref64, naive;
        flashtune::testing::make_tensors(f, p, 5 + variant, in, ref64);
        naive = ref64;
        f.reference(p, in, ref64, kernels::RefPrecision::f64);
        f.reference(p, in, naive, kernels::RefPrecision::same);
        for (std::size_t o = 0; o < ref64.size(); ++o) {
          const std::string what = std::string(name) + " " + p.key() + " output " + std::to_string(o);
          const auto ok = reference::compare(naive[o].values, ref64[o].values, naive[o].values, f.default_atol(p),
                                             ref64[o].checked);
          EXPECT_TRUE(ok.passed) << what;
          EXPECT_LE(ok.naive_err, 2 * f.default_atol(p)) << what;
          double biggest = 0;
          for (double v : ref64[o].values) biggest = std::max(biggest, std::abs(v));
          EXPECT_GT(biggest, 10 * f.default_atol(p)) << what << ": outputs too small to check anything";
          auto bad = naive[o].values;
          bad[bad.size() / 2] += 3 * ok.tolerance + 1e-3;
          EXPECT_FALSE(reference::compare(bad, ref64[o].values, naive[o].values, f.default_atol(p)).passed) << what;
        }
      }
}

// The dkdv / dq references are the naive backward with an O whose rowsum(dO * O) is the D input, and on
// sampled rows equal the whole computation.
TEST(AttnBwdReference, GradientStagesMatchTheNaiveBackwardAndSampleRowsWhenLarge) {
  const auto& dkdv = fam("attn_bwd_dkdv");
  const auto& dq = fam("attn_bwd_dq");
  const auto p = problem(dkdv, {{"batch", 1}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 29}, {"seq_k", 41},
                                {"head_dim", 32}, {"causal", 1}, {"window", 9}, {"sink_tokens", 2}});
  std::vector<kernels::HostTensor> in, out_kv, out_q;
  flashtune::testing::make_tensors(dkdv, p, 3, in, out_kv);
  out_q.push_back(out_kv[0]);
  out_q[0].values.resize(in[kernels::attn_bwd::kQ].values.size());
  dkdv.reference(p, in, out_kv, kernels::RefPrecision::f64);
  dq.reference(p, in, out_q, kernels::RefPrecision::f64);
  // Direct: D = rowsum(dO * O) recomputed from a consistent O must be the D input.
  reference::AttnShape s;
  s.batch = 1, s.heads_q = 4, s.heads_kv = 2, s.seq_q = 29, s.seq_k = 41, s.head_dim = 32;
  s.causal = true, s.window = 9, s.sink_tokens = 2;
  std::vector<double> o(in[kernels::attn_bwd::kDout].values.size());
  const auto& dout = in[kernels::attn_bwd::kDout].values;
  const auto& delta = in[kernels::attn_bwd::kDelta].values;
  for (std::size_t r = 0; r < delta.size(); ++r) {  // O = D e_0 / dO_0: rowsum(dO * O) = D again
    o[r * 32] = delta[r] / dout[r * 32];
  }
  reference::AttnGrads g;
  reference::attention_backward_naive<double>(s, in[0].values, in[1].values, in[2].values, {}, o, in[4].values, dout, g);
  for (std::size_t i = 0; i < g.dk.size(); ++i) {
    ASSERT_NEAR(out_kv[0].values[i], g.dk[i], 1e-12) << i;
    ASSERT_NEAR(out_kv[1].values[i], g.dv[i], 1e-12) << i;
  }
  for (std::size_t i = 0; i < g.dq.size(); ++i) ASSERT_NEAR(out_q[0].values[i], g.dq[i], 1e-12) << i;
  EXPECT_TRUE(out_kv[0].checked.empty());
  EXPECT_TRUE(out_q[0].checked.empty());

  // Large: only sampled rows are computed and marked.
  const auto big = problem(dq, {{"batch", 1}, {"heads_q", 8}, {"seq_q", 4096}, {"head_dim", 128}});
  std::vector<kernels::HostTensor> bin, bout;
  flashtune::testing::make_tensors(dq, big, 4, bin, bout);
  dq.reference(big, bin, bout, kernels::RefPrecision::f64);
  ASSERT_EQ(bout[0].checked.size(), bout[0].values.size());
  std::size_t marked = 0;
  for (auto c : bout[0].checked) marked += c;
  EXPECT_GT(marked, 0u);
  EXPECT_LT(marked, bout[0].values.size());
  EXPECT_EQ(bout[0].checked[0], 1);
  EXPECT_EQ(bout[0].checked.back(), 1);
}

// Every mask variant (causal x window) of each kernel at every head dim compiles for both archs without
// spills; and every default config of dkdv and dq that can_run accepts compiles without spills at the
// head dims where registers are tightest (64, 128), in the heaviest variant.
TEST(AttnBwdCompile, EveryVariantHeadDimAndDefaultConfigCompilesWithoutSpills) {
  // The mma.sync kernels, the row kernels and the Hopper dK / dV kernel, each from its own template (one unit).
  const std::string source = "#include \"attn_bwd.cuh\"\n#include \"attn_bwd_rows.cuh\"\n#include \"attn_bwd_sm90.cuh\"\n";
  for (const std::string arch : {"sm_80", "sm_90a"}) {
    const auto dev = core::DeviceLimits::for_arch(arch);
    // Uncapped configs must not spill; a config whose min_blocks > 1 caps its registers asks for that trade
    // (the tuner measures it: the GPT-OSS dq winner, min_blocks 12, spills a few bytes with every mask on), so
    // those need only compile.
    std::vector<std::string> names, capped_names;
    auto add = [&](const kernels::KernelFamily& f, const core::Config& c, const core::Problem& p) {
      if (f.can_run(c, p, dev)) return;
      (c.get("min_blocks", 1) > 1 ? capped_names : names).push_back(f.specialize(c, p).name_expression);
    };
    for (core::DType d : {core::DType::f16, core::DType::bf16})
      for (std::int64_t hd : {16, 32, 64, 128})
        for (int variant = 0; variant < 4; ++variant)
          for (const char* name : kFamilies) {
            const auto& f = fam(name);
            std::map<std::string, std::int64_t> dims{{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", hd},
                                                     {"learned_sinks", 1}};
            if (variant & 1) dims["causal"] = 1;
            if (variant & 2) dims["window"] = 16, dims["sink_tokens"] = 4;
            const auto p = problem(f, dims, d);
            const auto space = default_space(f);
            if (std::string(name) == "attn_bwd_dkdv" || std::string(name).rfind("attn_bwd_dq", 0) == 0) {
              if (variant == 3 && d == core::DType::bf16 && hd >= 64)
                for (const auto& c : space) add(f, c, p);
              else
                add(f, core::Config{{{"block_m", 32}, {"block_n", 64}, {"num_warps", 2}, {"num_stages", 2}}}, p);
              if (std::string(name) == "attn_bwd_dkdv")  // the Hopper kernel (sm_90a, head dims 64, 128)
                add(f, core::Config{{{"block_m", 64}, {"block_n", 64}, {"num_warps", 4}, {"num_stages", 2}, {"mma", 90}}}, p);
            } else if (variant == 0) {
              for (const auto& c : space) add(f, c, p);
            }
          }
    for (auto* list : {&names, &capped_names}) {
      std::sort(list->begin(), list->end());
      list->erase(std::unique(list->begin(), list->end()), list->end());
      std::vector<std::string> inst;
      for (const auto& n : *list) inst.push_back(flashtune::testing::attn_instantiation(n));
      ASSERT_GE(inst.size(), list == &names ? 60u : 20u) << arch;
      const auto r = flashtune::testing::compile_instantiations_parallel(source, "attn_bwd_kernels.cu", inst, arch);
      ASSERT_TRUE(r.record.ok) << arch << "\n" << r.record.log.substr(0, 4000);
      EXPECT_EQ(r.entries, int(inst.size())) << arch;
      if (list == &names) EXPECT_EQ(r.spilling, 0) << arch << "\n" << spilling_kernels(r.record.log);
      EXPECT_LE(r.max_registers, 255) << arch;
    }
  }
}
