// tests/runtime/runtime_gpu_test.cpp: the runtime library's launches on a GPU, through its C ABI, against the double
// reference: forward O and LSE, then the backward from the kernels' own O and LSE (as a training step runs it), every
// output poisoned with NaN first, fresh random inputs, the pass rule of the harness (max |out - ref64| <= 2 x the
// naive fp32 error + atol). Shapes cover GQA / MQA, seq_q != seq_k, windows with sink tokens, learned sinks, head_dim
// 16 / 64 / 128 and fp16 / bf16 / fp32; each backward way runs (the test export's medians edited so that it wins).
// Also: a caller's workspace (and one too small), a second call reusing the plan, explain on the device. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/problem_views.hpp"
#include "reference/attention.hpp"
#include "reference/attention_bwd.hpp"
#include "reference/compare.hpp"
#include "reference/dtype.hpp"
#include "tests/runtime/runtime_support.hpp"

namespace flashtune {
namespace {

core::DType dtype_of(int d) { return d == FT_F32 ? core::DType::f32 : d == FT_F16 ? core::DType::f16 : core::DType::bf16; }

core::Problem problem_of(const ft_attn_shape& s) {
  core::Problem p;
  p.dtype = dtype_of(s.dtype);
  p.dims = {{"batch", s.batch}, {"heads_q", s.heads_q}, {"heads_kv", s.heads_kv}, {"seq_q", s.seq_q}, {"seq_k", s.seq_k},
            {"head_dim", s.head_dim}, {"causal", s.causal}, {"window", s.window}, {"sink_tokens", s.sink_tokens},
            {"learned_sinks", s.learned_sinks}, {"tf32", 0}, {"qk_range", 1}, {"sink_bias", 0}};
  return p;
}

// A device tensor with its host values (rounded to its dtype, as uploaded).
struct Tensor {
  core::DType dtype = core::DType::f32;
  std::vector<double> host;
  cuda::DeviceBuffer dev;

  Tensor(core::DType d, std::size_t n) : dtype(d), host(n), dev(std::max<std::size_t>(n * core::dtype_size(d), 4)) {}
  void upload_random(double lo, double hi, std::uint64_t seed, CUstream s) {
    host = reference::uniform(host.size(), lo, hi, seed);
    reference::round_all(dtype, host);
    const auto bytes = reference::pack(dtype, host);
    dev.upload(bytes.data(), bytes.size(), s);
  }
  void poison(CUstream s) {
    dev.fill_u32(dtype == core::DType::f32 ? 0x7FC00000u : dtype == core::DType::f16 ? 0x7E007E00u : 0x7FC07FC0u, s);
  }
  std::vector<double> download(CUstream s) const {
    std::vector<unsigned char> bytes(host.size() * core::dtype_size(dtype));
    dev.download(bytes.data(), bytes.size(), s);
    return reference::unpack(dtype, bytes.data(), host.size());
  }
  std::uint64_t ptr() const { return dev.ptr(); }
};

void expect_passes(const char* what, core::DType d, const std::vector<double>& got, const std::vector<double>& ref64,
                   const std::vector<double>& naive, double atol) {
  const auto v = reference::compare(got, ref64, naive, reference::storage_atol(d, ref64, atol));
  EXPECT_TRUE(v.passed) << what << ": max err " << v.max_abs_err << " > tolerance " << v.tolerance << ", NaN "
                        << v.nan_count;
}

class RuntimeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
    m_ctx.emplace(0);  // the primary context, current: the runtime uses it as a caller's would be
  }
  std::optional<cuda::Context> m_ctx;
};

