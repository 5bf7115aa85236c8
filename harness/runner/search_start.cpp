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
  std::map<std::string, tuner::HistorySurface> by_problem;
  for (const auto& r : env.store.history_trials(family.name(), family.stage(), env.device_key, problem.key())) {
    auto& h = by_problem[r.problem];
    if (h.name.empty()) {
      h.name = r.problem;
      try {
        const core::Problem p = db::problem_from_json(r.problem_json);
        h.dims = p.dims, h.dtype = std::string(core::to_string(p.dtype));
      } catch (const core::Error&) {  // unreadable: kept without dims, so it is far from every problem
      }
    }
    core::TrialResult t;
    t.status = core::parse_trial_status(r.status).value_or(core::TrialStatus::launch_failed);
    if (r.median_ms) t.timing = core::Timing{}, t.timing->median_ms = *r.median_ms, t.timing->stopped_early = r.stopped_early;
    h.results[r.config] = t;
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
