// tuner/strategy.cpp: Exhaustive, RandomSearch, the strategies' settings, the factory and Incumbent.
#include "tuner/strategy.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "tuner/learners.hpp"

namespace flashtune::tuner {

Exhaustive::Exhaustive(std::vector<core::Config> candidates, std::int64_t budget_trials)
    : m_candidates(std::move(candidates)), m_budget_trials(budget_trials) {}

std::optional<core::Config> Exhaustive::propose() {
  if (m_next >= static_cast<std::int64_t>(m_candidates.size())) return std::nullopt;
  if (m_budget_trials > 0 && m_next >= m_budget_trials) return std::nullopt;
  return m_candidates[static_cast<std::size_t>(m_next++)];
}

void Exhaustive::observe(const core::Config&, const core::TrialResult&) {}

RandomSearch::RandomSearch(std::vector<core::Config> candidates, std::int64_t budget_trials, std::uint64_t seed)
    : Exhaustive(std::move(candidates), budget_trials) {
  std::mt19937_64 rng(seed);
  // Fisher-Yates with rejection sampling: std::shuffle and uniform_int_distribution differ by library.
  for (std::size_t i = m_candidates.size(); i > 1; --i) {
    const std::uint64_t n = i, limit = std::mt19937_64::max() - std::mt19937_64::max() % n;
    std::uint64_t x;
    do x = rng(); while (x >= limit);
    std::swap(m_candidates[i - 1], m_candidates[static_cast<std::size_t>(x % n)]);
  }
}

namespace {

// Each strategy's properties, in the order shown to users: the one place that says which strategy learns from its
// measurements and in what order the others propose.
enum class Order {
  listed,    // every candidate in the given order (a trial budget stops it early)
  shuffled,  // every candidate in a seeded random order; a smaller trial budget makes it a sample
  learned,   // picked one at a time from what was observed
};
struct StrategyKind {
  const char* name;
  Order order;
};
constexpr StrategyKind kKinds[] = {
    {"exhaustive", Order::listed}, {"random", Order::shuffled},
    {"annealing", Order::learned}, {"genetic", Order::learned}, {"bayes", Order::learned}};

// The kind of a strategy name; nullopt for an unknown one.
std::optional<Order> order_of(const std::string& name) {
  for (const auto& k : kKinds)
    if (name == k.name) return k.order;
  return std::nullopt;
}

}  // namespace

std::vector<std::string> strategy_names() {
  std::vector<std::string> out;
  for (const auto& k : kKinds) out.emplace_back(k.name);
  return out;
}

std::vector<std::string> learning_strategy_names() {
  std::vector<std::string> out;
  for (const auto& k : kKinds)
    if (k.order == Order::learned) out.emplace_back(k.name);
  return out;
}

bool learns(const core::StrategySettings& settings) { return order_of(settings.name) == Order::learned; }

bool proposes_all(const core::StrategySettings& settings, std::size_t candidates) {
  const auto order = order_of(settings.name);
  if (order == Order::listed) return true;
  return order == Order::shuffled &&
         (settings.budget_trials == 0 || settings.budget_trials >= static_cast<std::int64_t>(candidates));
}

namespace {

std::string known_names() {
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  return known;
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Defaults: chosen on the synthetic attention-forward surfaces of tuner/synthetic.hpp with
// `flashtune replay --synthetic` (20 seeds, 20 % budget); see README "Strategies and replay".
const std::vector<StrategyOption>& options_of(const std::string& name) {
  static const std::vector<StrategyOption> none;
  static const std::vector<StrategyOption> annealing{
      {"temperature", 0.2, 0, 100, false, false, false,
       "initial temperature T: a step that is slower by a fraction delta is taken with probability exp(-delta / T)"},
      {"cooling", 0.95, 0, 1, true, false, false, "T is multiplied by this after each measurement"},
      {"restart", 12, 1, 1e9, false, false, true, "measurements in a row without a new best before restarting at the best"},
  };
  static const std::vector<StrategyOption> genetic{
      {"population", 10, 2, 1e6, false, false, true, "the fastest configs kept as parents; also the random first draws"},
      {"tournament", 2, 1, 64, false, false, true, "members drawn per parent selection (the fastest wins)"},
      {"crossover", 0.9, 0, 1, false, false, false, "probability that a child mixes two parents (else copies one)"},
      {"mutation", 0.3, 0, 1, false, false, false, "probability that each tunable moves one step up or down"},
  };
  static const std::vector<StrategyOption> bayes{
      {"initial", 3, 1, 1e6, false, false, true, "spread-out proposals (the first random, then farthest from all tried) before the model takes over"},
      {"xi", 0.01, 0, 10, false, false, false, "expected-improvement margin on log(time) (0.01: about 1 %)"},
      {"penalty", 0, 0, 100, false, false, false,
       "failed configs enter the model at this factor x the slowest time measured; 0: left out of the model"},
  };
  if (name == "annealing") return annealing;
  if (name == "genetic") return genetic;
  if (name == "bayes") return bayes;
  if (name == "exhaustive" || name == "random") return none;
  throw core::UserError("unknown strategy '" + name + "' (known: " + known_names() + ")");
}

double option(const core::StrategySettings& s, const std::string& key) {
  for (const auto& o : options_of(s.name))
    if (o.name == key) {
      const auto it = s.options.find(key);
      return it == s.options.end() ? o.fallback : it->second;
    }
  throw core::Error("strategy " + s.name + " has no setting '" + key + "'");
}

}  // namespace

std::vector<StrategyOption> strategy_options(const std::string& strategy) { return options_of(strategy); }

std::optional<std::string> check_strategy_option(const std::string& strategy, const std::string& key, double value) {
  const auto& opts = options_of(strategy);
  for (const auto& o : opts) {
    if (o.name != key) continue;
    const bool low = o.min_open ? value > o.min : value >= o.min, high = o.max_open ? value < o.max : value <= o.max;
    if (!std::isfinite(value) || !low || !high)
      return "must be in " + std::string(o.min_open ? "(" : "[") + number(o.min) + ", " + number(o.max) +
             (o.max_open ? ")" : "]") + ", got " + number(value);
    if (o.integer && value != std::floor(value)) return "must be a whole number, got " + number(value);
    return std::nullopt;
  }
  std::string known;
  for (const auto& o : opts) known += (known.empty() ? "" : ", ") + o.name;
  return "unknown setting of strategy " + strategy + (known.empty() ? " (it takes none)" : " (known: " + known + ")");
}

std::unique_ptr<Strategy> make_strategy(const core::StrategySettings& s, std::vector<core::Config> candidates) {
  if (s.budget_trials < 0)
    throw core::UserError("strategy budget_trials must be >= 0, got " + std::to_string(s.budget_trials));
  options_of(s.name);  // unknown names fail here
  for (const auto& [key, value] : s.options)
    if (auto why = check_strategy_option(s.name, key, value))
      throw core::UserError("strategy " + s.name + " setting '" + key + "': " + *why);
  if (s.name == "exhaustive") return std::make_unique<Exhaustive>(std::move(candidates), s.budget_trials);
  if (s.name == "random") return std::make_unique<RandomSearch>(std::move(candidates), s.budget_trials, s.seed);
  if (s.name == "annealing")
    return std::make_unique<SimulatedAnnealing>(
        std::move(candidates), s.budget_trials, s.seed,
        SimulatedAnnealing::Settings{option(s, "temperature"), option(s, "cooling"), int(option(s, "restart"))});
  if (s.name == "genetic")
    return std::make_unique<GeneticAlgorithm>(
        std::move(candidates), s.budget_trials, s.seed,
        GeneticAlgorithm::Settings{int(option(s, "population")), int(option(s, "tournament")), option(s, "crossover"),
                                   option(s, "mutation")});
  return std::make_unique<BayesianOptimization>(std::move(candidates), s.budget_trials, s.seed,
                                                BayesianOptimization::Settings{int(option(s, "initial")), option(s, "xi"), option(s, "penalty")});
}

bool Incumbent::offer(const core::Config& c, const core::TrialResult& r) {
  if (r.status != core::TrialStatus::ok || !r.timing || r.timing->stopped_early) return false;
  if (m_result && !(r.timing->median_ms < m_result->timing->median_ms)) return false;
  m_config = c;
  m_result = r;
  return true;
}

std::optional<double> Incumbent::median_ms() const {
  if (!m_result) return std::nullopt;
  return m_result->timing->median_ms;
}

bool Incumbent::hopeless(double lower_bound_ms, double slack) const {
  return m_result && lower_bound_ms > m_result->timing->median_ms * (1.0 + slack);
}

}  // namespace flashtune::tuner
