// tests/kernels/families_golden_test.cpp (cpu): every family's descriptor answers as it did on main at dded398,
// before the operations / variants refactor (issue 18): can_run verdicts with their reasons, name expressions,
// defines, launch shapes, kernel arguments, buffers, FLOP and byte counts, tolerances, tunables
// and the references of small problems, over a sample of each family's default space and of every experiment
// file's spaces, on sm_80 and sm_90a. tests/data/families_golden.txt holds one digest per group of lines (a
// family, a family's default space on one problem, an experiment's study).
// FT_GOLDEN_DUMP=<file> writes every line the digests cover (dump on two commits and diff them to see what
// moved); FT_GOLDEN_WRITE=<file> writes the digests (only for a change that means to move them). Template files
// are not in the digests (they move with kSplitTemplates): each variant names its own, as the split of
// kernel_templates/ lays them out, and the runner compiles from it exactly when the switch is on.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "harness/experiment/experiment.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/operation.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace fs = std::filesystem;
using namespace flashtune;

namespace {

constexpr std::size_t kMaxConfigs = 2500;  // sampled per group and arch (a group's digest still covers its count)
const char* const kArchs[] = {"sm_80", "sm_90a"};

std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

std::string join_values(const std::vector<std::int64_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string describe(const kernels::KernelArg& a) {
  return std::visit(
      [](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, kernels::BufferArg>) return "buf" + std::to_string(v.index);
        else if constexpr (std::is_same_v<V, kernels::ParamsArg>) {
          std::string s = "params" + std::to_string(v.bytes.size()) + ":" +
                          core::hash_hex(std::string_view(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size()));
          for (const auto& p : v.pointers) s += "," + std::to_string(p.offset) + ">" + std::to_string(p.buffer);
          return s;
        } else if constexpr (std::is_same_v<V, float>) return "f" + num(v);
        else return (std::is_same_v<V, std::int32_t> ? "i" : "l") + std::to_string(v);
      },
      a);
}

// One family's identity: its interface answers that do not depend on a problem.
std::vector<std::string> family_lines(const kernels::KernelFamily& f) {
  std::vector<std::string> out{f.stage() + " " + f.template_file() + (f.launches_itself() ? " self" : "")};
  std::string dims;
  for (const auto& d : f.problem_dims()) dims += d + " ";
  for (const auto& d : f.optional_problem_dims()) dims += d.name + "=" + std::to_string(d.fallback) + " ";
  for (auto d : f.dtypes()) dims += std::string(core::to_string(d)) + " ";
  out.push_back(dims);
  for (const auto& t : f.tunables()) out.push_back("tunable " + t.name + " " + join_values(t.values));
  return out;
}

// The problem's lines: its check, and when it is well formed its buffers, counts, tolerance and (small
// problems) the digests of both references on inputs filled as the runner fills them.
std::vector<std::string> problem_lines(const kernels::KernelFamily& f, const core::Problem& p, bool with_reference) {
  if (auto why = f.check_problem(p)) return {"bad " + *why};
  std::vector<std::string> out;
  double elements = 0;
  for (const auto& b : f.buffers(p)) {
    out.push_back("buffer " + b.name + " " + std::string(core::to_string(b.dtype)) + " " + std::to_string(b.elements) +
                  " " + std::to_string(int(b.role)) + " " + num(b.lo) + " " + num(b.hi));
    elements += double(b.elements);
  }
  out.push_back("bytes " + num(f.bytes_moved(p)) + " flops " + num(f.flops(p)) + " atol " + num(f.default_atol(p)));
  if (!with_reference || elements > 4e5 || f.flops(p) > 2e8) return out;
  std::vector<kernels::HostTensor> in, ref;
  flashtune::testing::make_tensors(f, p, 42, in, ref);
  for (auto precision : {kernels::RefPrecision::f64, kernels::RefPrecision::same}) {
    auto outputs = ref;
    f.reference(p, in, outputs, precision);
    std::string values;
    for (const auto& o : outputs) {
      for (double v : o.values) values += num(v) + " ";
      values += "|" + std::string(o.checked.begin(), o.checked.end()) + "|";
    }
    out.push_back("reference " + std::to_string(int(precision)) + " " + core::hash_hex(values));
  }
  return out;
}

// What the family does with config c on problem p and device d: why it cannot run, or how it compiles and launches.
std::string config_line(const kernels::KernelFamily& f, const core::Config& c, const core::Problem& p,
                        const core::DeviceLimits& d) {
  std::string s = d.arch + " " + c.key() + " ";
  if (auto why = f.can_run(c, p, d)) return s + "no " + *why;
  const auto spec = f.specialize(c, p);
  s += "ok " + spec.name_expression;
  for (const auto& def : spec.defines) s += " -D" + def;
  const auto l = f.launch_shape(c, p, d);
  s += " grid=" + join_values({l.grid[0], l.grid[1], l.grid[2]}) + " block=" + join_values({l.block[0], l.block[1], l.block[2]}) +
       " smem=" + std::to_string(l.dynamic_smem_bytes) + " args";
  for (const auto& a : f.arguments(c, p)) s += " " + describe(a);
  return s;
}

// A deterministic sample of at most kMaxConfigs of `configs` (by a hash of the key: a stride would alias
// with the space's product order and miss whole values of the last tunables).
std::vector<core::Config> sample(const std::vector<core::Config>& configs) {
  if (configs.size() <= kMaxConfigs) return configs;
  const std::uint64_t keep = (configs.size() + kMaxConfigs - 1) / kMaxConfigs;
  std::vector<core::Config> out;
  for (const auto& c : configs)
    if (std::stoull(core::hash_hex(c.key()), nullptr, 16) % keep == 0) out.push_back(c);
  return out;
}

std::vector<std::string> configs_lines(const kernels::KernelFamily& f, const std::vector<core::Config>& configs,
                                       const core::Problem& p) {
  std::vector<std::string> out;
  if (f.check_problem(p)) return out;
  const auto picked = sample(configs);
  out.push_back("configs " + std::to_string(configs.size()) + " sampled " + std::to_string(picked.size()));
  for (const char* arch : kArchs) {
    const auto d = core::DeviceLimits::for_arch(arch);
    for (const auto& c : picked) out.push_back(config_line(f, c, p, d));
  }
  return out;
}

// Problems the default spaces are tried on: small ones (references compared too) and large ones, every dtype
// and mask switch; a problem a family refuses is recorded as its reason.
std::vector<core::Problem> default_problems(const kernels::KernelFamily& f) {
  using core::DType;
  const auto dims = f.problem_dims();
  std::vector<core::Problem> out;
  if (dims == std::vector<std::string>{"rows", "cols"}) {
    for (DType d : {DType::f32, DType::f16, DType::bf16})
      for (auto [r, c] : std::vector<std::pair<int, int>>{{37, 1000}, {1, 1}, {8, 4096}, {100000, 7}})
        out.push_back({{{"rows", r}, {"cols", c}}, d});
    return out;
  }
  if (std::find(dims.begin(), dims.end(), "d1") != dims.end()) {
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      out.push_back({{{"batch", 2}, {"d1", 33}, {"d2", 70}, {"d3", 40}, {"x_range", 8}}, d});
      out.push_back({{{"batch", 16}, {"d1", 2048}, {"d2", 8192}, {"d3", 512}, {"x_range", 4}}, d});
    }
    return out;
  }
  struct A {
    DType d;
    std::int64_t b, hq, hkv, sq, sk, hd;
    std::map<std::string, std::int64_t> extra;
  };
  const std::vector<A> attention{
      {DType::f16, 1, 4, 2, 70, 70, 64, {{"causal", 1}}},
      {DType::bf16, 2, 8, 1, 40, 90, 32, {{"window", 16}, {"sink_tokens", 4}, {"learned_sinks", 1}, {"sink_bias", 2}}},
      {DType::f32, 1, 2, 2, 33, 47, 32, {{"tf32", 1}}},
      {DType::f32, 1, 2, 1, 64, 64, 64, {{"causal", 1}, {"learned_sinks", 1}}},
      {DType::f16, 1, 2, 2, 50, 30, 16, {{"causal", 1}, {"qk_range", 3}}},
      {DType::bf16, 1, 16, 16, 4096, 4096, 128, {{"causal", 1}}},
      {DType::f16, 2, 64, 8, 8192, 8192, 64, {{"window", 128}, {"sink_tokens", 4}, {"learned_sinks", 1}}},
      {DType::f16, 1, 8, 8, 1024, 1024, 256, {}},
      {DType::f32, 1, 8, 2, 2048, 2048, 128, {{"window", 256}, {"sink_tokens", 8}}},
      // a causal window of 64 at head_dim 64: the windowed sweep's (attn_bwd_fused mma 92, attn_bwd_fused_delta)
      {DType::bf16, 2, 8, 2, 300, 300, 64, {{"causal", 1}, {"window", 64}}},
  };
  for (const auto& a : attention) out.push_back(flashtune::testing::attention_problem(f, a.d, a.b, a.hq, a.hkv, a.sq, a.sk, a.hd, a.extra));
  return out;
}

