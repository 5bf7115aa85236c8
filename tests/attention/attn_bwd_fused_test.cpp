// tests/attention/attn_bwd_fused_test.cpp: the attn_bwd_fused family (dK, dV and dQ in one pass, sm_90a
// wgmma, dQ through fp32 atomics) on the CPU: its own stage, its parameter struct and bindings, reasons
// for what it cannot run, its shared memory, grid and workspace; and every config of its default space that
// can_run admits compiles with NVRTC for sm_90a (without spills at head_dim 64). The GPU side is in
// tests/attention/attn_bwd_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <regex>
#include <set>

#include "harness/kernels/attn_bwd.hpp"
#include "harness/kernels/attn_bwd_ways.hpp"
#include "harness/kernels/family.hpp"
#include "kernel_templates/attn_params.cuh"
#include "tests/kernels/kernel_test_support.hpp"

using namespace flashtune;

namespace {

const kernels::KernelFamily& fused() {
  const auto* f = kernels::find_family("attn_bwd_fused");
  if (!f) throw core::Error("attn_bwd_fused is not registered");
  return *f;
}

core::Problem problem(std::map<std::string, std::int64_t> dims, core::DType d = core::DType::bf16) {
  core::Problem p{std::move(dims), d};
  for (const auto& o : fused().optional_problem_dims()) p.dims.try_emplace(o.name, o.fallback);
  fused().complete_problem(p);
  return p;
}

core::Config cfg(std::int64_t bm, std::int64_t bn, std::int64_t warps, std::int64_t stages) {
  return core::Config{{{"block_m", bm}, {"block_n", bn}, {"num_warps", warps}, {"num_stages", stages}}};
}

// The compile tests' sweep: head dims 64 and 128, plain and the heaviest mask (causal, window, sink tokens), bf16;
// block_m 64 / 128, one or two warpgroups (block_n 64 per warpgroup), 1 or 2 stages, at the given mma.
template <typename Visit>
void for_each_swept_config(std::int64_t mma, Visit&& visit) {
  for (std::int64_t hd : {64, 128})
    for (bool masks : {false, true}) {
      std::map<std::string, std::int64_t> dims{{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", hd}};
      if (masks) dims["causal"] = 1, dims["window"] = 16, dims["sink_tokens"] = 4;
      const auto p = problem(dims);
      for (std::int64_t bm : {64, 128})
        for (std::int64_t warps : {4, 8})
          for (std::int64_t stages : {1, 2}) {
            auto c = cfg(bm, 16 * warps, warps, stages);
            c.values["mma"] = mma;
            visit(c, p);
          }
    }
}

// The largest "N bytes spill stores" of a compile log.
int most_spill(const std::string& log) {
  static const std::regex spill(R"(([0-9]+) bytes spill stores)");
  int m = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator(); ++it)
    m = std::max(m, std::stoi((*it)[1]));
  return m;
}

// A TMA kernel config: its name expression, its own template whose kernel takes FtAttnBwdTmaParams, and arguments
// that are that struct binding every buffer once; returns the struct's argument (empty after a failure).
kernels::ParamsArg expect_tma_kernel(const kernels::KernelFamily& f, const core::Config& c, const core::Problem& p,
                                     const std::string& name, const std::string& file) {
  const auto spec = f.specialize(c, p);
  EXPECT_EQ(spec.name_expression, name);
  EXPECT_EQ(spec.template_file, file);
  const std::string kernel = name.substr(0, name.find('<'));
  EXPECT_TRUE(flashtune::testing::takes_params_struct(flashtune::testing::read_template(file), kernel, "FtAttnBwdTmaParams"));
  const auto args = f.arguments(c, p);
  const std::string bad = flashtune::testing::check_params_arg(args, sizeof(FtAttnBwdTmaParams<void>), f.buffers(p));
  EXPECT_EQ(bad, "");
  return bad.empty() ? std::get<kernels::ParamsArg>(args[0]) : kernels::ParamsArg{};
}

// Each (config, problem) is admitted by can_run on sm_90a, and their mma 91 instantiations compile together for
// sm_90a without ptxas serializing wgmma (C751x).
void expect_mma91_compiles(const std::vector<std::pair<core::Config, core::Problem>>& cases) {
  const auto& f = fused();
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  std::vector<std::string> inst;
  for (const auto& [c, p] : cases) {
    ASSERT_EQ(f.can_run(c, p, sm90), std::nullopt) << c.key();
    inst.push_back(flashtune::testing::attn_instantiation(f.specialize(c, p).name_expression));
  }
  const auto r = flashtune::testing::compile_instantiations_parallel(flashtune::testing::read_template("attn_bwd_sm90_tma.cuh"),
                                                                     "attn_bwd_sm90_tma.cuh", inst, "sm_90a");
  ASSERT_TRUE(r.record.ok) << r.record.log.substr(0, 4000);
  EXPECT_EQ(r.entries, int(inst.size()));
  EXPECT_EQ(r.record.log.find("C751"), std::string::npos) << r.record.log;
}

}  // namespace

TEST(AttnBwdFused, IsItsOwnStageBesideDkdvAndDq) {
  const auto& f = fused();
  EXPECT_EQ(f.stage(), "backward_fused");
  EXPECT_EQ(f.template_file(), "attn_bwd_sm90.cuh");
  EXPECT_TRUE(f.launches_itself());
  std::set<std::string> stages;
  for (const char* name : {"attn_bwd_preprocess", "attn_bwd_dkdv", "attn_bwd_dq", "attn_bwd_dsink", "attn_bwd_fused"})
    stages.insert(kernels::find_family(name)->stage());
  EXPECT_EQ(stages.size(), 5u);
}

TEST(AttnBwdFused, ArgumentsAreOneParamsStruct) {
  const auto& f = fused();
  const std::string source = flashtune::testing::read_template("attn_bwd_sm90.cuh");
  const auto p = problem({{"batch", 2}, {"heads_q", 4}, {"heads_kv", 2}, {"seq_q", 33}, {"seq_k", 70}, {"head_dim", 64}});
  const auto c = cfg(64, 128, 8, 2);
  const std::string expr = f.specialize(c, p).name_expression;
  EXPECT_EQ(expr, "attn_bwd_fused_wgmma_kernel<ft_bf16, 64, 64, 2, 2, false, false>");
  EXPECT_TRUE(flashtune::testing::takes_params_struct(source, "attn_bwd_fused_wgmma_kernel", "FtAttnBwdParams"));
  const auto args = f.arguments(c, p);
  const auto buffers = f.buffers(p);
  ASSERT_EQ(flashtune::testing::check_params_arg(args, sizeof(FtAttnBwdParams<void>), buffers), "");
  // The outputs in order, then the accumulator (bound to ws); `convert` 0 for the main launch.
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedDq].name, "dq");
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedDk].name, "dk");
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedDv].name, "dv");
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedAcc].role, kernels::BufferRole::workspace);
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedAcc].dtype, core::DType::f32);
  // whole 64-row blocks (mma 91's layout), then mma 91's turn counters: one per 64 x 64 piece, and one per (batch,
  // kv head) pair (its blocks' finished dQ writers, what the convert launch waits for), then mma 91's split tail
  // for its 2 x 2 x 2 blocks of 64 keys (a counter per consumer thread and one more each, a pad, 3 partials each)
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedAcc].elements, 2 * 4 * 64 * 64 + 2 * 4 + 2 * 2 + 8 * 257 + 4 + 8 * 3 * 256 * 64);
  const auto& a = std::get<kernels::ParamsArg>(args[0]);
  FtAttnBwdParams<void> prm;
  std::memcpy(&prm, a.bytes.data(), sizeof prm);
  EXPECT_EQ(prm.convert, 0);
  const std::map<std::size_t, int> expected{{offsetof(FtAttnBwdParams<void>, dq), kernels::attn_bwd::kFusedDq},
                                            {offsetof(FtAttnBwdParams<void>, dk), kernels::attn_bwd::kFusedDk},
                                            {offsetof(FtAttnBwdParams<void>, dv), kernels::attn_bwd::kFusedDv},
                                            {offsetof(FtAttnBwdParams<void>, ws), kernels::attn_bwd::kFusedAcc}};
  for (const auto& ptr : a.pointers)
    if (expected.count(ptr.offset)) EXPECT_EQ(ptr.buffer, expected.at(ptr.offset)) << "member at " << ptr.offset;
}

