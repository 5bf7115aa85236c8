// tuner/replay.cpp: strategies against a recorded surface, and the exact random-search baseline.
#include "tuner/replay.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <unordered_map>

#include "tuner/strategy.hpp"

namespace flashtune::tuner {

namespace {
bool is_valid(const core::TrialResult& r) {
  return r.status == core::TrialStatus::ok && r.timing && std::isfinite(r.timing->median_ms) && r.timing->median_ms > 0;
}
}  // namespace

std::size_t Surface::valid() const {
  return std::size_t(std::count_if(results.begin(), results.end(), is_valid));
}

double Surface::optimum_ms() const {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& r : results)
    if (is_valid(r)) best = std::min(best, r.timing->median_ms);
  if (!std::isfinite(best)) throw core::UserError("surface " + name + " has no config with a valid time");
  return best;
}

double Surface::slowest_ms() const {
  double worst = -1;
  for (const auto& r : results)
    if (is_valid(r)) worst = std::max(worst, r.timing->median_ms);
  if (worst < 0) throw core::UserError("surface " + name + " has no config with a valid time");
  return worst;
}

std::vector<double> Surface::credited_ms() const {
  const double worst = slowest_ms();
  std::vector<double> out;
  for (const auto& r : results) out.push_back(is_valid(r) ? r.timing->median_ms : worst);
  return out;
}

double expected_best_of_random(std::vector<double> values, std::int64_t budget) {
  const auto n = std::int64_t(values.size());
  if (budget < 1 || budget > n)
    throw core::Error("expected_best_of_random: budget " + std::to_string(budget) + " not in [1, " + std::to_string(n) + "]");
  std::sort(values.begin(), values.end());
  // p_i = P(the minimum is the i-th smallest) = C(N-i, B-1) / C(N, B); p_1 = B / N and
  // p_{i+1} = p_i (N - i - B + 1) / (N - i): a product of ratios, no large binomials.
  double p = double(budget) / double(n), sum = 0;
  for (std::int64_t i = 1; i <= n - budget + 1; ++i) {
    sum += p * values[std::size_t(i - 1)];
    if (i < n) p *= double(n - i - budget + 1) / double(n - i);
  }
  return sum;
}

ReplayReport replay(const Surface& surface, const ReplayOptions& options) {
  const auto space = std::int64_t(surface.configs.size());
  if (space == 0 || surface.results.size() != surface.configs.size())
    throw core::UserError("surface " + surface.name + " is empty or has results and configs of different counts");
  if (options.seeds < 1) throw core::UserError("replay needs at least one seed, got " + std::to_string(options.seeds));
  ReplayReport rep;
  rep.surface = surface.name;
  rep.strategy = options.strategy.name;
  rep.space = space;
  rep.valid = std::int64_t(surface.valid());
  rep.seeds = options.seeds;
  rep.optimum_ms = surface.optimum_ms();
  rep.budget = options.budget > 0 ? options.budget : std::max<std::int64_t>(1, std::int64_t(std::floor(0.2 * double(space))));
  if (rep.budget > space)
    throw core::UserError("replay budget " + std::to_string(rep.budget) + " exceeds the space (" + std::to_string(space) + " configs)");
  rep.max_evals = options.max_evals > 0 ? std::min(options.max_evals, space) : space;
  rep.max_evals = std::max(rep.max_evals, rep.budget);
  rep.thresholds = options.thresholds;
  const std::vector<double> credited = surface.credited_ms();
  const double slowest = surface.slowest_ms();
  rep.random_baseline_ms = expected_best_of_random(credited, rep.budget);

  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < surface.configs.size(); ++i) index.emplace(surface.configs[i].key(), i);

  const std::size_t nt = rep.thresholds.size();
  rep.evals_mean.assign(nt, 0), rep.reached.assign(nt, 0), rep.reached_by_budget.assign(nt, 0);
  std::vector<double> scores;
  const double span = rep.random_baseline_ms - rep.optimum_ms;
  for (int k = 0; k < options.seeds; ++k) {
    core::StrategySettings settings = options.strategy;
    settings.seed = options.strategy.seed + std::uint64_t(k);
    settings.budget_trials = 0;
    settings.budget_seconds = 0;
    auto strategy = options.warm ? make_warm_strategy(settings, surface.configs, *options.warm)
                                 : make_strategy(settings, surface.configs);
    SeedOutcome out;
    out.seed = settings.seed;
    out.evals_to.assign(nt, 0);
    double best = std::numeric_limits<double>::infinity();
    std::size_t pending = nt;  // thresholds not reached yet
    while (out.evaluations < rep.max_evals && (out.evaluations < rep.budget || pending > 0)) {
      const auto c = strategy->propose();
      if (!c) break;
      const auto it = index.find(c->key());
      if (it == index.end())
        throw core::Error("replay: strategy " + settings.name + " proposed " + c->key() + ", which the surface lacks");
      const core::TrialResult& r = surface.results[it->second];
      strategy->observe(*c, r);
      ++out.evaluations;
      if (is_valid(r)) best = std::min(best, r.timing->median_ms);
      for (std::size_t t = 0; t < nt; ++t)
        if (out.evals_to[t] == 0 && best <= rep.optimum_ms * (1 + rep.thresholds[t]) * (1 + 1e-12))
          out.evals_to[t] = out.evaluations, --pending;
      if (out.evaluations == rep.budget) out.found_ms = std::isfinite(best) ? best : slowest;
    }
    if (out.evaluations < rep.budget) out.found_ms = std::isfinite(best) ? best : slowest;
    for (std::size_t t = 0; t < nt; ++t) {
      const bool hit = out.evals_to[t] > 0;
      rep.evals_mean[t] += double(hit ? out.evals_to[t] : rep.max_evals);
      rep.reached[t] += hit;
      rep.reached_by_budget[t] += hit && out.evals_to[t] <= rep.budget;
    }
    rep.found_mean_ms += out.found_ms;
    scores.push_back(span > 0 ? (rep.random_baseline_ms - out.found_ms) / span : std::nan(""));
    rep.per_seed.push_back(std::move(out));
  }
  const double n = options.seeds;
  for (std::size_t t = 0; t < nt; ++t) rep.evals_mean[t] /= n, rep.reached[t] /= n, rep.reached_by_budget[t] /= n;
  rep.found_mean_ms /= n;
  rep.gap_mean = std::max(0.0, rep.found_mean_ms / rep.optimum_ms - 1);  // not -1e-16 from rounding
  rep.score = span > 0 ? (rep.random_baseline_ms - rep.found_mean_ms) / span : std::nan("");
  double var = 0;
  for (double s : scores) var += (s - rep.score) * (s - rep.score);
  rep.score_stdev = scores.size() > 1 ? std::sqrt(var / double(scores.size() - 1)) : 0.0;
  return rep;
}

