// tests/kernels/variant_registration_test.cpp (cpu): a new variant of an existing operation is one variant
// descriptor and one add_variant() line (plus its template file; this one reuses attn_fwd.cuh's mma.sync kernel
// over a narrower tunable range). Registered on a fresh attn_fwd, the operation searches it under its selector
// value (mma 100), dispatches can_run / specialize / launch_shape / the template file to it, an experiment's study
// proposes it, and its kernel compiles with NVRTC; the built-in attn_fwd is untouched.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/attn_fwd.hpp"
#include "harness/kernels/builtin.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace flashtune::kernels {
namespace {

using attn::FwdConfig;
using attn::Shape;

// The variant under test: the mma.sync forward kernel, at 64 query rows and 4 warps only.
class NarrowMma final : public attn::FwdVariant {
 public:
  NarrowMma()
      : attn::FwdVariant({"test_narrow_mma", "attn_fwd.cuh", {core::DType::f16, core::DType::bf16}, 100,
                    "100 = mma.sync at block_m 64, 4 warps (a test)", {}, {"mma != 100 || (block_m == 64 && num_warps == 4)"}}),
        m_kernel(attn::make_fwd_mma_variant()) {}
  std::optional<std::string> can_run(const FwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    if (c.block_m != 64 || c.num_warps != 4) return "test_narrow_mma runs block_m 64 with 4 warps only";
    return m_kernel->can_run(c, s, d);
  }
  std::string name_expression(const FwdConfig& c, const Shape& s) const override { return m_kernel->name_expression(c, s); }
  LaunchShape launch_shape(const FwdConfig& c, const Shape& s, const core::DeviceLimits& d) const override {
    return m_kernel->launch_shape(c, s, d);
  }