TEST(AttnBwdFused, CanRunGivesReasonsAndTheShapeCoversTheKeys) {
  const auto& f = fused();
  const auto sm80 = core::DeviceLimits::for_arch("sm_80"), sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 3}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 1000}, {"seq_k", 300}, {"head_dim", 128}});
  const auto ok = cfg(64, 128, 8, 2);
  EXPECT_EQ(f.can_run(ok, p, sm90), std::nullopt);
  EXPECT_NE(f.can_run(ok, p, sm80).value_or("").find("needs sm_90a"), std::string::npos);
  EXPECT_NE(f.can_run(cfg(64, 64, 8, 1), p, sm90).value_or("").find("64 keys per warpgroup"), std::string::npos);
  EXPECT_NE(f.can_run(cfg(32, 64, 4, 1), p, sm90).value_or("").find("block_m must be 64 or 128"), std::string::npos);
  EXPECT_NE(f.can_run(cfg(64, 64, 4, 5), p, sm90).value_or("").find("num_stages"), std::string::npos);
  // head_dim 128 with 128-row items: S^T, dP^T and a 128-column dQ piece beside dK, dV do not fit.
  EXPECT_NE(f.can_run(cfg(128, 128, 8, 1), p, sm90).value_or("").find("registers"), std::string::npos);
  const auto p32 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 32}});
  EXPECT_NE(f.can_run(cfg(64, 64, 4, 1), p32, sm90).value_or("").find("multiple of 64"), std::string::npos);
  const auto s = f.launch_shape(ok, p, sm90);
  EXPECT_EQ(s.grid[0], 3u);  // 300 keys in tiles of 128
  EXPECT_EQ(s.grid[1], 2u);
  EXPECT_EQ(s.grid[2], 3u);
  EXPECT_EQ(s.threads_per_block(), 256);
  // K, V (2 x 128 x 128 x 2 B), dS^T (128 x 64 x 2 B), two stages of Q, dO + LSE, D rounded to 1 KiB, align.
  EXPECT_EQ(s.dynamic_smem_bytes, unsigned(65536 + 16384 + 2 * 33792 + 1024));
  // The backward's FLOPs: 10 head_dim per visible pair and query head, all pairs without a mask.
  EXPECT_DOUBLE_EQ(f.flops(p), 10.0 * 128 * 3 * 8 * 1000 * 300);
  EXPECT_NE(f.check_problem(problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}}, core::DType::f32))
                .value_or(""),
            "");
}

