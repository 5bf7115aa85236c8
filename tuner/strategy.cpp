// tuner/strategy.cpp: Exhaustive, RandomSearch, the factory and Incumbent.
#include "tuner/strategy.hpp"

#include <random>

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

std::vector<std::string> strategy_names() { return {"exhaustive", "random"}; }

std::unique_ptr<Strategy> make_strategy(const core::StrategySettings& s, std::vector<core::Config> candidates) {
  if (s.budget_trials < 0)
    throw core::UserError("strategy budget_trials must be >= 0, got " + std::to_string(s.budget_trials));
  if (s.name == "exhaustive") return std::make_unique<Exhaustive>(std::move(candidates), s.budget_trials);
  if (s.name == "random") return std::make_unique<RandomSearch>(std::move(candidates), s.budget_trials, s.seed);
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  throw core::UserError("unknown strategy '" + s.name + "' (known: " + known + ")");
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
