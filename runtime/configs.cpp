// runtime/configs.cpp: ConfigTable (configs.hpp).
#include "runtime/configs.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "harness/cli/export.hpp"
#include "harness/cli/results.hpp"
#include "tuner/constraint.hpp"

namespace flashtune::runtime {

namespace {

double squash(double x) { return (x < 0 ? -1.0 : 1.0) * std::log2(std::abs(x) + 1.0); }

std::map<std::string, std::int64_t> int_map(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) throw core::UserError(what + " is not an object");
  std::map<std::string, std::int64_t> out;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_number_integer()) throw core::UserError(what + "." + k + " is not an integer");
    out[k] = v.get<std::int64_t>();
  }
  return out;
}

std::string text(const nlohmann::json& e, const char* key, const std::string& where) {
  if (!e.contains(key) || !e[key].is_string()) throw core::UserError(where + ": \"" + key + "\" missing or not text");
  return e[key].get<std::string>();
}

}  // namespace

ConfigTable ConfigTable::parse(const std::string& json_text, const std::string& origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw core::UserError(origin + ": not JSON (" + e.what() + ")");
  }
  if (!doc.is_object() || !doc.contains("entries") || !doc["entries"].is_array())
    throw core::UserError(origin + ": no \"entries\" list (is it `flashtune export --format json` output?)");
  if (doc.value("schema", 0) != 2)
    throw core::UserError(origin + ": export schema " + doc.value("schema", nlohmann::json(0)).dump() + ", expected 2");
  ConfigTable t;
  for (const auto& e : doc["entries"]) {
    const std::string where = origin + " entry " + std::to_string(t.m_entries.size());
    try {
      Entry x;
      x.family = text(e, "family", where);
      x.stage = text(e, "stage", where);
      x.gpu = text(e, "gpu", where);
      const auto dtype = core::parse_dtype(text(e, "dtype", where));
      if (!dtype) throw core::UserError(where + ": unknown dtype " + e["dtype"].dump());
      x.problem.dtype = *dtype;
      x.problem.dims = int_map(e.value("problem", nlohmann::json()), where + " problem");
      x.config.values = int_map(e.value("config", nlohmann::json()), where + " config");
      const auto& ev = e.value("evidence", nlohmann::json::object());
      x.median_ms = ev.contains("median_ms") && ev["median_ms"].is_number() ? ev["median_ms"].get<double>() : 0.0;
      x.index = t.m_entries.size();
      t.m_entries.push_back(std::move(x));
    } catch (const nlohmann::json::exception& ex) {
      throw core::UserError(where + ": " + ex.what());
    }
  }
  return t;
}

ConfigTable ConfigTable::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::UserError("cannot read config file " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  // A flashtune database: its best configs exactly as `flashtune export --format json` writes them (one rule, one
  // code path: cli/results.cpp best_per_problem, cli/export.cpp export_json), the file opened read-only.
  static constexpr std::string_view kSqliteMagic{"SQLite format 3\0", 16};
  if (text.compare(0, kSqliteMagic.size(), kSqliteMagic) == 0) {
    std::string exported;
    try {
      const db::Store store(path, db::Store::Access::read_only);
      exported = cli::export_json(cli::best_per_problem(store.trials()));
    } catch (const core::Error& e) {
      throw core::UserError("database " + path.string() + ": " + e.what());
    }
    return parse(exported, path.string());
  }
  return parse(text, path.string());
}