using Groups = std::map<std::string, std::vector<std::string>>;

Groups all_groups() {
  Groups g;
  for (const auto& f : kernels::all_families()) {
    g["family " + f->name()] = family_lines(*f);
    const auto space = flashtune::testing::default_space(*f);
    for (const auto& p : default_problems(*f)) {
      auto& lines = g["default " + f->name() + " " + p.key()];
      lines = problem_lines(*f, p, true);
      for (auto& l : configs_lines(*f, space, p)) lines.push_back(std::move(l));
    }
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(FT_SOURCE_DIR) / "experiments"))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    const auto exp = experiment::load_experiment(file);
    const std::string name = fs::relative(file, fs::path(FT_SOURCE_DIR) / "experiments").string();
    for (std::size_t s = 0; s < exp.studies.size(); ++s) {
      const auto& study = exp.studies[s];
      auto& lines = g["experiment " + name + " " + std::to_string(s) + " " + study.family];
      for (const auto& p : study.problems) {
        lines.push_back("problem " + p.key());
        for (auto& l : problem_lines(*study.kernel, p, false)) lines.push_back(std::move(l));
        const auto configs = experiment::candidates(study, p);
        std::string keys;
        for (const auto& c : configs) keys += c.key() + ";";
        lines.push_back("candidates " + std::to_string(configs.size()) + " " + core::hash_hex(keys));
        for (auto& l : configs_lines(*study.kernel, configs, p)) lines.push_back(std::move(l));
      }
    }
  }
  return g;
}

