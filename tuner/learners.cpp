// tuner/learners.cpp: GridStrategy bookkeeping, simulated annealing, the genetic algorithm and
// Bayesian optimization.
#include "tuner/learners.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flashtune::tuner {

Outcome classify(const core::TrialResult& r, double& cost_ms) {
  if (r.status == core::TrialStatus::ok || r.status == core::TrialStatus::compiled) {
    if (r.status == core::TrialStatus::ok && r.timing && std::isfinite(r.timing->median_ms) && r.timing->median_ms > 0) {
      cost_ms = r.timing->median_ms;
      return Outcome::measured;
    }
    return Outcome::unknown;
  }
  return Outcome::failed;
}

// ---- GridStrategy --------------------------------------------------------------------------------
GridStrategy::GridStrategy(std::vector<core::Config> candidates, std::int64_t budget_trials, std::uint64_t seed)
    : m_grid(candidates),
      m_rng(seed),
      m_budget(budget_trials),
      m_asked(m_grid.size(), false),
      m_outcome(m_grid.size(), Outcome::pending),
      m_cost(m_grid.size(), 0.0) {
  if (budget_trials < 0) throw core::UserError("strategy budget_trials must be >= 0, got " + std::to_string(budget_trials));
}

std::optional<core::Config> GridStrategy::propose() {
  if (m_budget > 0 && m_proposed >= m_budget) return std::nullopt;
  if (unvisited() == 0) return std::nullopt;
  const std::size_t i = choose();
  if (i >= m_grid.size() || m_asked[i])
    throw core::Error("tuner: strategy chose config " + std::to_string(i) + ", which is not an unvisited candidate");
  m_asked[i] = true;
  ++m_visits, ++m_proposed;
  return m_grid.config(i);
}

void GridStrategy::observe(const core::Config& c, const core::TrialResult& r) {
  const auto found = m_grid.find(c);
  if (!found) return;
  const std::size_t i = *found;
  if (m_outcome[i] != Outcome::pending) return;  // observed before: the first outcome stands
  if (!m_asked[i]) m_asked[i] = true, ++m_visits;
  double ms = 0;
  m_outcome[i] = classify(r, ms);
  m_observed.push_back(i);
  if (m_outcome[i] == Outcome::measured) {
    m_cost[i] = ms;
    m_measured.push_back(i);
    if (!m_best || ms < m_cost[*m_best]) m_best = i;
    m_worst = std::max(m_worst, ms);
  }
  learn(i);
}

void GridStrategy::set_prior(const std::map<std::string, double>& cost_by_key) {
  m_prior.assign(m_grid.size(), std::nan(""));
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < m_grid.size(); ++i) {
    const auto it = cost_by_key.find(m_grid.config(i).key());
    if (it == cost_by_key.end()) continue;
    if (!(it->second > 0) || !std::isfinite(it->second))
      throw core::Error("tuner: prior cost of " + it->first + " is not positive and finite");
    m_prior[i] = std::log(it->second);
    sum += m_prior[i], ++n;
  }
  if (n == 0) m_prior.clear();
  m_prior_fill = n ? sum / double(n) : 0.0;
}

std::optional<double> GridStrategy::prior_log_cost(std::size_t i) const {
  if (m_prior.empty() || std::isnan(m_prior[i])) return std::nullopt;
  return m_prior[i];
}

std::size_t GridStrategy::random_unvisited() {
  // Rejection while at least 1/8 of the space is left (a few draws), else a draw from the list.
  if (unvisited() * 8 >= m_grid.size()) {
    while (true) {
      const std::size_t i = m_rng.index(m_grid.size());
      if (!m_asked[i]) return i;
    }
  }
  std::vector<std::size_t> left;
  for (std::size_t i = 0; i < m_grid.size(); ++i)
    if (!m_asked[i]) left.push_back(i);
  return left[m_rng.index(left.size())];
}

std::size_t GridStrategy::nearest_unvisited(const std::vector<int>& point) {
  int best = std::numeric_limits<int>::max();
  std::vector<std::size_t> ties;
  for (std::size_t i = 0; i < m_grid.size(); ++i) {
    if (m_asked[i]) continue;
    const int d = m_grid.distance(i, point);
    if (d < best) best = d, ties.clear();
    if (d == best) ties.push_back(i);
  }
  return ties.size() == 1 ? ties[0] : pick_among(ties);
}

std::size_t GridStrategy::prior_or_random_unvisited() {
  if (!has_prior()) return random_unvisited();
  std::vector<std::size_t> left;
  for (std::size_t i = 0; i < m_grid.size(); ++i)
    if (!m_asked[i]) left.push_back(i);
  return pick_among(left);
}