// Every default mma 90 config can_run admits, in the heaviest mask variant (causal, window, sink tokens) and plain,
// bf16, and one config in fp16, compiles for sm_90a. Head dim 64: no spills, but for the 128-row items, which sit
// at the 255-register cap: the windowed ones spill 12 bytes since P^T moved into ft/attn_bwd.cuh (session 22; 0
// with the same code inline), and the plain two-warpgroup one 32 since dQ's descriptors are stepped from one base
// (session 28; before, it spilled nothing but ptxas serialized its wgmma, C7511). Head dim 128 (one config shape
// fits: 64-row items, two warpgroups): dK, dV (128 registers) beside S^T, dP^T and a 64-column dQ piece sit at the
// cap and ptxas spills a few words (4 to 20 bytes seen with NVRTC 13.0); more than 32 bytes would mean the kernel
// grew.
TEST(AttnBwdFused, EveryAdmittedDefaultConfigCompilesForSm90a) {
  const auto& f = fused();
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  std::vector<std::string> inst[2];  // head dim 64, 128
  auto add = [&](const core::Config& c, const core::Problem& p) {
    if (f.can_run(c, p, dev)) return;
    const std::string n = f.specialize(c, p).name_expression;
    inst[p.at("head_dim") == 128].push_back(flashtune::testing::attn_instantiation(n));
  };
  for_each_swept_config(90, add);
  add(cfg(64, 128, 8, 2), problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}}, core::DType::f16));
  ASSERT_EQ(inst[0].size(), 16u);
  ASSERT_EQ(inst[1].size(), 5u);
  const std::string source = flashtune::testing::read_template("attn_bwd_sm90.cuh");
  const auto d64 = flashtune::testing::compile_instantiations_parallel(source, "attn_bwd_sm90.cuh", inst[0], "sm_90a");
  ASSERT_TRUE(d64.record.ok) << d64.record.log.substr(0, 4000);
  EXPECT_EQ(d64.entries, int(inst[0].size()));
  EXPECT_LE(d64.spilling, 2) << d64.record.log;
  const auto d128 = flashtune::testing::compile_instantiations_parallel(source, "attn_bwd_sm90.cuh", inst[1], "sm_90a");
  ASSERT_TRUE(d128.record.ok) << d128.record.log.substr(0, 4000);
  EXPECT_EQ(d128.entries, int(inst[1].size()));
  EXPECT_LE(most_spill(d64.record.log), 32) << d64.record.log;
  EXPECT_LE(most_spill(d128.record.log), 32) << d128.record.log;
  EXPECT_LE(std::max(d64.max_registers, d128.max_registers), 255);
}

// mma 91, the warp-specialized TMA kernel: its own template and name, the backward's struct grown by the four
// tensor maps (Q and dO boxes of block_m rows, K and V of block_n, 64 columns each), 128 producer threads on top of
// num_warps, its shared memory, and reasons for what it cannot run.
TEST(AttnBwdFused, Mma91IsTheTmaKernelWithFourTensorMaps) {
  const auto& f = fused();
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 333}, {"seq_k", 300}, {"head_dim", 128}});
  auto c = cfg(64, 128, 8, 2);
  c.values["mma"] = 91;
  ASSERT_EQ(f.can_run(c, p, sm90), std::nullopt);
  const auto buffers = f.buffers(p);
  const auto a = expect_tma_kernel(f, c, p, "attn_bwd_fused_tma_kernel<ft_bf16, 128, 64, 2, 2, false, false>", "attn_bwd_sm90_tma.cuh");
  using Tma = FtAttnBwdTmaParams<void>;
  const std::map<std::size_t, std::pair<int, std::uint32_t>> maps{
      {offsetof(Tma, q_map), {kernels::attn_bwd::kQ, 64}}, {offsetof(Tma, do_map), {kernels::attn_bwd::kDout, 64}},
      {offsetof(Tma, k_map), {kernels::attn_bwd::kK, 128}}, {offsetof(Tma, v_map), {kernels::attn_bwd::kV, 128}}};
  ASSERT_EQ(a.maps.size(), maps.size());
  for (const auto& m : a.maps) {
    ASSERT_TRUE(maps.count(m.offset)) << "map at " << m.offset;
    EXPECT_EQ(m.buffer, maps.at(m.offset).first);
    EXPECT_EQ(m.box, (std::vector<std::uint32_t>{64, maps.at(m.offset).second, 1, 1}));
    EXPECT_EQ(m.dims[0], 128u);
    EXPECT_EQ(m.dims[3], 2u);
  }
  // unit_group: 1 unless named, clamped to the (kv head, batch) pairs (2 x 2 here)
  FtAttnBwdTmaParams<void> tprm;
  std::memcpy(&tprm, a.bytes.data(), sizeof tprm);
  EXPECT_EQ(tprm.unit_group, 1);
  auto grouped = c;
  grouped.values["unit_group"] = 8;
  const auto gargs = f.arguments(grouped, p);
  std::memcpy(&tprm, std::get<kernels::ParamsArg>(gargs[0]).bytes.data(), sizeof tprm);
  EXPECT_EQ(tprm.unit_group, 4);
  grouped.values["mma"] = 90;
  EXPECT_NE(f.can_run(grouped, p, sm90).value_or("").find("unit_group is an mma 91 option"), std::string::npos);
  const auto s = f.launch_shape(c, p, sm90);
  EXPECT_EQ(s.grid[0], 3u);
  EXPECT_EQ(s.grid[1], 2u);
  EXPECT_EQ(s.threads_per_block(), 256 + 128);
  // K, V (2 x 32 KiB), two stages of Q, dO + LSE, D (33 KiB each), two dS^T tiles (16 KiB each), the fp32 dQ
  // staging tile (32 KiB), the alignment, 5 mbarriers (the dQ pieces are handed over by named barriers).
  EXPECT_EQ(s.dynamic_smem_bytes, unsigned(65536 + 2 * 33792 + 32768 + 32768 + 1024 + 40));
  // The accumulator in the larger of its layouts at head_dim 128: 80-row blocks (block_m 80), 2 x 8 heads x 5 blocks
  // of 80 x 128 floats (400 rows against 64-row blocks' 384), its turn counters (two 64-column chunks a row block),
  // a counter per (batch, kv head) pair, then the split tail's largest plan: for each of the problem's 5 x 2 x 2
  // blocks of 64 keys a counter per consumer thread and one more, a 16-byte pad, 3 pieces' fp32 dK, dV partials
  // (256 threads x 128) each.
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedAcc].elements,
            2 * 8 * 5 * 80 * 128 + 2 * 8 * 5 * 2 + 2 * 2 + 20 * 257 + 4 + 20 * 3 * 256 * 128);
  // dq_order 2 (deterministic): the kernel's last template argument; mma 90 refuses it; 1 and 2 only.
  auto det = c;
  det.values["dq_order"] = 2;
  ASSERT_EQ(f.can_run(det, p, sm90), std::nullopt);
  EXPECT_EQ(f.specialize(det, p).name_expression, "attn_bwd_fused_tma_kernel<ft_bf16, 128, 64, 2, 2, false, false, true>");
  det.values["mma"] = 90;
  EXPECT_NE(f.can_run(det, p, sm90).value_or("").find("dq_order 2 (deterministic) needs mma 91"), std::string::npos);
  det.values["mma"] = 91;
  det.values["dq_order"] = 3;
  EXPECT_NE(f.can_run(det, p, sm90).value_or("").find("dq_order must be 1"), std::string::npos);
  // min_blocks 2 (one consumer warpgroup, head_dim 64): the kernel's last template argument; at head_dim 128 two
  // blocks exceed the SM's shared memory; mma 90 refuses it.
  auto two = cfg(64, 64, 4, 2);
  two.values["mma"] = 91;
  two.values["min_blocks"] = 2;
  const auto p64 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}});
  ASSERT_EQ(f.can_run(two, p64, sm90), std::nullopt);
  EXPECT_EQ(f.specialize(two, p64).name_expression, "attn_bwd_fused_tma_kernel<ft_bf16, 64, 64, 1, 2, false, false, false, 2>");
  two.values["dq_order"] = 2;
  EXPECT_EQ(f.specialize(two, p64).name_expression, "attn_bwd_fused_tma_kernel<ft_bf16, 64, 64, 1, 2, false, false, true, 2>");
  EXPECT_NE(f.can_run(two, p, sm90).value_or("").find("mma 91: min_blocks 2 x 150568 B of shared memory"), std::string::npos)
      << f.can_run(two, p, sm90).value_or("(runs)");
  two.values["dq_order"] = 1;
  two.values["mma"] = 90;
  EXPECT_NE(f.can_run(two, p64, sm90).value_or("").find("min_blocks is an mma 91 option"), std::string::npos);
  // 128-row items with two consumer warpgroups: head_dim 64 (FlashAttention-4's tile; dS^T from the fp32 P^T, both
  // packed after it, 224 registers by the count), the kernel's name; not head_dim 128 (323 KiB of shared memory).
  auto big = cfg(128, 128, 8, 2);
  big.values["mma"] = 91;
  ASSERT_EQ(f.can_run(big, p64, sm90), std::nullopt);
  EXPECT_EQ(f.specialize(big, p64).name_expression, "attn_bwd_fused_tma_kernel<ft_bf16, 64, 128, 2, 2, false, false>");
  EXPECT_NE(f.can_run(big, p, sm90).value_or("").find("mma 91: shared memory"), std::string::npos)
      << f.can_run(big, p, sm90).value_or("(runs)");
  // What it cannot run: 3 consumer warpgroups, head_dim 256, another architecture.
  auto three = cfg(64, 192, 12, 2);
  three.values["mma"] = 91;
  EXPECT_NE(f.can_run(three, p64, sm90).value_or("").find("at most 2 consumer warpgroups"), std::string::npos);
  EXPECT_NE(f.can_run(c, p, core::DeviceLimits::for_arch("sm_80")).value_or("").find("sm_90a"), std::string::npos);
  auto bad = cfg(64, 128, 8, 2);
  bad.values["mma"] = 93;
  EXPECT_NE(f.can_run(bad, p, sm90).value_or("").find("mma must be 90"), std::string::npos);
}

