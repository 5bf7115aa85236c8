// tests/kernels/kernel_test_support.hpp: helpers for the family tests: a template's text and a kernel's
// parameter list or parameter struct, the runner's input fill done on the host, and compiling many instantiations of one
// template in a few NVRTC calls (explicit instantiations; ptxas then reports every kernel).
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/family.hpp"
#include "reference/dtype.hpp"

namespace flashtune::testing {

/// The registered family `name`; throws when there is none.
inline const kernels::KernelFamily& registered_family(const std::string& name) {
  const kernels::KernelFamily* f = kernels::find_family(name);
  if (!f) throw core::Error(name + " is not registered");
  return *f;
}

/// An attention problem of family f: the given sizes, `extra` dims, the rest at the family's defaults.
inline core::Problem attention_problem(const kernels::KernelFamily& f, core::DType d, std::int64_t b, std::int64_t hq,
                                       std::int64_t hkv, std::int64_t sq, std::int64_t sk, std::int64_t hd,
                                       const std::map<std::string, std::int64_t>& extra = {}) {
  core::Problem p{{{"batch", b}, {"heads_q", hq}, {"heads_kv", hkv}, {"seq_q", sq}, {"seq_k", sk}, {"head_dim", hd}}, d};
  for (const auto& o : f.optional_problem_dims()) p.dims.emplace(o.name, o.fallback);
  for (const auto& [k, v] : extra) p.dims[k] = v;
  f.complete_problem(p);
  return p;
}

/// Every combination of the family's default tunable values (its default search space, unconstrained).
inline std::vector<core::Config> default_space(const kernels::KernelFamily& f) {
  std::vector<core::Config> configs{core::Config{}};
  for (const auto& t : f.tunables()) {
    std::vector<core::Config> next;
    for (const auto& c : configs)
      for (std::int64_t v : t.values) {
        core::Config x = c;
        x.values[t.name] = v;
        next.push_back(x);
      }
    configs = std::move(next);
  }
  return configs;
}

inline std::string read_template(const std::string& file) {
  std::ifstream in(std::string(FT_SOURCE_DIR) + "/kernel_templates/" + file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Parameter declarations of `<kernel>(...)` in the template text, in order ("T* __restrict__ s", ...).
inline std::vector<std::string> kernel_parameters(const std::string& source, const std::string& kernel) {
  const std::regex sig(kernel + R"(\s*\(([^)]*)\))");
  std::smatch m;
  if (!std::regex_search(source, m, sig)) return {};
  std::vector<std::string> params;
  std::stringstream ss(m[1].str());
  for (std::string p; std::getline(ss, p, ',');) params.push_back(p);
  return params;
}

/// True when `kernel`'s definition in `source` takes one parameter, `const __grid_constant__ <type><...> p`
/// (the operation's parameter struct, kernel_templates/attn_params.cuh).
inline bool takes_params_struct(const std::string& source, const std::string& kernel, const std::string& type) {
  return std::regex_search(source, std::regex(kernel + R"(\(const __grid_constant__ )" + type + R"(<\w+> \w+\))"));
}

/// The explicit instantiation of an attention kernel (`name_expression` as specialize() gives it): its one
/// parameter, FtAttnFwdParams or FtAttnBwdParams (the TMA kernels: FtAttnFwdTmaParams, FtAttnBwdTmaParams) of its
/// element type (float for the fp32 and dsink kernels).
inline std::string attn_instantiation(const std::string& name_expression) {
  const std::string kernel = name_expression.substr(0, name_expression.find('<'));
  const bool tma = kernel.find("_tma_kernel") != std::string::npos;  // the TMA kernels' structs carry tensor maps
  const std::string params = std::string(kernel.rfind("attn_fwd", 0) == 0 ? "FtAttnFwd" : "FtAttnBwd") + (tma ? "TmaParams" : "Params");
  const std::string first = name_expression.substr(name_expression.find('<') + 1,
                                                   name_expression.find_first_of(",>") - name_expression.find('<') - 1);
  const std::string t = first == "ft_half" || first == "ft_bf16" ? first : "float";
  return "template __global__ void " + name_expression + "(const __grid_constant__ " + params + "<" + t + ">);";
}

/// "" when `args` is one parameter struct of `bytes` bytes binding every one of `buffers` exactly once, each
/// at its own 8-byte member inside the struct; else what is wrong.
inline std::string check_params_arg(const std::vector<kernels::KernelArg>& args, std::size_t bytes,
                                    const std::vector<kernels::BufferSpec>& buffers) {
  if (args.size() != 1) return std::to_string(args.size()) + " arguments, not one parameter struct";
  const auto* a = std::get_if<kernels::ParamsArg>(&args[0]);
  if (!a) return "the argument is not a parameter struct";
  if (a->bytes.size() != bytes) return "struct of " + std::to_string(a->bytes.size()) + " bytes, not " + std::to_string(bytes);
  std::map<std::size_t, int> members;
  std::vector<int> uses(buffers.size(), 0);
  for (const auto& ptr : a->pointers) {
    if (ptr.offset % 8 != 0 || ptr.offset + 8 > bytes) return "pointer at byte " + std::to_string(ptr.offset);
    if (!members.emplace(ptr.offset, ptr.buffer).second) return "member at byte " + std::to_string(ptr.offset) + " bound twice";
    if (ptr.buffer < 0 || std::size_t(ptr.buffer) >= buffers.size()) return "buffer " + std::to_string(ptr.buffer);
    ++uses[std::size_t(ptr.buffer)];
  }
  for (std::size_t i = 0; i < buffers.size(); ++i)
    if (uses[i] != 1) return "buffer " + buffers[i].name + " bound " + std::to_string(uses[i]) + " times";
  return "";
}

/// Inputs filled as the runner fills them (uniform in [lo, hi], rounded to the dtype), and zeroed outputs
/// (workspaces are skipped).
inline void make_tensors(const kernels::KernelFamily& f, const core::Problem& p, std::uint64_t seed,
                         std::vector<kernels::HostTensor>& inputs, std::vector<kernels::HostTensor>& outputs) {
  inputs.clear(), outputs.clear();
  std::uint64_t stream = 0;
  for (const auto& b : f.buffers(p)) {
    if (b.role == kernels::BufferRole::input) {
      inputs.push_back({b.dtype, reference::uniform(std::size_t(b.elements), b.lo, b.hi, seed + 7919 * ++stream), {}});
      reference::round_all(b.dtype, inputs.back().values);
    } else if (b.role == kernels::BufferRole::output) {
      outputs.push_back({b.dtype, std::vector<double>(std::size_t(b.elements)), {}});
    }
  }
}

struct BatchCompile {
  core::CompileRecord record;
  int entries = 0;       ///< kernels ptxas compiled
  int spilling = 0;      ///< of them, with spill stores
  int max_registers = 0;
};

/// `name_expression` of `source` (`source_name` in logs; it may include any kernel template) compiled for `arch`.
inline jit::CompileOutput compile_kernel(const std::string& source, const std::string& source_name,
                                         const std::string& name_expression, const std::string& arch) {
  jit::CompileRequest req;
  req.source = source;
  req.source_name = source_name;
  req.name_expression = name_expression;
  req.arch = arch;
  req.headers = jit::template_headers(std::nullopt);
  return jit::Compiler(std::nullopt).compile(req);
}

/// Compiles `source` plus one explicit instantiation per entry of `instantiations` (each a full
/// declaration such as "template __global__ void k<float, 128>(float*, int);") for `arch`.
inline BatchCompile compile_instantiations(const std::string& source, const std::string& source_name,
                                           const std::vector<std::string>& instantiations, const std::string& arch) {
  jit::CompileRequest req;
  req.source = source + "\n";
  for (const auto& i : instantiations) req.source += i + "\n";
  req.source_name = source_name;
  req.arch = arch;
  req.headers = jit::template_headers(std::nullopt);
  const auto out = jit::Compiler(std::nullopt).compile(req);
  BatchCompile r;
  r.record = out.record;
  const std::string& log = out.record.log;
  static const std::regex entry(R"(Compiling entry function)");
  static const std::regex spill(R"(([0-9]+) bytes spill stores)");
  static const std::regex regs(R"(Used ([0-9]+) registers)");
  r.entries = int(std::distance(std::sregex_iterator(log.begin(), log.end(), entry), std::sregex_iterator()));
  for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator(); ++it)
    r.spilling += std::stoi((*it)[1]) > 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), regs); it != std::sregex_iterator(); ++it)
    r.max_registers = std::max(r.max_registers, std::stoi((*it)[1]));
  return r;
}