std::size_t GridStrategy::pick_among(std::vector<std::size_t> ties) {
  if (has_prior()) {  // the prior's cheapest; a random one among equals (and among those it has no cost for)
    const double none = std::numeric_limits<double>::infinity();
    double low = none;
    for (std::size_t i : ties) low = std::min(low, prior_log_cost(i).value_or(none));
    std::erase_if(ties, [&](std::size_t i) { return prior_log_cost(i).value_or(none) != low; });
  }
  return ties[ties.size() == 1 ? 0 : m_rng.index(ties.size())];
}

// ---- SimulatedAnnealing --------------------------------------------------------------------------
SimulatedAnnealing::SimulatedAnnealing(std::vector<core::Config> candidates, std::int64_t budget_trials,
                                       std::uint64_t seed, Settings s)
    : GridStrategy(std::move(candidates), budget_trials, seed), m_settings(s), m_temperature(s.temperature) {}

std::size_t SimulatedAnnealing::choose() {
  if (!m_current) return prior_or_random_unvisited();
  return nearest_unvisited(m_grid.coords(*m_current));
}

void SimulatedAnnealing::learn(std::size_t i) {
  if (outcome(i) == Outcome::measured) {
    if (!m_current) {
      m_current = i;
    } else {
      const double delta = cost(i) / cost(*m_current) - 1;
      if (delta <= 0 || (m_temperature > 0 && m_rng.chance(std::exp(-delta / m_temperature)))) m_current = i;
    }
    m_temperature *= m_settings.cooling;
    if (best() == i) {
      m_stall = 0;
      return;
    }
  } else if (outcome(i) != Outcome::failed) {
    return;  // nothing learned
  }
  if (++m_stall >= m_settings.restart && best()) {
    m_current = best();
    m_stall = 0;
  }
}

// ---- GeneticAlgorithm ----------------------------------------------------------------------------
GeneticAlgorithm::GeneticAlgorithm(std::vector<core::Config> candidates, std::int64_t budget_trials,
                                   std::uint64_t seed, Settings s)
    : GridStrategy(std::move(candidates), budget_trials, seed), m_settings(s) {}

std::size_t GeneticAlgorithm::tournament(const std::vector<std::size_t>& population) {
  std::size_t winner = population[m_rng.index(population.size())];
  for (int k = 1; k < m_settings.tournament; ++k) {
    const std::size_t other = population[m_rng.index(population.size())];
    if (cost(other) < cost(winner)) winner = other;
  }
  return winner;
}

std::size_t GeneticAlgorithm::choose() {
  if (proposed() < m_settings.population || measured() < 2) return prior_or_random_unvisited();
  std::vector<std::size_t> population = measured_indices();
  std::stable_sort(population.begin(), population.end(), [&](std::size_t a, std::size_t b) { return cost(a) < cost(b); });
  if (population.size() > std::size_t(m_settings.population)) population.resize(std::size_t(m_settings.population));

  const std::vector<int> a = m_grid.coords(tournament(population)), b = m_grid.coords(tournament(population));
  std::vector<int> child = a;
  if (m_rng.chance(m_settings.crossover))
    for (std::size_t d = 0; d < child.size(); ++d) child[d] = m_rng.chance(0.5) ? a[d] : b[d];
  for (std::size_t d = 0; d < child.size(); ++d) {
    const int top = int(m_grid.levels(d).size()) - 1;
    if (top == 0 || !m_rng.chance(m_settings.mutation)) continue;
    int step = m_rng.chance(0.5) ? 1 : -1;
    if (child[d] + step < 0 || child[d] + step > top) step = -step;
    child[d] += step;
  }
  if (const auto j = m_grid.find(child); j && !visited(*j)) return *j;
  return nearest_unvisited(child);
}

// ---- BayesianOptimization ------------------------------------------------------------------------
BayesianOptimization::BayesianOptimization(std::vector<core::Config> candidates, std::int64_t budget_trials,
                                           std::uint64_t seed, Settings s)
    : GridStrategy(std::move(candidates), budget_trials, seed), m_settings(s) {
  for (std::size_t d = 0; d < m_grid.dims(); ++d)
    if (m_grid.levels(d).size() > 1) m_model_dims.push_back(d);
}

double BayesianOptimization::prior_mean(std::size_t i) const {
  if (!has_prior()) return 0;
  return m_prior_offset + m_prior_scale * prior_log_cost(i).value_or(prior_fill());
}

std::vector<double> BayesianOptimization::features(std::size_t i) const {
  std::vector<double> f;
  f.reserve(m_model_dims.size());
  for (std::size_t d : m_model_dims) f.push_back(m_grid.feature(i, d));
  return f;
}