// block_m 80 (mma 91 at head_dim 128, two consumer warpgroups: dQ^T = K^T dS^T pieces, FlashAttention-4's
// non-causal tile): its name, 80-row Q / dO boxes, its shared memory (the mbarriers in the last stage's rounding: the
// whole 227 KiB), reasons for the shapes it cannot take, and every mask and dQ order compiling without wgmma
// serialization.
TEST(AttnBwdFused, Mma91EightyRowItems) {
  const auto& f = fused();
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 333}, {"seq_k", 300}, {"head_dim", 128}});
  auto c = cfg(80, 128, 8, 2);
  c.values["mma"] = 91;
  ASSERT_EQ(f.can_run(c, p, sm90), std::nullopt);
  const auto a = expect_tma_kernel(f, c, p, "attn_bwd_fused_tma_kernel<ft_bf16, 128, 80, 2, 2, false, false>", "attn_bwd_sm90_tma.cuh");
  for (const auto& m : a.maps) {
    const bool rows = m.buffer == kernels::attn_bwd::kQ || m.buffer == kernels::attn_bwd::kDout;
    EXPECT_EQ(m.box, (std::vector<std::uint32_t>{64, rows ? 80u : 128u, 1, 1})) << "map of buffer " << m.buffer;
  }
  // K, V (2 x 32 KiB), two stages of Q, dO (20 KiB each) + LSE, D rounded to 41 KiB, two dS tiles (20 KiB each), the
  // fp32 staging tile (40 KiB), the alignment; the 5 mbarriers in the last stage's rounding.
  EXPECT_EQ(f.launch_shape(c, p, sm90).dynamic_smem_bytes, unsigned(65536 + 2 * 41984 + 2 * 20480 + 40960 + 1024));
  EXPECT_EQ(FtAttnSmem::bwd_tma(128, 80, 128, 2), FtAttnSmem::kSm90OptIn);
  EXPECT_TRUE(FtAttnSmem::bwd_tma_bars_in_stage(128, 80, 128, 2));
  EXPECT_FALSE(FtAttnSmem::bwd_tma_bars_in_stage(128, 64, 128, 2));  // 64-row items keep theirs after the tiles
  auto det = c;
  det.values["dq_order"] = 2;
  ASSERT_EQ(f.can_run(det, p, sm90), std::nullopt);
  const auto p64 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}});
  EXPECT_NE(f.can_run(c, p64, sm90).value_or("").find("block_m 80 needs head_dim 128"), std::string::npos);
  auto one = cfg(80, 64, 4, 2);
  one.values["mma"] = 91;
  EXPECT_NE(f.can_run(one, p, sm90).value_or("").find("block_m 80 needs head_dim 128 and two consumer warpgroups"),
            std::string::npos);
  auto mma90 = c;
  mma90.values["mma"] = 90;
  EXPECT_NE(f.can_run(mma90, p, sm90).value_or("").find("block_m must be 64 or 128"), std::string::npos);
  auto odd = c;
  odd.values["block_m"] = 96;
  EXPECT_NE(f.can_run(odd, p, sm90).value_or("").find("block_m must be 64, 80 or 128"), std::string::npos);
  std::vector<std::string> inst;
  for (bool masks : {false, true})
    for (std::int64_t order : {1, 2})
      for (core::DType dt : {core::DType::bf16, core::DType::f16}) {
        std::map<std::string, std::int64_t> dims{{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}};
        if (masks) dims["causal"] = 1, dims["window"] = 16, dims["sink_tokens"] = 4;
        auto k = c;
        k.values["dq_order"] = order;
        const auto q = problem(dims, dt);
        ASSERT_EQ(f.can_run(k, q, sm90), std::nullopt);
        inst.push_back(flashtune::testing::attn_instantiation(f.specialize(k, q).name_expression));
      }
  const auto r = flashtune::testing::compile_instantiations_parallel(flashtune::testing::read_template("attn_bwd_sm90_tma.cuh"),
                                                                     "attn_bwd_sm90_tma.cuh", inst, "sm_90a");
  ASSERT_TRUE(r.record.ok) << r.record.log.substr(0, 4000);
  EXPECT_EQ(r.entries, int(inst.size()));
  EXPECT_EQ(r.record.log.find("C7512"), std::string::npos) << r.record.log;  // wgmma serialized for lack of registers
  EXPECT_LE(most_spill(r.record.log), 96) << r.record.log;
}

