// harness/cli/peers_json.cpp: the JSON contract of `flashtune peers` (peers.hpp, python/README.md "Peers"): the job
// the CLI writes for `python -m flashtune.peers` and the result it reads back, checked field by field.
#include <limits>

#include "harness/cli/peers.hpp"
#include "harness/kernels/attention.hpp"
#include "harness/kernels/problem_views.hpp"

namespace flashtune::cli {

namespace {

// A result entry's field, or a UserError naming the file, the entry and the field.
const nlohmann::json& field(const nlohmann::json& j, const char* name, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) throw core::UserError(where + ": missing '" + name + "'");
  return j.at(name);
}

std::string text_field(const nlohmann::json& j, const char* name, const std::string& where) {
  const auto& v = field(j, name, where);
  if (!v.is_string()) throw core::UserError(where + ": '" + std::string(name) + "' is not a string");
  return v.get<std::string>();
}

double number(const nlohmann::json& j, const char* name, const std::string& where) {
  const auto& v = field(j, name, where);
  if (!v.is_number()) throw core::UserError(where + ": '" + std::string(name) + "' is not a number");
  return v.get<double>();
}

// A number the contract writes as null when it is not finite (a NaN error, an infinite tolerance): NaN then.
double number_or_nan(const nlohmann::json& j, const char* name, const std::string& where) {
  if (field(j, name, where).is_null()) return std::numeric_limits<double>::quiet_NaN();
  return number(j, name, where);
}

}  // namespace

nlohmann::json peers_job(const std::vector<PeerProblem>& problems, const std::vector<std::string>& peers,
                         const core::MeasureSettings& m, std::uint64_t seed, const std::vector<PeerItem>& skip) {
  nlohmann::json j;
  j["version"] = 1;
  j["peers"] = peers;
  j["measure"] = {{"mode", m.cold ? "cold" : "hot"}, {"warmup", m.warmup},           {"warmup_s", m.warmup_s},
                  {"min_samples", m.min_samples},    {"max_samples", m.max_samples}, {"noise_target", m.noise_target},
                  {"min_time_s", m.min_time_s},      {"max_time_s", m.max_time_s}};
  j["seed"] = seed;
  if (!skip.empty()) {
    j["skip"] = nlohmann::json::array();
    for (const auto& s : skip) j["skip"].push_back({{"index", s.index}, {"peer", s.peer}, {"pass", s.pass}});
  }
  j["problems"] = nlohmann::json::array();
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const auto& p = problems[i].problem;
    j["problems"].push_back({{"index", i},
                             {"key", p.key()},
                             {"dims", p.dims},
                             {"dtype", std::string(core::to_string(p.dtype))},
                             {"passes", problems[i].passes}});
  }
  return j;
}

double attention_tflops(core::Problem problem, const std::string& pass, double ms) {
  kernels::attn::complete_problem(problem);
  const double flops = kernels::attn::fwd_flops(kernels::attn::Shape(problem)) * (pass == "bwd" ? 2.5 : 1.0);
  return ms > 0 ? flops / (ms * 1e9) : 0;
}

