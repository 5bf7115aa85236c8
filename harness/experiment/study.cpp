// harness/experiment/study.cpp: one study of an experiment file: its family, its problems (list values expanded as
// a cartesian product, counted against the limits before expanding), its space and its constraints, checked
// against the family before any work.
#include "harness/experiment/sections.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace flashtune::experiment::detail {

namespace {

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

}  // namespace

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

}  // namespace flashtune::experiment::detail
