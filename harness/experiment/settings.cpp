// harness/experiment/settings.cpp: the settings sections of an experiment file (measure, limits, validate,
// strategy), each range-checked key by key.
#include "harness/experiment/sections.hpp"

#include <algorithm>
#include <sstream>

#include "tuner/strategy.hpp"

namespace flashtune::experiment::detail {

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
  read_checked(ctx, r, "warmup", m.warmup, to_int32, [](auto x) { return x >= 0; }, "must be >= 0");
  read_checked(ctx, r, "warmup_s", m.warmup_s, to_double, [](auto x) { return x >= 0; }, "must be >= 0 [s]");
  read_checked(ctx, r, "min_samples", m.min_samples, to_int32, [](auto x) { return x >= 1; }, "must be >= 1");
  read_checked(ctx, r, "max_samples", m.max_samples, to_int32, [](auto x) { return x >= 1; }, "must be >= 1");
  read_checked(ctx, r, "noise_target", m.noise_target, to_double, [](auto x) { return x > 0; }, "must be > 0");
  read_checked(ctx, r, "min_time_s", m.min_time_s, to_double, [](auto x) { return x >= 0; }, "must be >= 0 [s]");
  read_checked(ctx, r, "max_time_s", m.max_time_s, to_double, [](auto x) { return x > 0; }, "must be > 0 [s]");
  read_checked(ctx, r, "watchdog_s", m.watchdog_s, to_double,
               [](auto x) { return x >= 0; }, "must be >= 0 [s] (0: no watchdog)");
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
  read_checked(ctx, r, "max_problems", l.max_problems, to_int, [](auto x) { return x >= 1; }, "must be >= 1");
  read_checked(ctx, r, "max_configs", l.max_configs, to_int, [](auto x) { return x >= 1; }, "must be >= 1");
  return l;
}

core::ValidateSettings read_validate(const Ctx& ctx, const YAML::Node& node, const std::string& path) {
  core::ValidateSettings v;
  MapReader r(ctx, node, path, {"enabled", "seed", "atol"});
  if (const Entry* e = r.get("enabled")) v.enabled = to_bool(ctx, e->value, e->path);
  if (const Entry* e = r.get("seed")) v.seed = to_uint(ctx, e->value, e->path);
  read_checked(ctx, r, "atol", v.atol, to_double,
               [](auto x) { return x >= 0; }, "must be >= 0 (leave it out for the family's default)");
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
  read_checked(ctx, r, "budget_trials", s.budget_trials, to_int,
               [](auto x) { return x >= 0; }, "must be >= 0 (0: no limit)");
  read_checked(ctx, r, "budget_seconds", s.budget_seconds, to_double,
               [](auto x) { return x >= 0; }, "must be >= 0 [s] (0: no limit)");
  if (const Entry* e = r.get("seed")) s.seed = to_uint(ctx, e->value, e->path);
  if (const Entry* e = r.get("early_exit")) {
    s.early_exit = to_double(ctx, e->value, e->path);
    if (s.early_exit != 0 && !(s.early_exit > 1))
      ctx.fail(e->value, e->path, got_msg("must be > 1 (a multiple of the best median so far) or 0 (off)", e->value));
  }
  read_checked(ctx, r, "finalists", s.finalists, to_int32,
               [](auto x) { return x >= 0; }, "must be >= 0 (0 or 1: no re-measurement)");
  read_checked(ctx, r, "finalist_rounds", s.finalist_rounds, to_int32, [](auto x) { return x >= 1; }, "must be >= 1");
  read_checked(ctx, r, "tie_band", s.tie_band, to_double,
               [](auto x) { return x >= 0 && x < 1; }, "must be in [0, 1) (0.01 = 1 %)");
  for (const auto& o : own)
    if (const Entry* e = r.get(o.name)) {
      const double v = to_double(ctx, e->value, e->path);
      if (auto why = tuner::check_strategy_option(s.name, o.name, v)) ctx.fail(e->value, e->path, *why);
      s.options[o.name] = v;
    }
  return s;
}

}  // namespace flashtune::experiment::detail