PeerResults parse_peer_results(const nlohmann::json& result, const std::vector<PeerProblem>& problems,
                               const std::string& source) {
  PeerResults out;
  if (!result.is_object()) throw core::UserError(source + ": not a JSON object");
  if (const auto v = field(result, "version", source); !v.is_number_integer() || v.get<int>() != 1)
    throw core::UserError(source + ": version " + v.dump() + " (this flashtune reads version 1)");
  // Before it reaches the GPU the child writes {"version": 1, "results": []}: nothing measured, no GPU named.
  if (!result.contains("gpu") && result.contains("results") && result.at("results").is_array() &&
      result.at("results").empty())
    return out;
  const auto& gpu = field(result, "gpu", source);
  out.gpu_name = text_field(gpu, "name", source + ": gpu");
  if (gpu.contains("uuid") && gpu.at("uuid").is_string()) out.gpu_uuid = gpu.at("uuid").get<std::string>();
  if (result.contains("libraries") && result.at("libraries").is_object()) {
    for (const auto& [name, version] : result.at("libraries").items()) {
      if (version.is_null()) continue;
      const std::string v = version.is_string() ? version.get<std::string>() : version.dump();
      out.libraries += (out.libraries.empty() ? "" : ", ") + name + " " + v;
      if (name == "cuda") out.cuda_version = v;
    }
  }
  if (const auto it = result.find("in_flight"); it != result.end() && it->is_object()) {
    const std::string w = source + ": in_flight";
    const auto& idx = field(*it, "index", w);
    if (!idx.is_number_integer()) throw core::UserError(w + ": 'index' is not an integer");
    out.in_flight = PeerItem{idx.get<std::int64_t>(), text_field(*it, "peer", w), text_field(*it, "pass", w)};
  }
  const auto& entries = field(result, "results", source);
  if (!entries.is_array()) throw core::UserError(source + ": 'results' is not an array");
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const auto& r = entries[e];
    const std::string where = source + ": results[" + std::to_string(e) + "]";
    const auto& idx = field(r, "index", where);
    if (!idx.is_number_integer() || idx.get<std::int64_t>() < 0 || idx.get<std::size_t>() >= problems.size())
      throw core::UserError(where + ": index " + idx.dump() + " names no problem of the job (" +
                            std::to_string(problems.size()) + " problems)");
    db::PeerRecord rec;
    rec.problem = problems[idx.get<std::size_t>()].problem;
    rec.peer = text_field(r, "peer", where);
    rec.pass = text_field(r, "pass", where);
    rec.status = text_field(r, "status", where);
    if (rec.pass != "fwd" && rec.pass != "bwd") throw core::UserError(where + ": pass '" + rec.pass + "' (fwd or bwd)");
    if (rec.status != "ok" && rec.status != "unsupported" && rec.status != "wrong_result" && rec.status != "error")
      throw core::UserError(where + ": status '" + rec.status + "' (ok, unsupported, wrong_result or error)");
    if (r.contains("library") && r.at("library").is_string()) rec.library = r.at("library").get<std::string>();
    if (r.contains("reason") && r.at("reason").is_string()) rec.reason = r.at("reason").get<std::string>();
    if (r.contains("seed") && r.at("seed").is_number_integer()) rec.seed = r.at("seed").get<std::uint64_t>();
    if (r.contains("device_bytes") && r.at("device_bytes").is_number_integer())
      rec.device_bytes = r.at("device_bytes").get<std::int64_t>();
    if (const auto it = r.find("timing"); it != r.end() && !it->is_null()) {
      const std::string w = where + ": timing";
      core::Timing t;
      const auto& samples = field(*it, "samples_ms", w);
      if (!samples.is_array() || samples.empty()) throw core::UserError(w + ": 'samples_ms' is not a non-empty array");
      for (const auto& s : samples) {
        if (!s.is_number()) throw core::UserError(w + ": a sample is not a number");
        t.samples_ms.push_back(s.get<double>());
      }
      t.median_ms = number(*it, "median_ms", w);
      t.iqr_ms = number(*it, "iqr_ms", w);
      t.min_ms = number(*it, "min_ms", w);
      t.max_ms = number(*it, "max_ms", w);
      t.mean_ms = number(*it, "mean_ms", w);
      t.rel_stdev = number_or_nan(*it, "rel_stdev", w);
      t.converged = it->value("converged", false);
      t.cold = it->value("cold", true);
      // The SM clock while the samples ran and the power cap's share of its polls (optional: NVML may be missing).
      for (const auto& [key, out] : {std::pair{"sm_clock_mhz", &t.sm_clock_mhz}, std::pair{"power_capped", &t.power_capped}})
        if (const auto c = it->find(key); c != it->end() && c->is_number()) *out = c->get<double>();
      if (!(t.median_ms > 0)) throw core::UserError(w + ": median_ms " + std::to_string(t.median_ms) + " is not positive");
      rec.tflops = attention_tflops(rec.problem, rec.pass, t.median_ms);
      rec.timing = std::move(t);
    }
    if (const auto it = r.find("validation"); it != r.end() && !it->is_null()) {
      const std::string w = where + ": validation";
      core::Validation v;
      v.checked = true;
      v.max_abs_err = number_or_nan(*it, "max_abs_err", w);
      v.max_rel_err = it->contains("max_rel_err") ? number_or_nan(*it, "max_rel_err", w) : 0;
      v.naive_err = number_or_nan(*it, "naive_err", w);
      v.tolerance = number_or_nan(*it, "tolerance", w);
      v.nan_count = static_cast<std::int64_t>(number(*it, "nan_count", w));
      v.passed = v.nan_count == 0 && v.max_abs_err <= v.tolerance;  // false where either is NaN (null)
      if (it->contains("output") && it->at("output").is_string()) rec.checked_output = it->at("output").get<std::string>();
      rec.validation = v;
    }
    if (rec.status == "ok" && (!rec.timing || !rec.validation || !rec.validation->passed))
      throw core::UserError(where + ": status ok needs a timing and a validation that passes the rule");
    out.items.push_back({idx.get<std::int64_t>(), rec.peer, rec.pass});
    out.records.push_back(std::move(rec));
  }
  return out;
}

}  // namespace flashtune::cli
