// tuner/learners.hpp: the strategies that learn from what they measured: simulated annealing, a
// steady-state genetic algorithm and Gaussian-process Bayesian optimization. They share GridStrategy:
// the candidates on a Grid, the trial budget, what was proposed (never proposed twice) and what each
// observation taught (a time, a failure, or nothing). Pure: no CUDA, files or clock; all randomness
// comes from the seed, so a run is reproduced exactly by its seed and its observations.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tuner/gp.hpp"
#include "tuner/grid.hpp"
#include "tuner/strategy.hpp"

namespace flashtune::tuner {

// What one observation says about a candidate.
enum class Outcome {
  pending,   ///< proposed, not observed yet
  measured,  ///< status ok with a time (a time stopped early is a lower bound, used as is)
  failed,    ///< any status but ok/compiled: penalized, never proposed again
  unknown,   ///< ok or compiled without a time (compile-only runs, resumed trials): no information
};

/// How a trial result is read by the learning strategies; `cost_ms` is set for Outcome::measured.
Outcome classify(const core::TrialResult& r, double& cost_ms);

class GridStrategy : public Strategy {
 public:
  GridStrategy(std::vector<core::Config> candidates, std::int64_t budget_trials, std::uint64_t seed);

  /// An unvisited candidate chosen by the strategy; nullopt once the budget or the space is spent.
  std::optional<core::Config> propose() final;
  /// Records the outcome. A config that was never proposed but is a candidate is recorded too (and
  /// then never proposed); a config that is not a candidate is ignored.
  void observe(const core::Config& c, const core::TrialResult& r) final;

  std::int64_t proposed() const { return m_proposed; }
  const Grid& grid() const { return m_grid; }

  /// A prior cost per candidate, by core::Config::key() (lower is faster; any positive unit, such as an
  /// analytic model's clocks; keys that are not candidates are ignored). Bayesian optimization then models
  /// log(time) as a fitted line in log(prior cost) plus the GP's residual; annealing and the genetic
  /// algorithm take the prior's cheapest where they would pick at random (see each). Throws core::Error
  /// for a cost that is not positive and finite.
  void set_prior(const std::map<std::string, double>& cost_by_key);

 protected:
  /// Index of an unvisited candidate. Called only while one exists.
  virtual std::size_t choose() = 0;
  /// Called after each observation of candidate i (not for repeated observations of the same one).
  virtual void learn(std::size_t /*i*/) {}

  bool visited(std::size_t i) const { return m_outcome[i] != Outcome::pending || m_asked[i]; }
  Outcome outcome(std::size_t i) const { return m_outcome[i]; }
  double cost(std::size_t i) const { return m_cost[i]; }  ///< [ms] for Outcome::measured
  std::size_t unvisited() const { return m_grid.size() - m_visits; }
  std::size_t measured() const { return m_measured.size(); }
  const std::vector<std::size_t>& measured_indices() const { return m_measured; }  ///< in observation order
  const std::vector<std::size_t>& observed_indices() const { return m_observed; }  ///< every outcome, in order
  std::optional<std::size_t> best() const { return m_best; }  ///< lowest measured cost (earliest of equals)
  double worst_cost() const { return m_worst; }               ///< [ms] highest measured cost; 0 before any
  bool has_prior() const { return !m_prior.empty(); }
  /// log of candidate i's prior cost; nullopt without one (no prior, or none for this candidate).
  std::optional<double> prior_log_cost(std::size_t i) const;
  double prior_fill() const { return m_prior_fill; }  ///< mean log prior cost, for candidates without one

  std::size_t random_unvisited();
  /// A random one among the unvisited candidates nearest (L1 on coordinates) to `point`; with a prior,
  /// the prior's cheapest among them (random among equals).
  std::size_t nearest_unvisited(const std::vector<int>& point);
  /// With a prior, the unvisited candidate it rates cheapest (random among equals); else random_unvisited().
  std::size_t prior_or_random_unvisited();

  Grid m_grid;
  Rng m_rng;

 private:
  std::int64_t m_budget;
  std::int64_t m_proposed = 0;
  std::size_t m_visits = 0;
  std::vector<bool> m_asked;
  std::vector<Outcome> m_outcome;
  std::vector<double> m_cost;
  std::vector<std::size_t> m_measured, m_observed;
  std::optional<std::size_t> m_best;
  double m_worst = 0;
  std::vector<double> m_prior;  // per candidate, log prior cost (NaN: none); empty without a prior
  double m_prior_fill = 0;
  std::size_t pick_among(std::vector<std::size_t> ties);  // the prior's cheapest, then random
};

// Simulated annealing over the grid. The walk proposes an unvisited candidate nearest the current
// config and moves there when it is faster, or when it is slower by a relative step delta =
// cost / current - 1 with probability exp(-delta / T). T starts at `temperature` and is multiplied by
// `cooling` after each measurement, so the schedule does not depend on the budget. After `restart`
// measurements in a row without a new best, the walk restarts at the best config so far (its
// unvisited surroundings, since the best itself is visited). With a prior (set_prior) the walk starts at
// the prior's cheapest config and, among equally near unvisited ones, steps to the prior's cheapest.
class SimulatedAnnealing : public GridStrategy {
 public:
  struct Settings {
    double temperature = 0.2, cooling = 0.95;
    int restart = 12;
  };
  SimulatedAnnealing(std::vector<core::Config> candidates, std::int64_t budget_trials, std::uint64_t seed, Settings s);