void ConfigTable::add_builtin_fallbacks() {
  // Configs checked on an H100; can_run and the family's constraints still decide per shape.
  // Rank 0, sm_90a (can_run refuses them elsewhere): the configs tuned for the dense bf16 shapes at seq 8192
  // (experiments/tests/attn_bwd_standings.yaml, attn_fwd_tma_bench.yaml; docs/NOTES.md sessions 21, 44, 49) and for
  // the GPT-OSS shape (experiments/attention/gpt_oss_step.yaml: causal window, head_dim 64), each where its `when`
  // holds. Rank 1, sm_80 and newer: mma.sync kernels (tests/runtime, docs/NOTES.md session 25).
  struct Fallback {
    const char* family;
    std::string config;
    std::vector<core::DType> dtypes;
    int rank;
    const char* when;
  };
  using core::DType;
  const std::vector<DType> all = {DType::f16, DType::bf16, DType::f32}, half = {DType::f16, DType::bf16};
  // What the sm_90a forward and fused backward entries share.
  const std::string fwd90 = "epilogue=2,exp_poly=1,mma=91,mma_pipe=2,mma_sched=1,num_stages=2,persistent=3,rescale=2,";
  const std::string fused = "block_n=128,dq_order=1,epilogue=2,min_blocks=1,mma=91,num_stages=2,num_warps=8,tail=2,";
  const std::vector<Fallback> fallbacks = {
      {"attn_fwd", fwd90 + "block_m=128,block_n=128,min_blocks=1,num_warps=8,pack_heads=1", half, 0, "head_dim == 128 && window == 0"},
      {"attn_fwd", fwd90 + "block_m=192,block_n=128,min_blocks=1,num_warps=12,pack_heads=1", half, 0, "head_dim == 64 && window == 0"},
      {"attn_fwd", fwd90 + "block_m=64,block_n=32,min_blocks=4,num_warps=4,pack_heads=4", half, 0, "head_dim == 64 && window > 0"},
      {"attn_bwd_fused", fused + "block_m=80,unit_group=1", half, 0, "head_dim == 128 && causal == 0 && window == 0"},
      {"attn_bwd_fused", fused + "block_m=64,unit_group=2", half, 0, "head_dim == 128 && causal == 1 && window == 0"},
      {"attn_bwd_fused", fused + "block_m=128,unit_group=2", half, 0, "head_dim == 64 && window == 0"},
      // the windowed sweep (mma 92: causal sliding windows at head_dim 64, D in the same pass)
      {"attn_bwd_fused_delta", "block_m=64,block_n=192,dq_order=1,min_blocks=1,mma=92,num_stages=2,num_warps=12,unit_group=1",
       half, 0, "head_dim == 64 && causal == 1 && window > 0"},
      {"attn_fwd", "block_m=64,block_n=64,epilogue=1,exp_poly=1,min_blocks=1,mma=80,mma_pipe=1,mma_sched=1,"
                   "num_stages=2,num_warps=4,pack_heads=1,persistent=1,rescale=1", all, 1, ""},
      {"attn_bwd_preprocess", "block_m=128,num_warps=4", all, 0, ""},
      {"attn_bwd_dkdv", "block_m=64,block_n=64,item_split=1,min_blocks=1,mma=80,num_stages=2,num_warps=4,sink_split=1", all, 1, ""},
      // head_dim 128, where 64 x 64 needs ~272 registers: 16-row tiles (238 registers bf16, 254 fp32, no spills)
      {"attn_bwd_dkdv", "block_m=16,block_n=64,item_split=1,min_blocks=1,mma=80,num_stages=2,num_warps=4,sink_split=1", all, 1, ""},
      {"attn_bwd_dq", "block_m=64,block_n=64,min_blocks=1,num_stages=2,num_warps=4,pack_heads=1", all, 1, ""},
      {"attn_bwd_dsink", "num_warps=8", all, 0, ""},
  };
  for (const auto& f : fallbacks)
    for (DType d : f.dtypes) {
      Entry e;
      e.family = f.family;
      e.problem.dtype = d;
      const std::string& key = f.config;
      for (std::size_t start = 0; start < key.size();) {
        const std::size_t comma = std::min(key.find(',', start), key.size());
        const std::string item = key.substr(start, comma - start);
        const std::size_t eq = item.find('=');
        e.config.values[item.substr(0, eq)] = std::stoll(item.substr(eq + 1));
        start = comma + 1;
      }
      e.index = m_entries.size();
      e.builtin = true;
      e.builtin_rank = f.rank;
      e.when = f.when;
      m_entries.push_back(std::move(e));
    }
}

double ConfigTable::distance(const core::Problem& a, const core::Problem& b) {
  std::set<std::string> names;
  for (const auto& [k, v] : a.dims) names.insert(k);
  for (const auto& [k, v] : b.dims) names.insert(k);
  double d = 0;
  for (const auto& n : names) d += std::abs(squash(double(a.get(n, 0))) - squash(double(b.get(n, 0))));
  return d;
}

std::vector<Candidate> ConfigTable::rank(const std::string& family, const core::Problem& problem,
                                         const std::string& gpu) const {
  std::vector<Candidate> out;
  std::vector<std::string> names;  // the problem's dims: the variables of a built-in entry's `when`
  for (const auto& [k, v] : problem.dims) names.push_back(k);
  for (const auto& e : m_entries) {
    if (e.family != family || e.problem.dtype != problem.dtype) continue;
    if (e.builtin && !e.when.empty() && !tuner::ConstraintSet({e.when}, names).allows(core::Config{}, problem)) continue;
    out.push_back({&e, distance(e.problem, problem), gpu.empty() || e.gpu == gpu});
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& x, const Candidate& y) {
    if (x.entry->builtin != y.entry->builtin) return y.entry->builtin;
    if (x.entry->builtin) return x.entry->builtin_rank < y.entry->builtin_rank;  // then in the order added
    if (x.same_gpu != y.same_gpu) return x.same_gpu;
    return x.distance < y.distance;
  });
  return out;
}

}  // namespace flashtune::runtime