// Forward, then backward from the kernels' O and LSE, checked against the references; returns the way explained.
nlohmann::json check_step(ft_runtime* rt, const ft_attn_shape& s, std::uint64_t seed, bool own_workspace = false) {
  const core::Problem p = problem_of(s);
  const kernels::attn::Shape sh(p);
  const core::DType d = p.dtype;
  cuda::Stream stream;
  const CUstream st = stream.get();
  Tensor q(d, sh.elements_q()), k(d, sh.elements_kv()), v(d, sh.elements_kv()), o(d, sh.elements_q()),
      dout(d, sh.elements_q()), dq(d, sh.elements_q()), dk(d, sh.elements_kv()), dv(d, sh.elements_kv()),
      lse(core::DType::f32, sh.rows()), sinks(core::DType::f32, sh.heads_q), dsinks(core::DType::f32, sh.heads_q);
  q.upload_random(-1, 1, seed + 1, st), k.upload_random(-1, 1, seed + 2, st), v.upload_random(-1, 1, seed + 3, st);
  dout.upload_random(-1, 1, seed + 4, st), sinks.upload_random(-1, 1, seed + 5, st);
  for (Tensor* t : {&o, &lse, &dq, &dk, &dv, &dsinks}) t->poison(st);
  ft_attn_tensors t{q.ptr(), k.ptr(), v.ptr(), o.ptr(), lse.ptr(), dout.ptr(), dq.ptr(), dk.ptr(), dv.ptr(),
                    s.learned_sinks ? sinks.ptr() : 0, s.learned_sinks ? dsinks.ptr() : 0};

  EXPECT_EQ(ft_attention_forward(rt, &s, &t, st, nullptr, 0), FT_OK) << ft_last_error();
  const auto o_got = o.download(st), lse_got = lse.download(st);
  std::vector<double> o64, lse64, o32, lse32;
  const std::vector<double> no_sinks;
  const auto& sk = s.learned_sinks ? sinks.host : no_sinks;
  reference::attention_naive<double>(sh, q.host, k.host, v.host, sk, o64, lse64);
  reference::attention_naive<float>(sh, q.host, k.host, v.host, sk, o32, lse32);
  reference::round_all(d, o32);
  const double fwd_atol = kernels::find_family("attn_fwd")->default_atol(p);
  expect_passes("O", d, o_got, o64, o32, fwd_atol);
  expect_passes("LSE", core::DType::f32, lse_got, lse64, lse32, fwd_atol);

  cuda::DeviceBuffer ws;
  std::size_t ws_bytes = 0;
  if (own_workspace) {
    EXPECT_EQ(ft_attention_workspace_bytes(rt, &s, 1, &ws_bytes), FT_OK) << ft_last_error();
    ws = cuda::DeviceBuffer(std::max<std::size_t>(ws_bytes, 4));
    ws.fill_bytes(0, st);
    if (ws_bytes > 256) {  // too small: refused with the size, nothing launched
      EXPECT_EQ(ft_attention_backward(rt, &s, &t, st, reinterpret_cast<void*>(ws.ptr()), ws_bytes - 256), FT_ERR_BUFFER);
      EXPECT_NE(std::string(ft_last_error()).find(std::to_string(ws_bytes)), std::string::npos) << ft_last_error();
    }
  }
  EXPECT_EQ(ft_attention_backward(rt, &s, &t, st, own_workspace ? reinterpret_cast<void*>(ws.ptr()) : nullptr, ws_bytes), FT_OK)
      << ft_last_error();
  reference::AttnGrads g64, g32;
  reference::attention_backward_naive<double>(sh, q.host, k.host, v.host, sk, o_got, lse_got, dout.host, g64);
  reference::attention_backward_naive<float>(sh, q.host, k.host, v.host, sk, o_got, lse_got, dout.host, g32);
  for (auto* x : {&g32.dq, &g32.dk, &g32.dv}) reference::round_all(d, *x);
  const double bwd_atol = kernels::find_family("attn_bwd_dq")->default_atol(p);
  expect_passes("dQ", d, dq.download(st), g64.dq, g32.dq, bwd_atol);
  expect_passes("dK", d, dk.download(st), g64.dk, g32.dk, bwd_atol);
  expect_passes("dV", d, dv.download(st), g64.dv, g32.dv, bwd_atol);
  if (s.learned_sinks)
    expect_passes("dsinks", core::DType::f32, dsinks.download(st), g64.dsinks, g32.dsinks,
                  kernels::find_family("attn_bwd_dsink")->default_atol(p));

  // A second forward reuses the plan (no compile) and writes the same bits.
  o.poison(st);
  EXPECT_EQ(ft_attention_forward(rt, &s, &t, st, nullptr, 0), FT_OK) << ft_last_error();
  EXPECT_EQ(o.download(st), o_got);
  stream.synchronize();
  return testing::explain(rt, s, true, nullptr);
}

TEST_F(RuntimeGpu, EveryShapeKindPassesTheReference) {
  ft_runtime* rt = testing::make_runtime(testing::runtime_configs());
  ASSERT_NE(rt, nullptr);
  using testing::shape;
  // GPT-OSS-like (GQA 4, window, learned sinks), a ragged length; MQA with seq_q != seq_k (bottom-right causal);
  // a window with sink tokens; head_dim 128 (the fused way: the test table's dkdv cannot run it); fp32 with sinks.
  const std::vector<ft_attn_shape> shapes = {
      shape(2, 8, 2, 384, 384, 64, FT_BF16, 1, 128, 0, 1), shape(1, 4, 1, 200, 333, 16, FT_F16, 1),
      shape(1, 4, 2, 300, 300, 64, FT_F16, 1, 64, 4), shape(1, 4, 4, 256, 256, 128, FT_BF16, 0),
      shape(1, 4, 2, 130, 130, 64, FT_F32, 0, 0, 0, 1)};
  std::uint64_t seed = 100;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto& s = shapes[i];
    SCOPED_TRACE(problem_of(s).key());
    const auto e = check_step(rt, s, seed + 10 * i, /*own_workspace=*/i % 2 == 1);
    EXPECT_EQ(e["gpu"], cuda::query_device(0).name);
    if (s.head_dim == 128) {
      EXPECT_EQ(e["way"].back(), "attn_bwd_fused") << e;
    }
  }
  ft_runtime_destroy(rt);
}