BarVerdict judge_bar(const std::vector<ReplayReport>& reports, double within, double max_fraction, int min_seeds) {
  BarVerdict v;
  v.evals_fraction = std::nan("");
  const auto learners = learning_strategy_names();
  auto threshold_of = [&](const ReplayReport& r) -> std::optional<std::size_t> {
    for (std::size_t t = 0; t < r.thresholds.size(); ++t)
      if (std::abs(r.thresholds[t] - within) < 1e-12) return t;
    return std::nullopt;
  };
  const ReplayReport* best = nullptr;
  for (const auto& r : reports) {
    if (std::find(learners.begin(), learners.end(), r.strategy) == learners.end() || !threshold_of(r)) continue;
    if (!best || r.evals_mean[*threshold_of(r)] < best->evals_mean[*threshold_of(*best)]) best = &r;
  }
  auto pct = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%", 100 * x);
    return std::string(buf);
  };
  if (!best) {
    v.surface = reports.empty() ? "" : reports.front().surface;
    v.line = "bar " + v.surface + ": no learning strategy replayed with a " + pct(within) + " threshold: FAIL";
    return v;
  }
  const std::size_t t = *threshold_of(*best);
  v.surface = best->surface, v.strategy = best->strategy, v.gap = best->gap_mean, v.score = best->score;
  v.evals_fraction = best->evals_mean[t] / double(best->space);
  v.within_at_budget = best->reached_by_budget[t];
  const double fraction = double(best->budget) / double(best->space);
  std::vector<std::string> why;
  const double allowed = std::max(max_fraction, 1.0 / double(best->space));
  if (v.evals_fraction > allowed + 1e-12) why.push_back(pct(v.evals_fraction) + " of the trials > " + pct(allowed));
  if (!(best->score > 0)) why.push_back("not better than random search at equal budget");
  if (fraction > allowed + 1e-12) why.push_back("budget " + pct(fraction) + " of the space > " + pct(allowed));
  if (best->seeds < min_seeds) why.push_back(std::to_string(best->seeds) + " seeds < " + std::to_string(min_seeds));
  v.pass = why.empty();
  char p_text[32];
  std::snprintf(p_text, sizeof p_text, "%.2f", best->score);
  v.line = "bar " + v.surface + ": " + v.strategy + " reaches within " + pct(within) + " of the optimum in " +
           pct(v.evals_fraction) + " of the " + std::to_string(best->space) + " trials (mean of " +
           std::to_string(best->seeds) + " seeds); at a budget of " + std::to_string(best->budget) + " (" +
           pct(fraction) + "): P = " + p_text + ", mean gap " + pct(best->gap_mean) + ", " +
           pct(v.within_at_budget) + " of seeds within " + pct(within) + ": " + (v.pass ? "PASS" : "FAIL");
  for (std::size_t i = 0; i < why.size(); ++i) v.line += (i ? "; " : " (") + why[i];
  if (!why.empty()) v.line += ")";
  return v;
}

}  // namespace flashtune::tuner
