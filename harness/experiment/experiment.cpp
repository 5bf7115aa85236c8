// harness/experiment/experiment.cpp: YAML -> Experiment, with every check done before any work and
// every error located in the file (yaml-cpp marks are 0-based; messages print them 1-based).
#include "harness/experiment/experiment.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "tuner/strategy.hpp"

namespace flashtune::experiment {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Everything a check needs to report where it failed.
class Ctx {
 public:
  explicit Ctx(std::string file) : m_file(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Mark& m, const std::string& key, const std::string& msg) const {
    std::string where = m_file;
    if (!m.is_null()) where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    throw core::UserError(where + ": " + (key.empty() ? "" : "key '" + key + "': ") + msg);
  }
  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& msg) const {
    fail(at.Mark(), key, msg);
  }

 private:
  std::string m_file;
};

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    default: return "an undefined value";
  }
}

// "must be >= 0, got -3" for a range check on a scalar value.
std::string got_msg(const std::string& rule, const YAML::Node& n) { return rule + ", got " + n.Scalar(); }

struct Entry {
  std::string key, path;
  YAML::Node key_node, value;
};

// A YAML map whose keys are checked against an allowed list, with no key given twice.
class MapReader {
 public:
  MapReader(const Ctx& ctx, const YAML::Node& node, const std::string& path, std::vector<std::string> allowed)
      : m_ctx(ctx), m_node(node), m_path(path) {
    if (!node.IsMap()) ctx.fail(node, path, "expected a map with keys (" + join(allowed) + "), got " + describe(node));
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node k = it->first;
      if (!k.IsScalar()) ctx.fail(k, path, "map keys must be plain names, got " + describe(k));
      const std::string key = k.Scalar(), sub = path.empty() ? key : path + "." + key;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        ctx.fail(k, sub, "unknown key (allowed: " + join(allowed) + ")");
      if (!seen.insert(key).second) ctx.fail(k, sub, "given twice");
      m_entries.push_back({key, sub, k, it->second});
    }
  }

  const Entry* get(const std::string& key) const {
    for (const auto& e : m_entries)
      if (e.key == key) return &e;
    return nullptr;
  }
  const Entry& require(const std::string& key) const {
    if (const Entry* e = get(key)) return *e;
    m_ctx.fail(m_node, m_path.empty() ? key : m_path + "." + key, "required key is missing");
  }
  const std::vector<Entry>& entries() const { return m_entries; }
  const YAML::Node& node() const { return m_node; }

 private:
  const Ctx& m_ctx;
  YAML::Node m_node;
  std::string m_path;
  std::vector<Entry> m_entries;
};

// ---- scalars -----------------------------------------------------------------------------------
const std::string& scalar(const Ctx& ctx, const YAML::Node& n, const std::string& path, const char* what) {
  if (!n.IsScalar()) ctx.fail(n, path, std::string("expected ") + what + ", got " + describe(n));
  return n.Scalar();
}

std::string to_string_value(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  return scalar(ctx, n, path, "a string");
}