// tail 2: the blocks of the last partial wave (on sm_90a's 132 SMs) run as 2 or 3 pieces each, planned by the
// launch shape: a 1-D grid of the blocks and the split blocks' further pieces; none where the waves are whole.
TEST(AttnBwdFused, Mma91TailSplitsTheLastPartialWave) {
  const auto& f = fused();
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  ASSERT_EQ(sm90.num_sms, 132);
  auto c = cfg(64, 128, 8, 2);
  c.values["mma"] = 91;
  c.values["tail"] = 2;
  auto shape_of = [&](std::int64_t seq, std::int64_t heads) {
    const auto p = problem({{"batch", 2}, {"heads_q", heads}, {"seq_q", seq}, {"head_dim", 128}});
    EXPECT_EQ(f.can_run(c, p, sm90), std::nullopt);
    return f.launch_shape(c, p, sm90);
  };
  // 2 x 16 x 64 = 2048 blocks = 15 waves + 68: thirds (2 rounds of a third), 2048 + 2 x 68 launched.
  auto s = shape_of(8192, 16);
  EXPECT_EQ(s.tail_parts, 3u);
  EXPECT_EQ(s.grid[0], 2048u + 2 * 68);
  EXPECT_EQ(s.grid[1] * s.grid[2], 1u);
  // 2 x 1 x 91 = 182 = 132 + 50: halves (one round of a half) beat thirds (two rounds of a third).
  s = shape_of(91 * 128, 1);
  EXPECT_EQ(s.tail_parts, 2u);
  EXPECT_EQ(s.grid[0], 182u + 50);
  // 2 x 2 x 66 = 264 = 2 whole waves: nothing to split; 2 x 1 x 120 = 240 = 132 + 108: no plan beats the wave.
  for (const auto& [seq, heads] : {std::pair<std::int64_t, std::int64_t>{66 * 128, 2}, {120 * 128, 1}}) {
    s = shape_of(seq, heads);
    EXPECT_EQ(s.tail_parts, 1u) << seq;
    EXPECT_EQ(s.grid[0], unsigned(seq / 128)) << seq;
    EXPECT_EQ(s.grid[2], 2u) << seq;
  }
  // tail 1: the 3-D grid as always.
  c.values["tail"] = 1;
  const auto p = problem({{"batch", 2}, {"heads_q", 16}, {"seq_q", 8192}, {"head_dim", 128}});
  s = f.launch_shape(c, p, sm90);
  EXPECT_EQ(s.tail_parts, 1u);
  EXPECT_EQ(s.grid[0] * s.grid[1] * s.grid[2], 2048u);
  // Deterministic dQ orders whole key blocks; mma 90 / 92 have no tail.
  c.values["tail"] = 2;
  c.values["dq_order"] = 2;
  EXPECT_NE(f.can_run(c, p, sm90).value_or("").find("tail 2 needs dq_order 1"), std::string::npos);
  c.values["dq_order"] = 1;
  c.values["mma"] = 90;
  EXPECT_NE(f.can_run(c, p, sm90).value_or("").find("tail is an mma 91 option"), std::string::npos);
}

