// tuner/warm_start.cpp: problem distance, the warm order, and the strategy wrapper that proposes it first.
#include "tuner/warm_start.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "tuner/learners.hpp"

namespace flashtune::tuner {
namespace {

bool measured(const core::TrialResult& r) {
  return r.status == core::TrialStatus::ok && r.timing && r.timing->median_ms > 0;
}

bool failed(const core::TrialResult& r) {
  return r.status != core::TrialStatus::ok && r.status != core::TrialStatus::compiled &&
         r.status != core::TrialStatus::invalid_config;
}

// The seeds first (each once), then the inner strategy's proposals; a proposal already measured is answered
// from what was observed and the inner strategy is asked again. The budget counts every proposal made here.
class WarmStarted : public Strategy {
 public:
  WarmStarted(std::vector<core::Config> seeds, std::unique_ptr<Strategy> inner, std::int64_t budget)
      : m_seeds(std::move(seeds)), m_inner(std::move(inner)), m_budget(budget) {}

  std::optional<core::Config> propose() override {
    if (m_budget > 0 && m_proposed >= m_budget) return std::nullopt;
    while (m_next_seed < m_seeds.size()) {
      const core::Config& c = m_seeds[m_next_seed++];
      if (m_asked.insert(c.key()).second) return ++m_proposed, c;
    }
    // A learner never proposes what it observed; the guard only bounds a strategy that would.
    for (int guard = 0; guard < 100000; ++guard) {
      auto c = m_inner->propose();
      if (!c) return std::nullopt;
      const std::string key = c->key();
      if (m_asked.insert(key).second) return ++m_proposed, c;
      if (const auto it = m_observed.find(key); it != m_observed.end()) m_inner->observe(*c, it->second);
    }
    return std::nullopt;
  }

  void observe(const core::Config& c, const core::TrialResult& r) override {
    m_observed.emplace(c.key(), r);
    m_asked.insert(c.key());
    m_inner->observe(c, r);  // seeds included: the learner starts from them
  }

 private:
  std::vector<core::Config> m_seeds;
  std::unique_ptr<Strategy> m_inner;
  std::int64_t m_budget;
  std::int64_t m_proposed = 0;
  std::size_t m_next_seed = 0;
  std::set<std::string> m_asked;
  std::unordered_map<std::string, core::TrialResult> m_observed;
};

}  // namespace

double problem_distance(const std::map<std::string, std::int64_t>& a, const std::string& dtype_a,
                        const std::map<std::string, std::int64_t>& b, const std::string& dtype_b) {
  double d = dtype_a == dtype_b ? 0.0 : 4.0;
  std::set<std::string> names;
  for (const auto& [k, v] : a) names.insert(k);
  for (const auto& [k, v] : b) names.insert(k);
  for (const auto& k : names) {
    const auto ia = a.find(k), ib = b.find(k);
    if (ia == a.end() || ib == b.end()) {
      d += 1.0;
      continue;
    }
    const std::int64_t x = ia->second, y = ib->second;
    if (x == y) continue;
    d += x > 0 && y > 0 ? std::abs(std::log2(double(x) / double(y))) : 1.0;  // against 0: a switch
  }
  return d;
}

WarmStart warm_start(const std::vector<core::Config>& candidates, const std::map<std::string, std::int64_t>& dims,
                     const std::string& dtype, const std::vector<HistorySurface>& history,
                     const WarmStartOptions& options) {
  WarmStart w;
  if (candidates.empty()) return w;  // nothing to order (every config refused): a cold start, not informed
  struct Used {
    const HistorySurface* surface;
    double optimum;
  };
  std::vector<Used> used;
  for (const auto& h : history) {
    const double dist = problem_distance(dims, dtype, h.dims, h.dtype);
    if (dist == 0) continue;  // the target itself: not history
    double optimum = 0;
    std::string best;
    for (const auto& [key, r] : h.results)
      if (measured(r) && (optimum == 0 || r.timing->median_ms < optimum)) optimum = r.timing->median_ms, best = key;
    if (optimum == 0) continue;
    w.sources.push_back({h.name, dist, std::exp(-options.sharpness * dist), best});
    used.push_back({&h, optimum});
  }
  // Nearest first, for the record (the weights already say it to the score).
  std::vector<std::size_t> by_distance(w.sources.size());
  for (std::size_t i = 0; i < by_distance.size(); ++i) by_distance[i] = i;
  std::stable_sort(by_distance.begin(), by_distance.end(),
                   [&](std::size_t x, std::size_t y) { return w.sources[x].distance < w.sources[y].distance; });

  // Score: weighted mean of log(time / optimum); candidates no surface knows get +inf and keep their order.
  const double failure = std::log(options.failure_ratio);
  std::vector<std::pair<double, std::size_t>> scored;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::string key = candidates[i].key();
    double sum = 0, weights = 0;
    for (std::size_t s = 0; s < used.size(); ++s) {
      const auto it = used[s].surface->results.find(key);
      if (it == used[s].surface->results.end()) continue;
      const double wt = w.sources[s].weight;
      if (measured(it->second)) sum += wt * std::log(it->second.timing->median_ms / used[s].optimum), weights += wt;
      else if (failed(it->second)) sum += wt * failure, weights += wt;
    }
    scored.push_back({weights > 0 ? sum / weights : std::numeric_limits<double>::infinity(), i});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& [score, i] : scored) w.order.push_back(candidates[i]);
  std::vector<WarmStartSource> sorted;
  for (std::size_t i : by_distance) sorted.push_back(w.sources[i]);
  w.sources = std::move(sorted);
  return w;
}

WarmStart model_start(const std::vector<core::Config>& candidates, const std::vector<std::optional<double>>& costs,
                      const std::string& model) {
  WarmStart w;
  w.order = candidates;
  if (costs.size() != candidates.size() || std::none_of(costs.begin(), costs.end(), [](const auto& c) { return c.has_value(); }))
    return w;
  std::vector<std::size_t> index(candidates.size());
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = i;
  const double none = std::numeric_limits<double>::infinity();
  std::stable_sort(index.begin(), index.end(),
                   [&](std::size_t a, std::size_t b) { return costs[a].value_or(none) < costs[b].value_or(none); });
  for (std::size_t i = 0; i < index.size(); ++i) w.order[i] = candidates[index[i]];
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (costs[i]) w.model_costs[candidates[i].key()] = *costs[i];
  w.model = model;
  return w;
}

std::unique_ptr<Strategy> make_warm_strategy(const core::StrategySettings& settings, std::vector<core::Config> candidates,
                                             const WarmStart& warm, int seeds) {
  if (!warm.informed()) return make_strategy(settings, std::move(candidates));
  if (settings.name == "exhaustive") return make_strategy(settings, warm.order);
  core::StrategySettings inner = settings;
  inner.budget_trials = 0;  // the wrapper counts
  auto strategy = make_strategy(inner, std::move(candidates));
  if (!warm.model_costs.empty())
    if (auto* learner = dynamic_cast<GridStrategy*>(strategy.get())) learner->set_prior(warm.model_costs);
  std::vector<core::Config> first(warm.order.begin(),
                                  warm.order.begin() + std::min<std::ptrdiff_t>(seeds, std::ptrdiff_t(warm.order.size())));
  return std::make_unique<WarmStarted>(std::move(first), std::move(strategy), settings.budget_trials);
}

}  // namespace flashtune::tuner