std::size_t BayesianOptimization::choose() {
  std::vector<std::size_t> scored;
  for (std::size_t i : observed_indices())
    if (outcome(i) == Outcome::measured || (outcome(i) == Outcome::failed && m_settings.penalty > 0)) scored.push_back(i);
  if (m_model_dims.empty()) return random_unvisited();
  if (proposed() < m_settings.initial || measured() == 0) {
    // Initial design: spread out. The first at random, then the unvisited candidate farthest (in
    // features) from everything visited, so a few points already span the space.
    std::vector<std::vector<double>> taken;
    for (std::size_t i = 0; i < m_grid.size(); ++i)
      if (visited(i)) taken.push_back(features(i));
    if (taken.empty()) return random_unvisited();
    double far = -1;
    std::vector<std::size_t> ties;
    for (std::size_t i = 0; i < m_grid.size(); ++i) {
      if (visited(i)) continue;
      const std::vector<double> f = features(i);
      double nearest = std::numeric_limits<double>::infinity();
      for (const auto& t : taken) {
        double d2 = 0;
        for (std::size_t k = 0; k < f.size(); ++k) d2 += (f[k] - t[k]) * (f[k] - t[k]);
        nearest = std::min(nearest, d2);
      }
      if (nearest > far + 1e-12) far = nearest, ties.clear();
      if (nearest >= far - 1e-12) ties.push_back(i);
    }
    return ties[m_rng.index(ties.size())];
  }

  std::vector<std::vector<double>> x;
  std::vector<double> y;
  const double failed_y = std::log(std::max(m_settings.penalty, 1e-9) * worst_cost());
  auto target = [&](std::size_t i) { return outcome(i) == Outcome::measured ? std::log(cost(i)) : failed_y; };
  if (scored.size() > kMaxModelPoints) {  // the model matters near the optimum: keep the fastest
    std::stable_sort(scored.begin(), scored.end(), [&](std::size_t a, std::size_t b) { return target(a) < target(b); });
    scored.resize(kMaxModelPoints);
  }
  if (has_prior()) {  // the prior line, by least squares over the measured configs modelled
    double prior_avg = 0, y_avg = 0, sxx = 0, sxy = 0;
    std::size_t n = 0;
    for (std::size_t i : scored)
      if (outcome(i) == Outcome::measured) prior_avg += prior_log_cost(i).value_or(prior_fill()), y_avg += target(i), ++n;
    prior_avg /= double(n), y_avg /= double(n);  // n >= 1: best() exists
    for (std::size_t i : scored)
      if (outcome(i) == Outcome::measured) {
        const double dm = prior_log_cost(i).value_or(prior_fill()) - prior_avg;
        sxx += dm * dm, sxy += dm * (target(i) - y_avg);
      }
    m_prior_scale = n >= kMinPriorFit && sxx > 1e-12 ? std::clamp(sxy / sxx, 0.0, kMaxPriorScale) : 1.0;
    m_prior_offset = y_avg - m_prior_scale * prior_avg;
  }
  for (std::size_t i : scored) {
    x.push_back(features(i));
    y.push_back(target(i) - prior_mean(i));
  }
  // Length scales: refit while data is scarce (each point moves them), then at ~10 % growth.
  const bool refit = scored.size() <= 30 || double(scored.size()) >= 1.1 * double(m_fitted_at);
  m_gp.fit(std::move(x), std::move(y), refit, m_scales, m_noise);
  m_scales = m_gp.length_scales();
  m_noise = m_gp.noise();
  if (refit) m_fitted_at = scored.size();

  std::vector<std::size_t> pool;
  if (unvisited() <= kMaxScored) {
    for (std::size_t i = 0; i < m_grid.size(); ++i)
      if (!visited(i)) pool.push_back(i);
  } else {  // a random sample, plus the incumbent's nearest unvisited neighbours (where EI tends to peak)
    const std::vector<int> at = m_grid.coords(*best());
    int nearest = std::numeric_limits<int>::max();
    for (std::size_t i = 0; i < m_grid.size(); ++i)
      if (!visited(i)) nearest = std::min(nearest, m_grid.distance(i, at));
    for (std::size_t i = 0; i < m_grid.size(); ++i)
      if (!visited(i) && m_grid.distance(i, at) == nearest) pool.push_back(i);
    while (pool.size() < kMaxScored) pool.push_back(random_unvisited());
    std::sort(pool.begin(), pool.end());
    pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
  }

  const double best_y = std::log(cost(*best()));
  std::size_t pick = pool.front();
  double pick_ei = -1, pick_mu = std::numeric_limits<double>::infinity();
  for (std::size_t i : pool) {
    double mu = 0, sigma = 0;
    m_gp.predict(features(i), mu, sigma);
    mu += prior_mean(i);
    const double ei = expected_improvement(mu, sigma, best_y, m_settings.xi);
    if (ei > pick_ei || (ei == pick_ei && mu < pick_mu)) pick = i, pick_ei = ei, pick_mu = mu;
  }
  return pick;
}

}  // namespace flashtune::tuner