// timeline 2 (a diagnostic): the kernel with kTimeline on, its records after the accumulator's counters (16-byte
// aligned words, fused_timeline_words); tail 1 only, mma 91 only. Instantiations at both layouts, with one and two
// consumer warpgroups and deterministic dQ compile without wgmma serialization. That the records are written and
// ordered is the GPU test's (attn_bwd_gpu_test TimelineRecordsEveryBlocksPhasesInOrder).
TEST(AttnBwdFused, Mma91TimelineIsADiagnosticKernel) {
  const auto& f = fused();
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 333}, {"seq_k", 300}, {"head_dim", 128}});
  auto c = cfg(80, 128, 8, 2);
  c.values["mma"] = 91;
  c.values["timeline"] = 2;
  ASSERT_EQ(f.can_run(c, p, sm90), std::nullopt);
  EXPECT_EQ(f.specialize(c, p).name_expression, "attn_bwd_fused_tma_kernel<ft_bf16, 128, 80, 2, 2, false, false, false, 1, true>");
  // 2 x 8 heads x 5 blocks of 80 rows x 128 floats, then 2 x 8 x 5 x 2 turns and 2 x 2 pairs, rounded up to 4 words.
  EXPECT_EQ(kernels::attn_bwd::fused_timeline_words(c, p), (2 * 8 * 400 * 128 + 2 * 8 * 5 * 2 + 4 + 3) / 4 * 4);
  auto c64 = c;
  c64.values["block_m"] = 64;
  c64.values["dq_order"] = 2;
  EXPECT_EQ(f.specialize(c64, p).name_expression, "attn_bwd_fused_tma_kernel<ft_bf16, 128, 64, 2, 2, false, false, true, 1, true>");
  EXPECT_EQ(kernels::attn_bwd::fused_timeline_words(c64, p), (2 * 8 * 384 * 128 + 2 * 8 * 6 * 2 + 4 + 3) / 4 * 4);
  auto split = c;
  split.values["tail"] = 2;
  EXPECT_NE(f.can_run(split, p, sm90).value_or("").find("timeline 2 needs tail 1"), std::string::npos);
  auto bad = c;
  bad.values["timeline"] = 3;
  EXPECT_NE(f.can_run(bad, p, sm90).value_or("").find("timeline must be 1"), std::string::npos);
  auto mma90 = cfg(64, 128, 8, 2);
  mma90.values["mma"] = 90;
  mma90.values["timeline"] = 2;
  EXPECT_NE(f.can_run(mma90, p, sm90).value_or("").find("timeline is an mma 91 option"), std::string::npos);
  const auto causal = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}, {"causal", 1}}, core::DType::bf16);
  const auto d64 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}, {"causal", 1}}, core::DType::bf16);
  auto one = cfg(64, 64, 4, 2);
  one.values["mma"] = 91;
  one.values["timeline"] = 2;
  one.values["min_blocks"] = 2;
  expect_mma91_compiles({{c, p}, {c64, causal}, {one, d64}});
}

// epilogue 2 (mma 91): dK, dV staged in the K / V tiles and written by TMA stores. The name takes the kernel's last
// template argument (kTmaEpilogue) after the earlier ones at their defaults; the other variants and bad values get one
// line; the 64-row, 80-row, one-consumer, deterministic and split-tail instantiations compile without ptxas
// serializing wgmma (C751x).
TEST(AttnBwdFused, Mma91Epilogue2StoresDkDvByTma) {
  const auto& f = fused();
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 333}, {"seq_k", 300}, {"head_dim", 128}});
  auto c = cfg(80, 128, 8, 2);
  c.values["mma"] = 91;
  c.values["epilogue"] = 2;
  ASSERT_EQ(f.can_run(c, p, sm90), std::nullopt);
  EXPECT_EQ(f.specialize(c, p).name_expression,
            "attn_bwd_fused_tma_kernel<ft_bf16, 128, 80, 2, 2, false, false, false, 1, false, true>");
  auto det = c;
  det.values["block_m"] = 64;
  det.values["dq_order"] = 2;
  EXPECT_EQ(f.specialize(det, p).name_expression,
            "attn_bwd_fused_tma_kernel<ft_bf16, 128, 64, 2, 2, false, false, true, 1, false, true>");
  auto probe = c;
  probe.values["timeline"] = 2;
  EXPECT_EQ(f.specialize(probe, p).name_expression,
            "attn_bwd_fused_tma_kernel<ft_bf16, 128, 80, 2, 2, false, false, false, 1, true, true>");
  auto split = c;
  split.values["tail"] = 2;
  EXPECT_EQ(f.can_run(split, p, sm90), std::nullopt);  // split pieces store from the registers
  auto bad = c;
  bad.values["epilogue"] = 3;
  EXPECT_NE(f.can_run(bad, p, sm90).value_or("").find("epilogue must be 1"), std::string::npos);
  auto mma90 = cfg(64, 128, 8, 2);
  mma90.values["mma"] = 90;
  mma90.values["epilogue"] = 2;
  EXPECT_NE(f.can_run(mma90, p, sm90).value_or("").find("epilogue is an mma 91 option"), std::string::npos);
  const auto causal = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 128}, {"causal", 1}}, core::DType::bf16);
  const auto d64 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}, {"causal", 1}, {"window", 40}},
                           core::DType::f16);
  auto c64 = c;
  c64.values["block_m"] = 64;
  c64.values["tail"] = 2;
  auto one = cfg(64, 64, 4, 2);
  one.values["mma"] = 91;
  one.values["epilogue"] = 2;
  one.values["min_blocks"] = 2;
  expect_mma91_compiles({{c, p}, {c64, causal}, {det, causal}, {one, d64}});
}

// Every mma 91 config of the default space at head dims 64 and 128 (plain and the heaviest mask) that can_run
// admits compiles for sm_90a, and with deterministic dQ (dq_order 2) on the heaviest mask; one consumer warpgroup
// (255 registers, no reallocation) and two (240 after the producer's setmaxnreg) spill at most a few words, but
// for head_dim 128 with one stage: since every dQ piece is warpgroup 0's (session 28), its consumers spill ~20
// words there (152 bytes with deterministic dQ and the writer warps', which run on the producer's 24 registers);
// with two stages, the configs that win, the consumers spill 1-4 words and the whole kernel 40-68 bytes.
TEST(AttnBwdFused, EveryAdmittedMma91ConfigCompilesForSm90a) {
  const auto& f = fused();
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  std::vector<std::string> inst;
  for_each_swept_config(91, [&](const core::Config& c, const core::Problem& p) {
    if (f.can_run(c, p, dev)) return;
    inst.push_back(flashtune::testing::attn_instantiation(f.specialize(c, p).name_expression));
    if (p.at("window") == 0) return;  // deterministic dQ (dq_order 2) and two blocks per SM on the heaviest mask
    auto det = c;
    det.values["dq_order"] = 2;
    inst.push_back(flashtune::testing::attn_instantiation(f.specialize(det, p).name_expression));
    for (std::int64_t order : {1, 2}) {
      auto two = c;
      two.values["min_blocks"] = 2, two.values["dq_order"] = order;
      if (!f.can_run(two, p, dev)) inst.push_back(flashtune::testing::attn_instantiation(f.specialize(two, p).name_expression));
    }
  });
  ASSERT_GE(inst.size(), 22u);
  const std::string source = flashtune::testing::read_template("attn_bwd_sm90_tma.cuh");
  const auto r = flashtune::testing::compile_instantiations_parallel(source, "attn_bwd_sm90_tma.cuh", inst, "sm_90a");
  ASSERT_TRUE(r.record.ok) << r.record.log.substr(0, 4000);
  EXPECT_EQ(r.entries, int(inst.size()));
  EXPECT_LE(most_spill(r.record.log), 160) << r.record.log;
}