std::int64_t to_int(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::string& s = scalar(ctx, n, path, "an integer");
  std::int64_t v = 0;
  const char* b = s.data() + (s.size() > 1 && s[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) ctx.fail(n, path, "integer '" + s + "' is out of range");
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    ctx.fail(n, path, "expected an integer, got " + describe(n));
  return v;
}

std::uint64_t to_uint(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::string& s = scalar(ctx, n, path, "a non-negative integer");
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    ctx.fail(n, path, "expected a non-negative integer, got " + describe(n));
  return v;
}

int to_int32(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::int64_t v = to_int(ctx, n, path);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    ctx.fail(n, path, "integer " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

double to_double(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::string& s = scalar(ctx, n, path, "a number");
  char* end = nullptr;
  const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    ctx.fail(n, path, "expected a number, got " + describe(n));
  return v;
}

std::optional<bool> parse_bool(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  return std::nullopt;
}

bool to_bool(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  auto b = parse_bool(scalar(ctx, n, path, "true or false"));
  if (!b) ctx.fail(n, path, "expected true or false, got " + describe(n));
  return *b;
}

// A scalar or a non-empty list of scalars, as (node, path) pairs for the caller to convert.
std::vector<std::pair<YAML::Node, std::string>> one_or_list(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  std::vector<std::pair<YAML::Node, std::string>> out;
  if (n.IsSequence()) {
    if (n.size() == 0) ctx.fail(n, path, "empty list of values");
    for (std::size_t i = 0; i < n.size(); ++i) out.emplace_back(n[i], path + "[" + std::to_string(i) + "]");
  } else if (n.IsScalar()) {
    out.emplace_back(n, path);
  } else {
    ctx.fail(n, path, "expected a value or a list of values, got " + describe(n));
  }
  return out;
}

// ---- sections ----------------------------------------------------------------------------------
// Reads a measure map over `base` (the defaults, or the experiment's settings for a study override).
core::MeasureSettings read_measure(const Ctx& ctx, const YAML::Node& node, const std::string& path,
                                   core::MeasureSettings m) {
  MapReader r(ctx, node, path,
              {"mode", "warmup", "warmup_s", "min_samples", "max_samples", "noise_target", "min_time_s", "max_time_s",
               "watchdog_s"});
  if (const Entry* e = r.get("mode")) {
    const std::string mode = to_string_value(ctx, e->value, e->path);
    if (mode != "cold" && mode != "hot") ctx.fail(e->value, e->path, "expected cold or hot, got '" + mode + "'");
    m.cold = mode == "cold";
  }
  if (const Entry* e = r.get("warmup")) {
    m.warmup = to_int32(ctx, e->value, e->path);
    if (m.warmup < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0", e->value));
  }
  if (const Entry* e = r.get("warmup_s")) {
    m.warmup_s = to_double(ctx, e->value, e->path);
    if (m.warmup_s < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0 [s]", e->value));
  }
  if (const Entry* e = r.get("min_samples")) {
    m.min_samples = to_int32(ctx, e->value, e->path);
    if (m.min_samples < 1) ctx.fail(e->value, e->path, got_msg("must be >= 1", e->value));
  }
  if (const Entry* e = r.get("max_samples")) {
    m.max_samples = to_int32(ctx, e->value, e->path);
    if (m.max_samples < 1) ctx.fail(e->value, e->path, got_msg("must be >= 1", e->value));
  }
  if (const Entry* e = r.get("noise_target")) {
    m.noise_target = to_double(ctx, e->value, e->path);
    if (m.noise_target <= 0) ctx.fail(e->value, e->path, got_msg("must be > 0", e->value));
  }
  if (const Entry* e = r.get("min_time_s")) {
    m.min_time_s = to_double(ctx, e->value, e->path);
    if (m.min_time_s < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0 [s]", e->value));
  }
  if (const Entry* e = r.get("max_time_s")) {
    m.max_time_s = to_double(ctx, e->value, e->path);
    if (m.max_time_s <= 0) ctx.fail(e->value, e->path, got_msg("must be > 0 [s]", e->value));
  }
  if (const Entry* e = r.get("watchdog_s")) {
    m.watchdog_s = to_double(ctx, e->value, e->path);
    if (m.watchdog_s < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0 [s] (0: no watchdog)", e->value));
  }
  auto blame = [&](const char* a, const char* b) -> const Entry& {  // the key that made the pair wrong
    if (const Entry* e = r.get(a)) return *e;
    return r.require(b);
  };
  if (m.min_samples > m.max_samples) {
    const Entry& e = blame("max_samples", "min_samples");
    ctx.fail(e.key_node, e.path, "min_samples (" + std::to_string(m.min_samples) + ") > max_samples (" +
                                     std::to_string(m.max_samples) + ")");
  }
  if (m.min_time_s > m.max_time_s) {
    const Entry& e = blame("max_time_s", "min_time_s");
    std::ostringstream os;
    os << "min_time_s (" << m.min_time_s << ") > max_time_s (" << m.max_time_s << ")";
    ctx.fail(e.key_node, e.path, os.str());
  }
  return m;
}

Limits read_limits(const Ctx& ctx, const YAML::Node& node, const std::string& path) {
  Limits l;
  MapReader r(ctx, node, path, {"max_problems", "max_configs"});
  if (const Entry* e = r.get("max_problems")) {
    l.max_problems = to_int(ctx, e->value, e->path);
    if (l.max_problems < 1) ctx.fail(e->value, e->path, got_msg("must be >= 1", e->value));
  }
  if (const Entry* e = r.get("max_configs")) {
    l.max_configs = to_int(ctx, e->value, e->path);
    if (l.max_configs < 1) ctx.fail(e->value, e->path, got_msg("must be >= 1", e->value));
  }
  return l;
}

core::ValidateSettings read_validate(const Ctx& ctx, const YAML::Node& node, const std::string& path) {
  core::ValidateSettings v;
  MapReader r(ctx, node, path, {"enabled", "seed", "atol"});
  if (const Entry* e = r.get("enabled")) v.enabled = to_bool(ctx, e->value, e->path);
  if (const Entry* e = r.get("seed")) v.seed = to_uint(ctx, e->value, e->path);
  if (const Entry* e = r.get("atol")) {
    v.atol = to_double(ctx, e->value, e->path);
    if (v.atol < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0 (leave it out for the family's default)", e->value));
  }
  return v;
}

core::StrategySettings read_strategy(const Ctx& ctx, const YAML::Node& node, const std::string& path) {
  core::StrategySettings s;
  std::vector<std::string> allowed{"name",       "budget_trials", "budget_seconds",  "seed",
                                   "early_exit", "finalists",     "finalist_rounds", "tie_band"};
  // The strategy's own settings join the allowed keys, so its name is read first.
  const auto known = tuner::strategy_names();
  if (node.IsMap())
    for (auto it = node.begin(); it != node.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == "name") {
        s.name = to_string_value(ctx, it->second, path + ".name");
        if (std::find(known.begin(), known.end(), s.name) == known.end())
          ctx.fail(it->second, path + ".name", "unknown strategy '" + s.name + "' (known: " + join(known) + ")");
      }
  const auto own = tuner::strategy_options(s.name);
  for (const auto& o : own) allowed.push_back(o.name);
  if (node.IsMap())
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar() || std::find(allowed.begin(), allowed.end(), it->first.Scalar()) != allowed.end()) continue;
      for (const auto& other : known)
        for (const auto& o : tuner::strategy_options(other))
          if (o.name == it->first.Scalar())
            ctx.fail(it->first, path + "." + o.name, "a setting of strategy " + other + ", not of " + s.name +
                                                          " (allowed: " + join(allowed) + ")");
    }
  MapReader r(ctx, node, path, allowed);
  if (const Entry* e = r.get("budget_trials")) {
    s.budget_trials = to_int(ctx, e->value, e->path);
    if (s.budget_trials < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0 (0: no limit)", e->value));
  }
  if (const Entry* e = r.get("budget_seconds")) {
    s.budget_seconds = to_double(ctx, e->value, e->path);
    if (s.budget_seconds < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0 [s] (0: no limit)", e->value));
  }
  if (const Entry* e = r.get("seed")) s.seed = to_uint(ctx, e->value, e->path);
  if (const Entry* e = r.get("early_exit")) {
    s.early_exit = to_double(ctx, e->value, e->path);
    if (s.early_exit != 0 && !(s.early_exit > 1))
      ctx.fail(e->value, e->path, got_msg("must be > 1 (a multiple of the best median so far) or 0 (off)", e->value));
  }
  if (const Entry* e = r.get("finalists")) {
    s.finalists = to_int32(ctx, e->value, e->path);
    if (s.finalists < 0) ctx.fail(e->value, e->path, got_msg("must be >= 0 (0 or 1: no re-measurement)", e->value));
  }
  if (const Entry* e = r.get("finalist_rounds")) {
    s.finalist_rounds = to_int32(ctx, e->value, e->path);
    if (s.finalist_rounds < 1) ctx.fail(e->value, e->path, got_msg("must be >= 1", e->value));
  }
  if (const Entry* e = r.get("tie_band")) {
    s.tie_band = to_double(ctx, e->value, e->path);
    if (s.tie_band < 0 || s.tie_band >= 1) ctx.fail(e->value, e->path, got_msg("must be in [0, 1) (0.01 = 1 %)", e->value));
  }
  for (const auto& o : own)
    if (const Entry* e = r.get(o.name)) {
      const double v = to_double(ctx, e->value, e->path);
      if (auto why = tuner::check_strategy_option(s.name, o.name, v)) ctx.fail(e->value, e->path, *why);
      s.options[o.name] = v;
    }
  return s;
}

std::string dtype_names(const std::vector<core::DType>& ds) {
  std::vector<std::string> names;
  for (auto d : ds) names.emplace_back(core::to_string(d));
  return join(names);
}

// One entry of `problems`: a map whose list values expand as a cartesian product (last key fastest).
// problems_so_far: problems of the file before this entry (Limits::max_problems counts them all).
void read_problem_entry(const Ctx& ctx, const YAML::Node& node, const std::string& path,
                        const kernels::KernelFamily& fam, const Limits& limits, std::int64_t problems_so_far,
                        std::vector<core::Problem>& out) {
  const auto dims = fam.problem_dims();
  const auto dtypes = fam.dtypes();
  const auto optional = fam.optional_problem_dims();
  std::vector<std::string> allowed = dims;
  for (const auto& o : optional) allowed.push_back(o.name);
  allowed.push_back("dtype");
  MapReader r(ctx, node, path, allowed);
  for (const auto& d : dims) r.require(d);

  struct Axis {
    std::string key;
    std::vector<std::int64_t> values;  // dims: the value; dtype: the DType cast to int
  };
  std::vector<Axis> axes;
  bool has_dtype = false;
  for (const Entry& e : r.entries()) {
    Axis a{e.key, {}};
    std::set<std::int64_t> seen;
    for (const auto& [vn, vpath] : one_or_list(ctx, e.value, e.path)) {
      std::int64_t v;
      if (e.key == "dtype") {
        has_dtype = true;
        const std::string s = to_string_value(ctx, vn, vpath);
        const auto d = core::parse_dtype(s);
        if (!d) ctx.fail(vn, vpath, "unknown dtype '" + s + "' (known: f32, f16, bf16)");
        if (std::find(dtypes.begin(), dtypes.end(), *d) == dtypes.end())
          ctx.fail(vn, vpath, "family '" + fam.name() + "' does not support dtype " + std::string(core::to_string(*d)) +
                                  " (supported: " + dtype_names(dtypes) + ")");
        v = static_cast<std::int64_t>(*d);
      } else {
        const auto b = vn.IsScalar() ? parse_bool(vn.Scalar()) : std::nullopt;
        v = b ? std::int64_t(*b) : to_int(ctx, vn, vpath);
        // Required dims are sizes. An optional dim's range is the family's (check_problem, e.g. attention's
        // sink_bias may be negative), except that a negative default stands for "derived from other dims"
        // (heads_kv, seq_k), so a negative value there would silently become the default.
        const bool required = std::find(dims.begin(), dims.end(), e.key) != dims.end();
        const auto opt = std::find_if(optional.begin(), optional.end(), [&](const auto& o) { return o.name == e.key; });
        if (required && v < 1) ctx.fail(vn, vpath, "must be >= 1 (a size), got " + std::to_string(v));
        if (!required && opt != optional.end() && opt->fallback < 0 && v < 0)
          ctx.fail(vn, vpath, "must be >= 0, got " + std::to_string(v) + " (leave it out for the default)");
      }
      if (!seen.insert(v).second) ctx.fail(vn, vpath, "value listed twice");
      a.values.push_back(v);
    }
    axes.push_back(std::move(a));
  }
  if (!has_dtype) {
    if (dtypes.empty()) ctx.fail(node, path, "family '" + fam.name() + "' lists no dtypes");
    axes.push_back({"dtype", {static_cast<std::int64_t>(dtypes.front())}});
  }

  // The product is counted before it is expanded: aliases can make a few lines name 1e10 problems.
  std::int64_t count = 1;
  for (const auto& a : axes)
    if (__builtin_mul_overflow(count, std::int64_t(a.values.size()), &count)) count = std::numeric_limits<std::int64_t>::max();
  std::int64_t total = 0;
  if (__builtin_add_overflow(count, problems_so_far, &total)) total = std::numeric_limits<std::int64_t>::max();
  if (total > limits.max_problems) {
    const std::string n = count == std::numeric_limits<std::int64_t>::max() ? "more than 2^63" : std::to_string(count);
    ctx.fail(node, path, "expands to " + n + " problems" +
                             (problems_so_far ? " (" + std::to_string(problems_so_far) + " before it in the file)" : "") +
                             ", more than limits.max_problems = " + std::to_string(limits.max_problems) +
                             "; list fewer values, or raise limits.max_problems");
  }

  tuner::SearchSpace product;
  for (const auto& a : axes) product.dims.emplace_back(a.key, a.values);
  std::set<std::string> have;
  for (const auto& p : out) have.insert(p.key());
  for (const core::Config& c : tuner::enumerate(product)) {
    core::Problem p;
    for (const auto& [k, v] : c.values) {
      if (k == "dtype") p.dtype = static_cast<core::DType>(v);
      else p.dims[k] = v;
    }
    for (const auto& o : optional) p.dims.try_emplace(o.name, o.fallback);
    fam.complete_problem(p);
    if (auto why = fam.check_problem(p)) ctx.fail(node, path, "problem " + p.key() + ": " + *why);
    if (have.insert(p.key()).second) out.push_back(std::move(p));
  }
}

tuner::SearchSpace read_space(const Ctx& ctx, const YAML::Node* node, const std::string& path,
                              const kernels::KernelFamily& fam) {
  const auto tunables = fam.tunables();
  std::vector<std::string> names;
  for (const auto& t : tunables) names.push_back(t.name);
  tuner::SearchSpace space;
  std::optional<MapReader> r;
  if (node) r.emplace(ctx, *node, path, names);
  for (const auto& t : tunables) {
    std::vector<std::int64_t> values = t.values;
    if (const Entry* e = r ? r->get(t.name) : nullptr) {
      values.clear();
      for (const auto& [vn, vpath] : one_or_list(ctx, e->value, e->path)) {
        const std::int64_t v = to_int(ctx, vn, vpath);
        if (v <= 0) ctx.fail(vn, vpath, "tunable values must be > 0, got " + std::to_string(v));
        if (std::find(values.begin(), values.end(), v) != values.end()) ctx.fail(vn, vpath, "value listed twice");
        values.push_back(v);
      }
    }
    space.dims.emplace_back(t.name, std::move(values));
  }
  return space;
}

Study read_study(const Ctx& ctx, const YAML::Node& node, const std::string& path, const FamilyCatalog& catalog,
                 const core::MeasureSettings& base_measure, const Limits& limits, std::int64_t problems_so_far) {
  MapReader r(ctx, node, path, {"family", "stage", "problems", "space", "constraints", "strategy", "measure"});
  Study st;
  st.line = node.Mark().line + 1;

  const Entry& fe = r.require("family");
  st.family = to_string_value(ctx, fe.value, fe.path);
  st.kernel = catalog.find(st.family);
  if (!st.kernel) ctx.fail(fe.value, fe.path, "unknown kernel family '" + st.family + "' (known: " + join(catalog.names()) + ")");
  const kernels::KernelFamily& fam = *st.kernel;
  st.stage = fam.stage();
  if (const Entry* e = r.get("stage")) {
    const std::string stage = to_string_value(ctx, e->value, e->path);
    if (stage != fam.stage())
      ctx.fail(e->value, e->path, "unknown stage '" + stage + "' for family '" + st.family + "' (its stage: " + fam.stage() + ")");
  }

  const Entry& pe = r.require("problems");
  if (!pe.value.IsSequence() || pe.value.size() == 0)
    ctx.fail(pe.value, pe.path, "expected a non-empty list of problem maps, got " + describe(pe.value));
  for (std::size_t i = 0; i < pe.value.size(); ++i)
    read_problem_entry(ctx, pe.value[i], pe.path + "[" + std::to_string(i) + "]", fam, limits,
                       problems_so_far + std::int64_t(st.problems.size()), st.problems);

  const Entry* se = r.get("space");
  st.space = read_space(ctx, se ? &se->value : nullptr, se ? se->path : path + ".space", fam);
  std::int64_t space_size = 0;
  try {
    space_size = st.space.size();
  } catch (const core::Error&) {
    space_size = std::numeric_limits<std::int64_t>::max();
  }
  if (space_size > limits.max_configs) {
    const Entry& at = se ? *se : fe;
    ctx.fail(at.key_node, at.path, "the space holds " + (space_size == std::numeric_limits<std::int64_t>::max() ? std::string("more than 2^63") : std::to_string(space_size)) +
                                        " configs, more than limits.max_configs = " + std::to_string(limits.max_configs) +
                                        "; list fewer values, or raise limits.max_configs");
  }

  // Constraints: the family's (a family bug if they fail, still reported here), then the study's.
  const auto vars = fam.constraint_variables();
  for (const auto& c : fam.constraints()) {
    try {
      tuner::ConstraintSet({c}, vars);
    } catch (const tuner::ConstraintError& e) {
      ctx.fail(fe.value, fe.path, "family '" + st.family + "' has a bad constraint: " + e.what());
    }
    st.constraints.push_back(c);
  }
  const Entry* ce = r.get("constraints");
  std::map<std::string, std::pair<YAML::Node, std::string>> where_of;  // the study's constraints in the file
  if (ce) {
    std::vector<std::pair<YAML::Node, std::string>> items;
    if (ce->value.IsScalar()) items.emplace_back(ce->value, ce->path);
    else if (ce->value.IsSequence())
      for (std::size_t i = 0; i < ce->value.size(); ++i) items.emplace_back(ce->value[i], ce->path + "[" + std::to_string(i) + "]");
    else ctx.fail(ce->value, ce->path, "expected a list of expressions, got " + describe(ce->value));
    for (const auto& [cn, cpath] : items) {
      const std::string expr = to_string_value(ctx, cn, cpath);
      try {
        tuner::ConstraintSet({expr}, vars);
      } catch (const tuner::ConstraintError& e) {
        ctx.fail(cn, cpath, e.what());
      }
      st.constraints.push_back(expr);
      where_of.emplace(expr, std::make_pair(cn, cpath));
    }
  }

  if (const Entry* e = r.get("strategy")) st.strategy = read_strategy(ctx, e->value, e->path);
  st.measure = base_measure;
  if (const Entry* e = r.get("measure")) st.measure = read_measure(ctx, e->value, e->path, base_measure);

  // A study in which no problem has a single config that satisfies the constraints would do nothing:
  // a mistake in the file (single infeasible problems are fine: the runner records them). Skipped for
  // very large spaces, where enumeration would be work in itself. Every (config, problem) pair is
  // evaluated up to kMaxCheckedPairs, so a constraint that divides by zero for some config is refused
  // here, at its line; past that the runner refuses it when it meets it.
  constexpr std::int64_t kMaxCheckedSpace = 1 << 16;
  constexpr double kMaxCheckedPairs = 1 << 22;
  if (st.space.size() <= kMaxCheckedSpace) {
    const tuner::ConstraintSet cs(st.constraints, vars);
    const auto all = tuner::enumerate(st.space);
    const bool every_pair = double(all.size()) * double(st.problems.size()) <= kMaxCheckedPairs;
    std::optional<std::string> example;
    bool any = false;
    try {
      for (const auto& p : st.problems) {
        for (const auto& c : all) {
          auto why = cs.violated(c, p);
          if (why && !example) example = *why;
          any = any || !why;
          if (any && !every_pair) break;
        }
        if (any && !every_pair) break;
      }
    } catch (const tuner::ConstraintEvalError& e) {
      const auto w = where_of.find(e.expression());
      if (w != where_of.end()) ctx.fail(w->second.first, w->second.second, e.what());
      ctx.fail(fe.value, fe.path, "family '" + st.family + "': " + e.what());
    }
    if (!any) {
      const Entry& at = ce ? *ce : se ? *se : fe;
      ctx.fail(at.key_node, at.path, "no config of the space (" + std::to_string(all.size()) +
                                          " configs) satisfies the constraints for any problem" +
                                          (example ? " (e.g. '" + *example + "' fails)" : ""));
    }
  }
  return st;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
const kernels::KernelFamily* FamilyCatalog::find(const std::string& name) const {
  for (const auto* f : families)
    if (f && f->name() == name) return f;
  return nullptr;
}

std::vector<std::string> FamilyCatalog::names() const {
  std::vector<std::string> out;
  for (const auto* f : families)
    if (f) out.push_back(f->name());
  return out;
}

tuner::ConstraintSet constraint_set(const Study& study) {
  if (!study.kernel) throw core::Error("study of family '" + study.family + "' has no kernel family");
  return tuner::ConstraintSet(study.constraints, study.kernel->constraint_variables());
}

std::vector<core::Config> candidates(const Study& study, const core::Problem& problem) {
  const tuner::ConstraintSet cs = constraint_set(study);
  return tuner::enumerate(study.space, [&](const core::Config& c) { return cs.allows(c, problem); });
}

Experiment parse_experiment(const std::string& yaml_text, const std::string& display_path, const FamilyCatalog& catalog) {
  const Ctx ctx(display_path);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    ctx.fail(e.mark, "", "malformed YAML: " + e.msg);
  }

  const std::vector<std::string> top_keys{"name", "description", "arch", "limits", "measure", "validate", "studies"};
  if (!root.IsMap())
    ctx.fail(root.IsNull() ? YAML::Mark() : root.Mark(), "",
             "expected a map with keys (" + join(top_keys) + "), got " + describe(root));
  MapReader r(ctx, root, "", top_keys);

  Experiment ex;
  ex.path = display_path;
  ex.text_hash = core::hash_hex(yaml_text);

  const Entry& ne = r.require("name");
  ex.name = to_string_value(ctx, ne.value, ne.path);
  const bool name_ok = !ex.name.empty() && std::all_of(ex.name.begin(), ex.name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (!name_ok) ctx.fail(ne.value, ne.path, "'" + ex.name + "' must match [a-z0-9_-]+");

  if (const Entry* e = r.get("description"))
    if (!e->value.IsNull()) ex.description = to_string_value(ctx, e->value, e->path);

  ex.arch = "sm_90a";
  if (const Entry* e = r.get("arch")) {
    ex.arch = to_string_value(ctx, e->value, e->path);
    try {
      core::DeviceLimits::for_arch(ex.arch);
    } catch (const core::UserError& err) {
      ctx.fail(e->value, e->path, err.what());
    }
  }

  if (const Entry* e = r.get("limits")) ex.limits = read_limits(ctx, e->value, e->path);
  if (const Entry* e = r.get("measure")) ex.measure = read_measure(ctx, e->value, e->path, core::MeasureSettings{});
  if (const Entry* e = r.get("validate")) ex.validate = read_validate(ctx, e->value, e->path);

  const Entry& se = r.require("studies");
  if (!se.value.IsSequence() || se.value.size() == 0)
    ctx.fail(se.value, se.path, "expected a non-empty list of studies, got " + describe(se.value));
  std::int64_t problems = 0;
  for (std::size_t i = 0; i < se.value.size(); ++i) {
    ex.studies.push_back(read_study(ctx, se.value[i], "studies[" + std::to_string(i) + "]", catalog, ex.measure,
                                    ex.limits, problems));
    problems += std::int64_t(ex.studies.back().problems.size());
  }
  return ex;
}

Experiment load_experiment(const std::filesystem::path& path, const FamilyCatalog& catalog) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::UserError(path.string() + ": cannot read experiment file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw core::UserError(path.string() + ": error while reading experiment file");
  return parse_experiment(text.str(), path.string(), catalog);
}

}  // namespace flashtune::experiment
