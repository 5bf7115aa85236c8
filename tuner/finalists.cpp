// tuner/finalists.cpp: the top-k pool, the interleaved order and the verdict with its tie-break.
#include "tuner/finalists.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace flashtune::tuner {

namespace {

// Quantile with linear interpolation between the nearest ranks (R type 7, NumPy's default), the rule
// harness/measure/stats.hpp uses for trials, so finalist medians read like trial medians.
double quantile_sorted(const std::vector<double>& s, double q) {
  const double pos = q * double(s.size() - 1);
  const std::size_t lo = std::size_t(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (pos - double(lo)) * (s[hi] - s[lo]);
}

// Notch half-width factor of McGill, Tukey and Larsen (1978): median +- 1.58 IQR / sqrt(n).
constexpr double kNotch = 1.58;

}  // namespace

bool TopConfigs::offer(const core::Config& c, const core::TrialResult& r) {
  if (m_count == 0 || r.status != core::TrialStatus::ok || !r.timing || r.timing->stopped_early) return false;
  const double ms = r.timing->median_ms;
  const auto at = std::upper_bound(m_entries.begin(), m_entries.end(), ms,
                                   [](double v, const std::pair<core::Config, double>& e) { return v < e.second; });
  if (std::size_t(at - m_entries.begin()) >= m_count) return false;
  m_entries.insert(at, {c, ms});
  if (m_entries.size() > m_count) m_entries.pop_back();
  return true;
}

std::vector<core::Config> TopConfigs::configs() const {
  std::vector<core::Config> out;
  for (const auto& e : m_entries) out.push_back(e.first);
  return out;
}

std::vector<int> interleaved_order(int n, int rounds) {
  std::vector<int> order;
  if (n <= 0 || rounds <= 0) return order;
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < n; ++k) order.push_back((r + k) % n);
  return order;
}

Verdict name_winner(const std::vector<core::Config>& finalists, const std::vector<std::vector<double>>& samples_ms,
                    double tie_band) {
  if (finalists.empty() || finalists.size() != samples_ms.size())
    throw core::Error("name_winner: " + std::to_string(finalists.size()) + " finalists but " +
                      std::to_string(samples_ms.size()) + " sample lists (need as many, at least one)");
  if (!(tie_band >= 0)) throw core::Error("name_winner: tie_band must be >= 0");
  Verdict v;
  for (std::size_t i = 0; i < finalists.size(); ++i) {
    if (samples_ms[i].empty()) throw core::Error("name_winner: finalist " + finalists[i].key() + " has no samples");
    std::vector<double> s = samples_ms[i];
    std::sort(s.begin(), s.end());
    v.stats.push_back({quantile_sorted(s, 0.5), quantile_sorted(s, 0.75) - quantile_sorted(s, 0.25), s.size()});
  }
  for (std::size_t i = 1; i < v.stats.size(); ++i)
    if (v.stats[i].median_ms < v.stats[v.fastest].median_ms) v.fastest = i;
  const FinalistStats& f = v.stats[v.fastest];
  for (std::size_t j = 0; j < v.stats.size(); ++j) {
    const FinalistStats& s = v.stats[j];
    const double noise = kNotch * (f.iqr_ms / std::sqrt(double(f.samples)) + s.iqr_ms / std::sqrt(double(s.samples)));
    if (s.median_ms - f.median_ms <= std::max(tie_band * f.median_ms, noise)) v.tied.push_back(j);
  }
  std::sort(v.tied.begin(), v.tied.end(), [&](std::size_t a, std::size_t b) {
    return v.stats[a].median_ms < v.stats[b].median_ms || (v.stats[a].median_ms == v.stats[b].median_ms && a < b);
  });
  v.winner = *std::min_element(v.tied.begin(), v.tied.end(), [&](std::size_t a, std::size_t b) {
    return finalists[a].values < finalists[b].values;
  });
  return v;
}

}  // namespace flashtune::tuner