/// compile_instantiations() split into chunks compiled in parallel (one per hardware thread, at most
/// 16); the results are summed, the first failed record (if any) is kept.
inline BatchCompile compile_instantiations_parallel(const std::string& source, const std::string& source_name,
                                                    const std::vector<std::string>& instantiations,
                                                    const std::string& arch) {
  const std::size_t workers = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
  const std::size_t per = (instantiations.size() + workers - 1) / workers;
  std::vector<std::future<BatchCompile>> parts;
  for (std::size_t i = 0; i < instantiations.size(); i += per) {
    std::vector<std::string> chunk(instantiations.begin() + std::ptrdiff_t(i),
                                   instantiations.begin() + std::ptrdiff_t(std::min(i + per, instantiations.size())));
    parts.push_back(std::async(std::launch::async, [&, chunk] { return compile_instantiations(source, source_name, chunk, arch); }));
  }
  BatchCompile all;
  all.record.ok = true;
  for (auto& f : parts) {
    const BatchCompile r = f.get();
    if (all.record.ok && !r.record.ok) all.record = r.record;
    else if (all.record.ok) all.record.log += r.record.log;
    all.entries += r.entries;
    all.spilling += r.spilling;
    all.max_registers = std::max(all.max_registers, r.max_registers);
  }
  return all;
}

}  // namespace flashtune::testing