std::string digest(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return std::to_string(lines.size()) + " " + core::hash_hex(all);
}

const fs::path kGolden = fs::path(FT_SOURCE_DIR) / "tests" / "data" / "families_golden.txt";

TEST(FamiliesGolden, EveryGroupAnswersAsMainDidBeforeTheRefactor) {
  const Groups groups = all_groups();
  if (const char* dump = std::getenv("FT_GOLDEN_DUMP")) {
    std::ofstream out(dump);
    for (const auto& [name, lines] : groups)
      for (const auto& l : lines) out << name << " | " << l << '\n';
  }
  if (const char* write = std::getenv("FT_GOLDEN_WRITE")) {
    std::ofstream out(write);
    for (const auto& [name, lines] : groups) out << name << "\t" << digest(lines) << '\n';
  }
  std::ifstream in(kGolden);
  ASSERT_TRUE(in) << kGolden;
  std::map<std::string, std::string> golden;
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    golden[line.substr(0, tab)] = line.substr(tab + 1);
  }
  int shown = 0;
  for (const auto& [name, lines] : groups) {
    const auto it = golden.find(name);
    if (it == golden.end()) {
      ADD_FAILURE() << "new group: " << name;
      continue;
    }
    if (it->second == digest(lines)) continue;
    std::string head;
    for (std::size_t i = 0; i < lines.size() && i < 8; ++i) head += "\n  " + lines[i];
    ADD_FAILURE() << name << ": " << digest(lines) << ", golden " << it->second
                  << (++shown <= 5 ? head : std::string()) << "\n(FT_GOLDEN_DUMP=<file> writes every line)";
  }
  for (const auto& [name, d] : golden)
    if (!groups.count(name)) ADD_FAILURE() << "group gone: " << name;
  EXPECT_GT(golden.size(), 100u);
}