// mma 92, the windowed sweep: its own template and name, the TMA struct with 64-row boxes for all four maps (Q, dO:
// a query tile; K, V: one slot's key tile), a block per chunk of query tiles (one block per SM over the grid, every
// chunk at least the consumer warpgroups' count of tiles), 128 producer threads on top, its shared memory and
// workspace, and reasons for what it cannot run.
TEST(AttnBwdFused, Mma92IsTheWindowedSweep) {
  const auto& f = fused();
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 1000}, {"head_dim", 64}, {"causal", 1},
                          {"window", 128}, {"learned_sinks", 1}});
  auto c = cfg(64, 192, 12, 2);
  c.values["mma"] = 92;
  ASSERT_EQ(f.can_run(c, p, sm90), std::nullopt);
  const auto buffers = f.buffers(p);
  const auto a = expect_tma_kernel(f, c, p, "attn_bwd_fused_sweep_tma_kernel<ft_bf16, 64, 64, 3, 2, true, true>", "attn_bwd_sm90_sweep.cuh");
  ASSERT_EQ(a.maps.size(), 4u);
  for (const auto& m : a.maps) EXPECT_EQ(m.box, (std::vector<std::uint32_t>{64, 64, 1, 1})) << "map at " << m.offset;
  const auto s = f.launch_shape(c, p, sm90);
  EXPECT_EQ(s.grid[0], 5u);  // 132 SMs / 4 (kv head, batch) pairs = 33, at most 16 query tiles / 3 per chunk
  EXPECT_EQ(s.grid[1], 2u);
  EXPECT_EQ(s.grid[2], 2u);
  EXPECT_EQ(s.threads_per_block(), 384 + 128);
  // Two (K, V) buffers per slot (3 x 2 x 16 KiB), two stages (17 KiB each), three dS^T tiles (24 KiB each), the
  // alignment, 2 x 3 K / V, 3 x 2 stage and 2 x 3 dS^T tile mbarriers.
  EXPECT_EQ(s.dynamic_smem_bytes, unsigned(98304 + 2 * 17408 + 3 * 24576 + 1024 + 8 * 18));
  // The workspace holds every chunk's head and tail tiles of dK and dV at the most chunks (8 here).
  EXPECT_GE(buffers[kernels::attn_bwd::kFusedAcc].elements, std::int64_t(2) * 2 * 2 * 8 * 2 * 2 * 4096);
  // dq_order 2 is what it does anyway (no atomics): admitted, same kernel.
  auto det = c;
  det.values["dq_order"] = 2;
  EXPECT_EQ(f.can_run(det, p, sm90), std::nullopt);
  EXPECT_EQ(f.specialize(det, p).name_expression, f.specialize(c, p).name_expression);
  // A window of 64 keys: a query tile sees two key tiles, two consumer warpgroups do; 128 needs three.
  const auto p64 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 500}, {"head_dim", 64}, {"causal", 1}, {"window", 64}});
  auto two = cfg(64, 128, 8, 2);
  two.values["mma"] = 92;
  EXPECT_EQ(f.can_run(two, p64, sm90), std::nullopt);
  EXPECT_NE(f.can_run(two, p, sm90).value_or("").find("sees 3 64-key tiles under window 128"), std::string::npos)
      << f.can_run(two, p, sm90).value_or("(runs)");
  // seq_k - seq_q not a multiple of 64 puts the band over a fourth tile.
  const auto off = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 500}, {"seq_k", 532}, {"head_dim", 64}, {"causal", 1},
                            {"window", 128}});
  EXPECT_NE(f.can_run(c, off, sm90).value_or("").find("sees 4 64-key tiles"), std::string::npos);
  const auto off64 = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 500}, {"seq_k", 628}, {"head_dim", 64}, {"causal", 1},
                              {"window", 128}});
  EXPECT_EQ(f.can_run(c, off64, sm90), std::nullopt);
  // What it cannot run.
  auto why = [&](core::Config k, const core::Problem& q) { return f.can_run(k, q, sm90).value_or("(runs)"); };
  auto three_stages = two;
  three_stages.values["num_stages"] = 3;
  EXPECT_NE(why(three_stages, p64).find("num_stages must be at most"), std::string::npos);
  EXPECT_NE(why(c, problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 500}, {"head_dim", 128}, {"causal", 1}, {"window", 128}}))
                .find("head_dim 64 and block_m 64"),
            std::string::npos);
  EXPECT_NE(why(c, problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 500}, {"head_dim", 64}, {"causal", 1}}))
                .find("sweeps a causal sliding window"),
            std::string::npos);
  EXPECT_NE(why(c, problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 500}, {"head_dim", 64}, {"causal", 1}, {"window", 128},
                            {"sink_tokens", 4}}))
                .find("no sink tokens"),
            std::string::npos);
  auto mb = c;
  mb.values["min_blocks"] = 2;
  EXPECT_NE(why(mb, p).find("min_blocks is an mma 91 option"), std::string::npos);
  auto four = cfg(64, 256, 16, 2);
  four.values["mma"] = 92;
  EXPECT_NE(why(four, p).find("num_warps must be 8 or 12"), std::string::npos);
  EXPECT_NE(f.can_run(c, p, core::DeviceLimits::for_arch("sm_80")).value_or("").find("sm_90a"), std::string::npos);
}

