// runtime/configs.cpp: ConfigTable (configs.hpp).
#include "runtime/configs.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

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
  return parse(s.str(), path.string());
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
  for (const auto& e : m_entries)
    if (e.family == family && e.problem.dtype == problem.dtype)
      out.push_back({&e, distance(e.problem, problem), gpu.empty() || e.gpu == gpu});
  std::stable_sort(out.begin(), out.end(), [](const Candidate& x, const Candidate& y) {
    if (x.same_gpu != y.same_gpu) return x.same_gpu;
    return x.distance < y.distance;
  });
  return out;
}

}  // namespace flashtune::runtime