// The template file of the kernel config c runs on problem p, written out per operation from the layout of
// kernel_templates/ after its split (issue 18), independently of the descriptors.
std::string expected_template(const kernels::KernelFamily& f, const core::Config& c, const core::Problem& p) {
  const bool f32 = p.dtype == core::DType::f32;
  const std::int64_t mma = c.get("mma", 80);
  const std::string n = f.name();
  if (n == "attn_fwd")
    return f32 ? "attn_fwd_f32.cuh" : mma == 90 ? "attn_fwd_sm90.cuh" : mma == 91 ? "attn_fwd_sm90_tma.cuh" : "attn_fwd.cuh";
  if (n == "attn_bwd_preprocess" || n == "attn_bwd_dsink") return "attn_bwd_rows.cuh";
  if (n == "attn_bwd_dkdv") return f32 ? "attn_bwd_f32.cuh" : mma == 90 ? "attn_bwd_sm90.cuh" : "attn_bwd.cuh";
  if (n == "attn_bwd_dq" || n == "attn_bwd_dq_delta") return f32 ? "attn_bwd_f32.cuh" : "attn_bwd.cuh";
  if (n == "attn_bwd_fused")
    return mma == 91 ? "attn_bwd_sm90_tma.cuh" : mma == 92 ? "attn_bwd_sm90_sweep.cuh" : "attn_bwd_sm90.cuh";
  return f.template_file();  // one kernel in one file
}

TEST(FamiliesGolden, EachVariantNamesItsOwnTemplate) {
  const auto device = core::DeviceLimits::for_arch("sm_90a");
  for (const auto& f : kernels::all_families()) {
    const auto* op = dynamic_cast<const kernels::OperationBase*>(f.get());
    if (!op) continue;  // a family of one kernel outside the operation / variant scheme (softmax_matmul)
    if (kernels::kSplitTemplates) {
      for (const auto* v : op->variant_infos())
        EXPECT_FALSE(flashtune::testing::read_template(v->template_file).empty()) << f->name() << " " << v->name;
    }
    std::set<std::string> seen;  // variants some runnable config selected
    // The default configs that run on some default problem, sampled per selector value, so that each variant
    // keeps configs in the sample however its space (and the share of it a variant refuses) grows.
    const auto problems = default_problems(*f);
    std::map<std::int64_t, std::vector<core::Config>> by_selector;
    for (const auto& c : flashtune::testing::default_space(*f))
      for (const auto& p : problems)
        if (!f->check_problem(p) && !f->can_run(c, p, device)) {
          by_selector[c.get("mma", 0)].push_back(c);
          break;
        }
    std::vector<core::Config> space;
    for (const auto& [value, configs] : by_selector) {
      const auto part = sample(configs);
      space.insert(space.end(), part.begin(), part.end());
    }
    for (const auto& p : problems) {
      if (f->check_problem(p)) continue;
      for (const auto& c : space) {
        if (f->can_run(c, p, device)) continue;
        const std::string what = f->name() + " " + p.key() + " " + c.key();
        seen.insert(op->selected(c, p).name);
        const std::string file = op->selected(c, p).template_file;
        EXPECT_EQ(file, expected_template(*f, c, p)) << what;
        EXPECT_EQ(f->specialize(c, p).template_file, kernels::kSplitTemplates ? file : "") << what;
        EXPECT_EQ(f->template_file_for(c, p), kernels::kSplitTemplates ? file : f->template_file()) << what;
      }
    }
    EXPECT_EQ(seen.size(), op->variant_infos().size()) << f->name() << ": a variant no default config runs";
  }
}

}  // namespace