// attn_bwd_fused_delta: the sweep with the preprocess fused in. O in D's place, D an output after the workspace, O's
// tensor map beside the others, the stage's O tile in shared memory (two stages at three warpgroups, not three), the
// kernel's last template argument; its own stage, a backward way of its own.
TEST(AttnBwdFused, FusedDeltaIsTheSweepWithDInline) {
  const auto* fd = kernels::find_family("attn_bwd_fused_delta");
  ASSERT_NE(fd, nullptr);
  const auto& f = *fd;
  const auto sm90 = core::DeviceLimits::for_arch("sm_90a");
  EXPECT_EQ(f.stage(), "backward_fused_delta");
  EXPECT_TRUE(f.launches_itself());
  const auto p = problem({{"batch", 2}, {"heads_q", 8}, {"heads_kv", 2}, {"seq_q", 1000}, {"head_dim", 64}, {"causal", 1},
                          {"window", 128}, {"learned_sinks", 1}});
  auto c = cfg(64, 192, 12, 2);
  c.values["mma"] = 92;
  ASSERT_EQ(f.can_run(c, p, sm90), std::nullopt);
  EXPECT_EQ(f.specialize(c, p).name_expression, "attn_bwd_fused_sweep_tma_kernel<ft_bf16, 64, 64, 3, 2, true, true, true>");
  const auto buffers = f.buffers(p);
  ASSERT_EQ(buffers.size(), 11u);
  EXPECT_EQ(buffers[kernels::attn_bwd::kFdO].name, "o");
  EXPECT_EQ(buffers[kernels::attn_bwd::kFdO].role, kernels::BufferRole::input);
  EXPECT_EQ(buffers[kernels::attn_bwd::kFusedAcc].role, kernels::BufferRole::workspace);
  EXPECT_EQ(buffers[kernels::attn_bwd::kFdDelta].name, "delta");
  EXPECT_EQ(buffers[kernels::attn_bwd::kFdDelta].role, kernels::BufferRole::output);
  const auto args = f.arguments(c, p);
  ASSERT_EQ(flashtune::testing::check_params_arg(args, sizeof(FtAttnBwdTmaParams<void>), buffers), "");
  const auto& a = std::get<kernels::ParamsArg>(args[0]);
  ASSERT_EQ(a.maps.size(), 5u);
  bool o_map = false;
  for (const auto& m : a.maps)
    if (m.offset == offsetof(FtAttnBwdTmaParams<void>, o_map)) {
      o_map = true;
      EXPECT_EQ(m.buffer, kernels::attn_bwd::kFdO);
    }
  EXPECT_TRUE(o_map);
  const std::map<std::size_t, int> bound{{offsetof(FtAttnBwdParams<void>, o), kernels::attn_bwd::kFdO},
                                         {offsetof(FtAttnBwdParams<void>, delta), kernels::attn_bwd::kFdDelta}};
  for (const auto& ptr : a.pointers) {
    if (bound.count(ptr.offset)) EXPECT_EQ(ptr.buffer, bound.at(ptr.offset)) << "member at " << ptr.offset;
  }
  // Stages of Q, dO, O + LSE, D (25 KiB): two fit beside the K / V buffers and dS^T tiles, three do not.
  EXPECT_EQ(f.launch_shape(c, p, sm90).dynamic_smem_bytes, unsigned(98304 + 2 * 25600 + 3 * 24576 + 1024 + 8 * 18));
  auto three = c;
  three.values["num_stages"] = 3;
  EXPECT_NE(f.can_run(three, p, sm90).value_or("").find("shared memory"), std::string::npos);
  EXPECT_NE(f.check_problem(problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 100}, {"head_dim", 64}}, core::DType::f32))
                .value_or(""),
            "");
  // Its way: one pass.
  bool way = false;
  for (const auto& w : kernels::attn_bwd::ways()) way = way || (w == std::vector<std::string>{"attn_bwd_fused_delta"});
  EXPECT_TRUE(way);
}

// Every mma 92 shape compiles for sm_90a (three slots at 1-3 stages, two at 1-2; bf16 and fp16; D read or inline)
// with at most a few spilled words (NVRTC 13.0: 28-60 bytes, loop-invariant addresses reloaded per item at 160
// registers a consumer), and ptxas keeps its wgmma pipelined: no "serialized" warning (C7514: the accumulators zeroed under a
// branch did it; C7520: a wgmma wait in a divergent path).
TEST(AttnBwdFused, EveryMma92ShapeCompilesPipelinedForSm90a) {
  const auto& f = fused();
  const auto dev = core::DeviceLimits::for_arch("sm_90a");
  std::vector<std::string> inst;
  for (core::DType d : {core::DType::bf16, core::DType::f16})
    for (std::int64_t warps : {8, 12})
      for (std::int64_t stages = 1; stages <= warps / 4; ++stages) {
        const auto p = problem({{"batch", 1}, {"heads_q", 4}, {"seq_q", 500}, {"head_dim", 64}, {"causal", 1},
                                {"window", warps == 8 ? 64 : 128}, {"learned_sinks", 1}}, d);
        auto c = cfg(64, 16 * warps, warps, stages);
        c.values["mma"] = 92;
        ASSERT_EQ(f.can_run(c, p, dev), std::nullopt);
        inst.push_back(flashtune::testing::attn_instantiation(f.specialize(c, p).name_expression));
        const auto& fd = *kernels::find_family("attn_bwd_fused_delta");  // D inline (three stages do not fit)
        if (!fd.can_run(c, p, dev)) inst.push_back(flashtune::testing::attn_instantiation(fd.specialize(c, p).name_expression));
      }
  ASSERT_EQ(inst.size(), 18u);
  const std::string source = flashtune::testing::read_template("attn_bwd_sm90_sweep.cuh");
  const auto r = flashtune::testing::compile_instantiations_parallel(source, "attn_bwd_sm90_sweep.cuh", inst, "sm_90a");
  ASSERT_TRUE(r.record.ok) << r.record.log.substr(0, 4000);
  EXPECT_EQ(r.entries, int(inst.size()));
  EXPECT_EQ(r.record.log.find("serialized"), std::string::npos) << r.record.log;
  EXPECT_LE(most_spill(r.record.log), 64) << r.record.log;
}