 protected:
  std::size_t choose() override;
  void learn(std::size_t i) override;

 private:
  Settings m_settings;
  double m_temperature;
  std::optional<std::size_t> m_current;
  int m_stall = 0;
};

// Steady-state genetic algorithm: the population is the `population` fastest configs measured so far
// (failures never enter it). Until `population` configs have been proposed, candidates are drawn at
// random. Then each proposal is a child: two parents by tournament (`tournament` random members, the
// fastest wins), uniform crossover of their coordinates with probability `crossover` (else a copy of
// the first), each coordinate mutated by one step up or down with probability `mutation`. A child
// that is not an unvisited candidate (pruned by a constraint, or already tried) becomes the nearest
// unvisited candidate to it. With a prior (set_prior) the first draws are the prior's cheapest unvisited
// configs instead of random ones, and the nearest candidate to a child is the prior's cheapest among equals.
class GeneticAlgorithm : public GridStrategy {
 public:
  struct Settings {
    int population = 10, tournament = 2;
    double crossover = 0.9, mutation = 0.3;
  };
  GeneticAlgorithm(std::vector<core::Config> candidates, std::int64_t budget_trials, std::uint64_t seed, Settings s);

 protected:
  std::size_t choose() override;

 private:
  std::size_t tournament(const std::vector<std::size_t>& population);
  Settings m_settings;
};

// Bayesian optimization with a Gaussian process over the grid features (coordinates scaled to
// [0, 1]) modelling log(time), and expected improvement as the acquisition, evaluated exactly on every
// unvisited candidate (the space is discrete and enumerable, so no inner optimizer is needed; above
// kMaxScored unvisited candidates a random subset plus the incumbent's neighbourhood is scored).
// Failed configs are left out of the model by default (`penalty` 0): they are never proposed again,
// and on the synthetic attention surfaces, where the fastest configs border the ones that do not fit,
// both entering them at a penalty time and weighting EI by a kernel estimate of feasibility made the
// search worse (tuner/synthetic.hpp; README "Strategies and replay"). The first `initial` proposals
// are a spread-out design: one at random, then each the unvisited candidate farthest from all visited
// ones. Length scales are refitted by maximum likelihood after each observation while there are few,
// then at intervals (every ~10 % growth of the data).
// With a prior (set_prior: the analytic cost model on a cold start) the GP's mean is no longer a constant:
// log(time) = offset + scale x log(prior cost) + residual, offset and scale fitted by least squares to the
// measured configs (scale 1 below kMinPriorFit of them, and clamped to [0, kMaxPriorScale]: a model that
// orders the measured configs backwards falls back to a constant mean, the GP without a prior), and the GP
// models the residual. Candidates without a prior cost get the mean of the prior over those with one.
class BayesianOptimization : public GridStrategy {
 public:
  struct Settings {
    int initial = 3;
    double xi = 0.01;       ///< EI margin on log(time): 0.01 asks for about 1 % of improvement
    double penalty = 0;     ///< failed configs enter the model at this x the slowest time; 0: left out
  };
  static constexpr std::size_t kMaxScored = 4096;
  /// Points the model is fitted to at most (the fastest ones), so a proposal stays well under a
  /// second however long the search: the fit is cubic in the points, scoring quadratic.
  static constexpr std::size_t kMaxModelPoints = 256;
  /// Measured configs needed before the prior's scale is fitted (below: 1, the prior's own spread).
  static constexpr std::size_t kMinPriorFit = 3;
  /// Largest fitted scale of the prior: at most twice the spread the prior itself predicts.
  static constexpr double kMaxPriorScale = 2.0;
  BayesianOptimization(std::vector<core::Config> candidates, std::int64_t budget_trials, std::uint64_t seed, Settings s);

 protected:
  std::size_t choose() override;

 private:
  std::vector<double> features(std::size_t i) const;
  /// The fitted prior line at candidate i; 0 without a prior (the GP's constant mean stays its own).
  double prior_mean(std::size_t i) const;
  Settings m_settings;
  double m_prior_offset = 0, m_prior_scale = 1;  // the prior line, refitted at each choose()
  std::vector<std::size_t> m_model_dims;  // grid dimensions with more than one level
  GaussianProcess m_gp;
  std::vector<double> m_scales;
  double m_noise = 0;
  std::size_t m_fitted_at = 0;  // data size at the last length-scale fit
};

}  // namespace flashtune::tuner