TEST_F(RuntimeGpu, BuiltInFallbacksAlonePassTheReference) {
  // An empty export: every stage runs the runtime's untuned fallbacks (head_dim 128's dK / dV included): on sm_90a the
  // TMA forward and the fused wgmma backward for f16 / bf16 at head_dim 64 and 128 (the causal window at 64: the
  // windowed sweep), else the mma.sync kernels.
  ft_runtime* rt = testing::make_runtime(testing::edited_configs("empty_gpu.json", [](nlohmann::json&) { return false; }));
  ASSERT_NE(rt, nullptr);
  using testing::shape;
  const std::vector<ft_attn_shape> shapes = {shape(1, 8, 2, 256, 256, 64, FT_BF16, 1, 128, 0, 1),
                                             shape(1, 4, 4, 192, 192, 128, FT_BF16, 1),
                                             shape(1, 4, 2, 200, 333, 128, FT_F16, 0),
                                             shape(1, 4, 1, 200, 333, 16, FT_F16, 1),
                                             shape(1, 2, 2, 130, 130, 128, FT_F32, 0)};
  const bool hopper = cuda::query_device(0).arch == "sm_90a";
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(problem_of(shapes[i]).key());
    const auto e = check_step(rt, shapes[i], 900 + 10 * i);
    for (const auto& st : e["stages"]) EXPECT_EQ(st["untuned"], true) << e;
    const bool wgmma = hopper && shapes[i].dtype != FT_F32 && shapes[i].head_dim >= 64;
    EXPECT_EQ(e["way"][0] == "attn_bwd_fused_delta" || e["way"][1] == "attn_bwd_fused", wgmma) << e;
  }
  {  // a second step of a shape on the runtime's workspace (the persistent forward's counters, dQ's accumulator)
    SCOPED_TRACE("second step");
    check_step(rt, shapes[1], 990);
  }
  ft_runtime_destroy(rt);
}

TEST_F(RuntimeGpu, EachBackwardWayPassesTheReference) {
  const auto s = testing::shape(2, 8, 2, 384, 384, 64, FT_BF16, 1, 128, 0, 1);
  for (const std::string cheap : {"attn_bwd_dq", "attn_bwd_dq_delta", "attn_bwd_fused"}) {
    SCOPED_TRACE(cheap);
    const auto path = testing::edited_configs("cheap_" + cheap + ".json", [&](nlohmann::json& e) {
      if (e["family"] == cheap) e["evidence"]["median_ms"] = 0.0;
      if (cheap == "attn_bwd_dq" && e["family"] == "attn_bwd_dkdv") e["evidence"]["median_ms"] = 0.0;
      return true;
    });
    ft_runtime* rt = testing::make_runtime(path);
    ASSERT_NE(rt, nullptr);
    const auto e = check_step(rt, s, 7, /*own_workspace=*/cheap == "attn_bwd_fused");
    const std::string first = cheap == "attn_bwd_dq_delta" ? "attn_bwd_dq_delta" : "attn_bwd_preprocess";
    EXPECT_EQ(e["way"][0], first) << e;
    if (cheap == "attn_bwd_fused") {
      EXPECT_EQ(e["way"][1], "attn_bwd_fused") << e;
    }
    ft_runtime_destroy(rt);
  }
}

TEST_F(RuntimeGpu, TheWindowedSweepWayPassesTheReference) {
  // An attn_bwd_fused_delta entry (mma 92) made cheapest: the backward is that one pass and dsink. GQA 4 in 3 x 2
  // blocks; GQA 8 / 1 at seq 1000 (16 query tiles: several chunks, their shared key tiles added by the second launch).
  ft_runtime* rt = testing::make_runtime(testing::configs_with_sweep("gpu_with_sweep.json", 0.001));
  ASSERT_NE(rt, nullptr);
  using testing::shape;
  const std::vector<ft_attn_shape> shapes = {shape(2, 8, 2, 384, 384, 64, FT_BF16, 1, 128, 0, 1),
                                             shape(1, 8, 1, 1000, 1000, 64, FT_BF16, 1, 128, 0, 1)};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(problem_of(shapes[i]).key());
    const auto e = check_step(rt, shapes[i], 500 + 10 * i, /*own_workspace=*/i == 1);
    EXPECT_EQ(e["way"], nlohmann::json({"attn_bwd_fused_delta", "attn_bwd_dsink"})) << e;
  }
  ft_runtime_destroy(rt);
}

}  // namespace
}  // namespace flashtune
