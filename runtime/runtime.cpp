// runtime/runtime.cpp: Runtime (runtime.hpp): choosing, compiling, loading and launching the stages of a call.
#include "runtime/runtime.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <tuple>

#include <nlohmann/json.hpp>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/check.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/cuda/module.hpp"
#include "harness/kernels/attn_bwd_ways.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/launch.hpp"

namespace flashtune::runtime {

namespace {

// The caller's tensors by buffer name (kernels' BufferSpec::name), in ft_attn_tensors' field order.
constexpr std::array<const char*, 11> kTensorNames = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv", "sinks", "dsinks"};
static_assert(sizeof(ft_attn_tensors) == kTensorNames.size() * sizeof(std::uint64_t), "ft_attn_tensors: 11 pointers");
constexpr int kSinksTensor = 9;

std::uint64_t tensor_at(const ft_attn_tensors& t, int i) {
  std::uint64_t v[kTensorNames.size()];
  std::memcpy(v, &t, sizeof v);
  return v[i];
}
int tensor_index(const std::string& name) {
  for (std::size_t i = 0; i < kTensorNames.size(); ++i)
    if (name == kTensorNames[i]) return int(i);
  return -1;
}

constexpr std::size_t kAlign = 256;  // [bytes] of each workspace piece's start
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
std::size_t bytes_of(const kernels::BufferSpec& b) { return std::size_t(b.elements) * core::dtype_size(b.dtype); }

const kernels::KernelFamily& family_named(const std::string& name) {
  const kernels::KernelFamily* f = kernels::find_family(name);
  if (!f) throw RuntimeError(FT_ERR_ARGUMENT, "this build has no operation " + name);
  return *f;
}

}  // namespace

// One stage of a call: the operation, the entry it runs, and where each of its buffers lives.
struct Stage {
  const kernels::KernelFamily* family = nullptr;
  Candidate pick;
  core::Config config;
  kernels::LaunchShape shape;
  std::vector<kernels::BufferSpec> specs;
  std::vector<int> tensor;               // per spec: index into kTensorNames, or -1: in the workspace at ws_offset
  std::vector<std::size_t> ws_offset;    // per spec [bytes]
  std::optional<jit::CompileOutput> compiled;
  std::unique_ptr<cuda::Module> module;  // loaded in the plan's context
  CUfunction fn = nullptr;
  kernels::CachedLaunch launch;          // the last call's packed arguments (under Runtime::m_mutex)
  std::vector<std::uint64_t> buffers;    // this call's addresses, per spec (under Runtime::m_mutex)
};

// A pass of one shape on one device: its stages in launch order and their workspace.
struct Plan {
  Pass pass = Pass::forward;
  core::Problem problem;
  std::vector<Stage> stages;
  std::size_t workspace_bytes = 0;  // [bytes] D, the sinks stand-in and every stage's workspaces, each 256-aligned
  std::vector<std::string> passed_over;  // the backward's other ways, each with why it was not taken
  cuda::DeviceBuffer own;           // the runtime's workspace, allocated and zeroed on first use
};

struct Runtime::DeviceState {
  cuda::DeviceInfo info;
  std::map<std::array<std::int64_t, 12>, std::unique_ptr<Plan>> plans;
};

core::Problem attention_problem(const ft_attn_shape& s) {
  core::Problem p;
  switch (s.dtype) {
    case FT_F32: p.dtype = core::DType::f32; break;
    case FT_F16: p.dtype = core::DType::f16; break;
    case FT_BF16: p.dtype = core::DType::bf16; break;
    default: throw RuntimeError(FT_ERR_ARGUMENT, "dtype " + std::to_string(s.dtype) + " is not FT_F32, FT_F16 or FT_BF16");
  }
  p.dims = {{"batch", s.batch},   {"heads_q", s.heads_q},       {"heads_kv", s.heads_kv},
            {"seq_q", s.seq_q},   {"seq_k", s.seq_k},           {"head_dim", s.head_dim},
            {"causal", s.causal}, {"window", s.window},         {"sink_tokens", s.sink_tokens},
            {"learned_sinks", s.learned_sinks}, {"tf32", 0},    {"qk_range", 1},
            {"sink_bias", 0}};
  if (auto why = family_named("attn_fwd").check_problem(p)) throw RuntimeError(FT_ERR_ARGUMENT, "attention shape: " + *why);
  return p;
}

Runtime::Runtime(ConfigTable table, std::optional<std::filesystem::path> cache_dir)
    : m_table(std::move(table)), m_compiler(std::move(cache_dir)), m_headers(jit::template_headers(std::nullopt)) {}

Runtime::~Runtime() = default;

Runtime::DeviceState& Runtime::current_device() {
  std::string why;
  if (!cuda::driver_available(&why)) throw RuntimeError(FT_ERR_CUDA, why);
  const auto& d = cuda::driver();
  CUcontext ctx = nullptr;
  FT_CHECK_CU(d.cuCtxGetCurrent(&ctx));
  if (!ctx) {
    if (cuda::device_count() == 0) throw RuntimeError(FT_ERR_CUDA, "no CUDA device");
    if (!m_primary) m_primary = std::make_unique<cuda::Context>(0);
    m_primary->make_current();
    ctx = m_primary->get();
  }
  auto& slot = m_devices[ctx];
  if (!slot) {
    CUdevice dev = 0;
    FT_CHECK_CU(d.cuCtxGetDevice(&dev));
    auto state = std::make_unique<DeviceState>();
    state->info = cuda::query_device(int(dev));
    slot = std::move(state);
  }
  return *slot;
}

std::unique_ptr<Plan> Runtime::make_plan(Pass pass, const core::Problem& problem, const std::string& gpu,
                                         const core::DeviceLimits& limits) {
  const bool sinks = problem.get("learned_sinks", 0) != 0;
  // The first entry of `name` (configs.hpp's order) that can run here, else nullopt and why not.
  auto pick = [&](const std::string& name, std::string& why) -> std::optional<Stage> {
    const auto& family = family_named(name);
    if (auto bad = family.check_problem(problem)) {
      why = name + ": " + *bad;
      return std::nullopt;
    }
    auto cs = m_constraints.find(name);
    if (cs == m_constraints.end())
      cs = m_constraints.emplace(name, tuner::ConstraintSet(family.constraints(), family.constraint_variables())).first;
    const auto ranked = m_table.rank(name, problem, gpu);
    if (ranked.empty()) {
      why = name + ": no " + std::string(core::to_string(problem.dtype)) + " entry (tune it)";
      return std::nullopt;
    }
    std::string first_no;
    for (const auto& c : ranked) {
      std::optional<std::string> no;
      try {
        // A config tuned on another problem, or a fallback: the family's own constraints first (what the tuner pruned
        // by), then what the device allows.
        if (auto bad = cs->second.violated(c.entry->config, problem)) no = "constraint " + *bad;
        else no = family.can_run(c.entry->config, problem, limits);
      } catch (const core::Error& e) {
        no = e.what();
      }
      if (no) {
        if (first_no.empty()) first_no = c.entry->config.key() + ": " + *no;
        continue;
      }
      Stage s;
      s.family = &family;
      s.pick = c;
      s.config = c.entry->config;
      s.shape = family.launch_shape(s.config, problem, limits);
      s.specs = family.buffers(problem);
      return s;
    }
    why = name + ": none of its " + std::to_string(ranked.size()) + " entries runs here (" + first_no + ")";
    return std::nullopt;
  };

  auto plan = std::make_unique<Plan>();
  plan->pass = pass;
  plan->problem = problem;
  if (pass == Pass::forward) {
    std::string why;
    auto s = pick("attn_fwd", why);
    if (!s) throw RuntimeError(FT_ERR_NO_CONFIG, "attention forward of " + problem.key() + ": " + why);
    plan->stages.push_back(std::move(*s));
  } else {
    // The fastest complete way: entries of this GPU first, then the nearest tuned problems (the farthest stage of a way
    // counts), then the summed medians.
    // Built-in fallbacks used (fewer first: a way of the file's entries and the built-in dsink before one of
    // fallbacks alone), the highest builtin_rank used (sm_90a kernels before mma.sync ones), another GPU's, distance,
    // ms.
    using Score = std::tuple<int, int, bool, double, double>;
    std::optional<Score> best;
    std::string whys, best_text;
    auto way_name = [](const std::vector<std::string>& way) {
      std::string n;
      for (const auto& f : way) n += (n.empty() ? "" : " + ") + f;
      return n;
    };
    for (auto way : kernels::attn_bwd::ways()) {
      if (sinks) way.push_back(kernels::attn_bwd::kDsinkStage);
      std::vector<Stage> stages;
      Score score{0, 0, false, 0.0, 0.0};
      for (const auto& name : way) {
        std::string why;
        auto s = pick(name, why);
        if (!s) {
          whys += (whys.empty() ? "" : "; ") + why;
          plan->passed_over.push_back(way_name(way) + ": " + why);
          stages.clear();
          break;
        }
        std::get<0>(score) += s->pick.entry->builtin ? 1 : 0;
        if (s->pick.entry->builtin) std::get<1>(score) = std::max(std::get<1>(score), s->pick.entry->builtin_rank);
        std::get<2>(score) = std::get<2>(score) || !s->pick.same_gpu;
        std::get<3>(score) = std::max(std::get<3>(score), s->pick.distance);
        std::get<4>(score) += s->pick.entry->median_ms;
        stages.push_back(std::move(*s));
      }
      if (stages.empty()) continue;
      const std::string taken = way_name(way) + ": " + std::to_string(std::get<4>(score)) + " ms summed at distance " +
                                std::to_string(std::get<3>(score)) + (std::get<2>(score) ? " (another GPU's entries)" : "") +
                                (std::get<0>(score) ? " (built-in untuned fallbacks)" : "");
      if (!best || score < *best) {
        if (best) plan->passed_over.push_back(best_text);
        best = score, best_text = taken, plan->stages = std::move(stages);
      } else {
        plan->passed_over.push_back(taken);
      }
    }
    if (!best) throw RuntimeError(FT_ERR_NO_CONFIG, "attention backward of " + problem.key() + ": no complete way (" + whys + ")");
  }

  // The workspace: D (between the backward's stages), a zeroed stand-in for `sinks` where the problem has none, then
  // each stage's own workspaces, apart (a stage may leave its pieces nonzero).
  std::size_t offset = 0, delta = 0, no_sinks = 0;
  auto any = [&](const std::string& n) {
    for (const auto& st : plan->stages)
      for (const auto& b : st.specs)
        if (b.name == n) return &b;
    return static_cast<const kernels::BufferSpec*>(nullptr);
  };
  if (const auto* b = any("delta")) delta = offset, offset += align_up(bytes_of(*b));
  if (const auto* b = any("sinks"); b && !sinks) no_sinks = offset, offset += align_up(bytes_of(*b));
  for (auto& st : plan->stages) {
    st.tensor.assign(st.specs.size(), -1);
    st.ws_offset.assign(st.specs.size(), 0);
    for (std::size_t i = 0; i < st.specs.size(); ++i) {
      const auto& b = st.specs[i];
      if (b.role == kernels::BufferRole::workspace) {
        st.ws_offset[i] = offset, offset += align_up(bytes_of(b));
      } else if (b.name == "delta") {
        st.ws_offset[i] = delta;
      } else if (b.name == "sinks" && !sinks) {
        st.ws_offset[i] = no_sinks;
      } else if ((st.tensor[i] = tensor_index(b.name)) < 0) {
        throw RuntimeError(FT_ERR_ARGUMENT, st.family->name() + " reads buffer '" + b.name + "', which the runtime cannot supply");
      }
    }
  }
  plan->workspace_bytes = offset;
  return plan;
}

void Runtime::compile(Plan& plan, const std::string& arch) {
  for (auto& st : plan.stages) {
    if (st.compiled) continue;
    const auto spec = st.family->specialize(st.config, plan.problem);
    const std::string file = spec.template_file.empty() ? st.family->template_file() : spec.template_file;
    auto src = m_sources.find(file);
    if (src == m_sources.end()) src = m_sources.emplace(file, jit::load_template(file, std::nullopt)).first;
    jit::CompileRequest req;
    req.source = src->second;
    req.source_name = file;
    req.name_expression = spec.name_expression;
    req.defines = spec.defines;
    req.arch = arch;
    req.headers = m_headers;
    auto out = m_compiler.compile(req);
    if (!out.record.ok)
      throw RuntimeError(FT_ERR_COMPILE, st.family->name() + " " + st.config.key() + " for " + arch + ": " +
                                             jit::first_error_line(out.record.log));
    st.compiled = std::move(out);
  }
}

Plan& Runtime::plan_for(DeviceState& dev, Pass pass, const ft_attn_shape& s) {
  const std::array<std::int64_t, 12> key = {int(pass), s.batch, s.heads_q, s.heads_kv, s.seq_q, s.seq_k, s.head_dim,
                                            s.causal,  s.window, s.sink_tokens, s.learned_sinks, s.dtype};
  auto it = dev.plans.find(key);
  if (it != dev.plans.end()) return *it->second;
  auto plan = make_plan(pass, attention_problem(s), dev.info.name, dev.info.limits);
  compile(*plan, dev.info.arch);
  for (auto& st : plan->stages) {
    st.module = std::make_unique<cuda::Module>(st.compiled->cubin);
    st.fn = st.module->function(st.compiled->record.lowered_name);
  }
  return *dev.plans.emplace(key, std::move(plan)).first->second;
}

void Runtime::run(Pass pass, const ft_attn_shape& shape, const ft_attn_tensors& t, void* stream_ptr,
                  std::uint64_t workspace, std::size_t workspace_bytes) {
  const auto stream = static_cast<CUstream>(stream_ptr);
  std::lock_guard lock(m_mutex);
  Plan& plan = plan_for(current_device(), pass, shape);
  CUdeviceptr base = workspace;
  if (workspace) {
    if (workspace_bytes < plan.workspace_bytes)
      throw RuntimeError(FT_ERR_BUFFER, "workspace of " + std::to_string(workspace_bytes) + " B < the " +
                                            std::to_string(plan.workspace_bytes) + " B this call needs");
  } else if (plan.workspace_bytes) {
    if (!plan.own.ptr()) {
      cuda::DeviceBuffer b(plan.workspace_bytes);
      b.fill_bytes(0, stream);
      plan.own = std::move(b);
    }
    base = plan.own.ptr();
  }
  // Launched under the lock: a stage's cached arguments are shared by the threads that call this shape.
  for (auto& st : plan.stages) {
    auto& buffers = st.buffers;
    buffers.resize(st.specs.size());
    for (std::size_t i = 0; i < st.specs.size(); ++i) {
      if (st.tensor[i] < 0) {
        buffers[i] = base + st.ws_offset[i];
        continue;
      }
      buffers[i] = tensor_at(t, st.tensor[i]);
      if (!buffers[i])
        throw RuntimeError(FT_ERR_ARGUMENT, std::string(pass == Pass::forward ? "forward" : "backward") + ": tensor '" +
                                                kTensorNames[std::size_t(st.tensor[i])] + "' is NULL" +
                                                (st.tensor[i] == kSinksTensor ? " (learned_sinks is 1)" : ""));
    }
    st.launch.run(*st.family, st.config, plan.problem, st.shape, st.fn, buffers, stream);
  }
}

std::size_t Runtime::workspace_bytes(Pass pass, const ft_attn_shape& shape) {
  std::lock_guard lock(m_mutex);
  return plan_for(current_device(), pass, shape).workspace_bytes;
}

std::string Runtime::explain(Pass pass, const ft_attn_shape& shape, const std::string& arch) {
  std::lock_guard lock(m_mutex);
  nlohmann::json j;
  const Plan* plan = nullptr;
  std::unique_ptr<Plan> offline;
  if (arch.empty()) {
    DeviceState& dev = current_device();
    plan = &plan_for(dev, pass, shape);
    j["gpu"] = dev.info.name;
    j["arch"] = dev.info.arch;
  } else {
    core::DeviceLimits limits;
    try {
      limits = core::DeviceLimits::for_arch(arch);
    } catch (const core::Error& e) {
      throw RuntimeError(FT_ERR_ARGUMENT, e.what());
    }
    offline = make_plan(pass, attention_problem(shape), "", limits);
    compile(*offline, arch);
    plan = offline.get();
    j["gpu"] = nullptr;
    j["arch"] = arch;
  }
  j["pass"] = pass == Pass::forward ? "forward" : "backward";
  j["problem"] = plan->problem.key();
  j["workspace_bytes"] = plan->workspace_bytes;
  j["passed_over"] = plan->passed_over;
  j["way"] = nlohmann::json::array();
  j["stages"] = nlohmann::json::array();
  for (const auto& st : plan->stages) {
    j["way"].push_back(st.family->name());
    const auto& e = *st.pick.entry;
    const auto& r = st.compiled->record;
    j["stages"].push_back({{"family", st.family->name()},
                           {"config", st.config.key()},
                           {"tuned_problem", e.problem.key()},
                           {"tuned_gpu", e.gpu},
                           {"untuned", e.builtin},
                           {"exact", st.pick.distance == 0},
                           {"distance", st.pick.distance},
                           {"median_ms", e.median_ms},
                           {"compile",
                            {{"ok", r.ok},
                             {"cache_hit", r.cache_hit},
                             {"registers", r.resources.registers},
                             {"spill_bytes", r.resources.spill_store_bytes},
                             {"compile_ms", r.compile_ms}}}});
  }
  return j.dump();
}

}  // namespace flashtune::runtime
