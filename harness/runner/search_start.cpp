// harness/runner/search_start.cpp: warm and model starts of a problem's search (search_start.hpp).
#include "harness/runner/search_start.hpp"

#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "harness/kernels/cost_model.hpp"

namespace flashtune::runner {
namespace {

// Records a start in warm_starts: its sources and the first configs it proposes (up to tuner::kWarmSeeds).
void record(const StartEnv& env, const kernels::KernelFamily& family, const core::Problem& problem,
            const nlohmann::json& sources, const tuner::WarmStart& w) {
  nlohmann::json first = nlohmann::json::array();
  for (std::size_t i = 0; i < w.order.size() && i < std::size_t(tuner::kWarmSeeds); ++i) first.push_back(w.order[i].key());
  env.store.record_warm_start(env.run_id, family.name(), family.stage(), problem.key(), sources.dump(), first.dump());
}

}  // namespace

tuner::WarmStart warm_start(const StartEnv& env, const kernels::KernelFamily& family, const core::Problem& problem,
                            const std::vector<core::Config>& configs) {
  using db::sql_quote;
  const auto rows = env.store.sql(
      "SELECT p.key, p.json, c.key, t.status, t.median_ms, coalesce(t.stopped_early, 0) FROM trials t "
      "JOIN problems p ON p.id = t.problem_id JOIN configs c ON c.id = t.config_id WHERE t.family = " +
      sql_quote(family.name()) + " AND t.stage = " + sql_quote(family.stage()) + " AND t.device_key = " +
      sql_quote(env.device_key) + " AND p.key <> " + sql_quote(problem.key()) + " AND t.status <> 'compiled' ORDER BY t.id");
  std::map<std::string, tuner::HistorySurface> by_problem;
  for (const auto& r : rows.rows) {
    auto& h = by_problem[r[0]];
    if (h.name.empty()) {
      h.name = r[0];
      try {
        const core::Problem p = db::problem_from_json(r[1]);
        h.dims = p.dims, h.dtype = std::string(core::to_string(p.dtype));
      } catch (const core::Error&) {  // unreadable: kept without dims, so it is far from every problem
      }
    }
    core::TrialResult t;
    t.status = core::parse_trial_status(r[3]).value_or(core::TrialStatus::launch_failed);
    if (!r[4].empty()) t.timing = core::Timing{}, t.timing->median_ms = std::stod(r[4]), t.timing->stopped_early = r[5] == "1";
    h.results[r[2]] = t;
  }
  std::vector<tuner::HistorySurface> history;
  for (auto& [key, h] : by_problem) history.push_back(std::move(h));
  auto w = tuner::warm_start(configs, problem.dims, std::string(core::to_string(problem.dtype)), history);
  if (!w.informed() || w.order.empty()) return w;
  const auto& near = w.sources.front();
  env.printer.progress("   warm start from " + std::to_string(w.sources.size()) + " measured problem(s); nearest " +
                       near.name + " (distance " + fixed(near.distance, 2) + ", its best " + near.best + "); first: " + w.order.front().key());
  nlohmann::json sources = nlohmann::json::array();
  for (std::size_t i = 0; i < w.sources.size() && i < 10; ++i)
    sources.push_back({{"problem", w.sources[i].name}, {"distance", w.sources[i].distance},
                       {"weight", w.sources[i].weight}, {"best", w.sources[i].best}});
  record(env, family, problem, sources, w);
  return w;
}

tuner::WarmStart model_start(const StartEnv& env, const kernels::KernelFamily& family, const core::Problem& problem,
                             const std::vector<core::Config>& configs) {
  std::vector<std::optional<double>> costs;
  for (const auto& c : configs) costs.push_back(kernels::estimate_cost(family.name(), c, problem, env.limits));
  auto w = tuner::model_start(configs, costs, kernels::kCostModelName);
  if (!w.informed()) return w;
  env.printer.progress("   cold start from the " + w.model + " (no history); first: " + w.order.front().key());
  const nlohmann::json sources = nlohmann::json::array({{{"model", w.model}}});
  record(env, family, problem, sources, w);
  return w;
}

}  // namespace flashtune::runner