 private:
  std::unique_ptr<attn::FwdVariant> m_kernel;
};

// A fresh attn_fwd with the test variant registered: the one line a new variant adds.
std::unique_ptr<KernelFamily> attn_fwd_with_narrow_variant() {
  auto family = make_attn_fwd_family();
  dynamic_cast<Operation<Shape, FwdConfig>&>(*family).add_variant(std::make_unique<NarrowMma>());
  return family;
}

core::Config config(std::int64_t mma, std::int64_t block_m, std::int64_t num_warps) {
  return {{{"block_m", block_m}, {"block_n", 64}, {"num_warps", num_warps}, {"num_stages", 2}, {"mma", mma}}};
}

std::vector<std::int64_t> mma_values(const KernelFamily& f) {
  for (const auto& t : f.tunables())
    if (t.name == "mma") return t.values;
  return {};
}

TEST(VariantRegistration, TheSelectorSearchesTheNewVariantAndItsConstraintJoinsTheOperations) {
  const auto f = attn_fwd_with_narrow_variant();
  EXPECT_EQ(mma_values(*f), (std::vector<std::int64_t>{80, 90, 91, 100}));
  const auto constraints = f->constraints();
  EXPECT_NE(std::find(constraints.begin(), constraints.end(), "mma == 80 || mma == 90 || mma == 91 || mma == 100"), constraints.end());
  EXPECT_NE(std::find(constraints.begin(), constraints.end(), "mma != 100 || (block_m == 64 && num_warps == 4)"),
            constraints.end());
  EXPECT_EQ(mma_values(testing::registered_family("attn_fwd")), (std::vector<std::int64_t>{80, 90, 91}));  // built-in untouched
}

TEST(VariantRegistration, TheOperationDispatchesToTheVariantItsSelectorNames) {
  const auto f = attn_fwd_with_narrow_variant();
  const auto& op = dynamic_cast<const OperationBase&>(*f);
  const auto sm80 = core::DeviceLimits::for_arch("sm_80");
  const auto p = testing::attention_problem(*f, core::DType::f16, 2, 8, 2, 300, 300, 64, {{"causal", 1}});
  EXPECT_EQ(op.selected(config(100, 64, 4), p).name, "test_narrow_mma");
  EXPECT_EQ(op.selected(config(80, 64, 4), p).name, "sm80_mma");
  EXPECT_EQ(op.selected(config(90, 64, 4), p).name, "sm90_wgmma");
  EXPECT_EQ(f->can_run(config(100, 64, 4), p, sm80), std::nullopt);
  EXPECT_EQ(f->can_run(config(100, 32, 2), p, sm80).value_or(""), "test_narrow_mma runs block_m 64 with 4 warps only");
  EXPECT_EQ(f->can_run(config(80, 32, 2), p, sm80), std::nullopt);  // the mma.sync variant still takes it
  // The same kernel as mma 80 at these tiles, launched alike, from the variant's own template file.
  EXPECT_EQ(f->specialize(config(100, 64, 4), p).name_expression, f->specialize(config(80, 64, 4), p).name_expression);
  const auto l100 = f->launch_shape(config(100, 64, 4), p, sm80), l80 = f->launch_shape(config(80, 64, 4), p, sm80);
  EXPECT_EQ(std::vector<unsigned>(l100.grid, l100.grid + 3), std::vector<unsigned>(l80.grid, l80.grid + 3));
  EXPECT_EQ(l100.block[0], 128u);
  EXPECT_EQ(l100.dynamic_smem_bytes, l80.dynamic_smem_bytes);
  EXPECT_EQ(op.selected(config(100, 64, 4), p).template_file, "attn_fwd.cuh");
  EXPECT_EQ(f->template_file_for(config(100, 64, 4), p), "attn_fwd.cuh");
  // fp32 problems have one variant: mma 100 falls back to it, which says why it does not run.
  const auto p32 = testing::attention_problem(*f, core::DType::f32, 1, 2, 2, 100, 100, 64);
  EXPECT_EQ(op.selected(config(100, 64, 4), p32).name, "f32");
  EXPECT_NE(f->can_run(config(100, 64, 4), p32, sm80).value_or("").find("fp32 uses mma 80"), std::string::npos);
}

TEST(VariantRegistration, AStudyProposesTheVariantAndItsKernelCompiles) {
  const auto f = attn_fwd_with_narrow_variant();
  const experiment::FamilyCatalog catalog{{f.get()}};
  const auto exp = experiment::parse_experiment(R"(
name: narrow_variant
studies:
  - family: attn_fwd
    problems: [{batch: 1, heads_q: 4, seq_q: 256, head_dim: 64, dtype: bf16, window: 64}]
    space: {mma: [80, 100], block_m: [32, 64], block_n: 64, num_warps: [2, 4], num_stages: 2}
)",
                                                "narrow_variant.yaml", catalog);
  ASSERT_EQ(exp.studies.size(), 1u);
  const auto& study = exp.studies[0];
  const auto& p = study.problems.at(0);
  std::vector<core::Config> narrow;
  for (const auto& c : experiment::candidates(study, p))
    if (c.at("mma") == 100) narrow.push_back(c);
  ASSERT_EQ(narrow.size(), 1u);  // its constraint leaves block_m 64, 4 warps
  const auto sm80 = core::DeviceLimits::for_arch("sm_80");
  ASSERT_EQ(f->can_run(narrow[0], p, sm80), std::nullopt);

  const auto& info = dynamic_cast<const OperationBase&>(*f).selected(narrow[0], p);
  const std::string name_expression = f->specialize(narrow[0], p).name_expression;
  const std::string source = jit::load_template(info.template_file, std::nullopt);
  const auto out = flashtune::testing::compile_kernel(source, info.template_file, name_expression, "sm_80");
  ASSERT_TRUE(out.record.ok) << out.record.log;
  EXPECT_FALSE(out.cubin.empty());
  EXPECT_GT(out.record.resources.registers, 0) << out.record.log;  // ptxas compiled the kernel
  EXPECT_EQ(name_expression, "attn_fwd_mma_kernel<ft_bf16, 64, 64, 64, 4, 2, false, true, false>");
}

}  // namespace
}  // namespace flashtune::kernels
