// harness/measure/stats.cpp: summarize() and quantiles.
#include "harness/measure/stats.hpp"

#include <algorithm>
#include <cmath>

namespace flashtune::measure {

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

core::Timing summarize(std::vector<double> samples_ms) {
  core::Timing t;
  t.samples_ms = std::move(samples_ms);
  const std::size_t n = t.samples_ms.size();
  if (n == 0) return t;

  std::vector<double> sorted = t.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  t.min_ms = sorted.front();
  t.max_ms = sorted.back();
  t.median_ms = quantile_sorted(sorted, 0.5);
  t.iqr_ms = quantile_sorted(sorted, 0.75) - quantile_sorted(sorted, 0.25);

  double sum = 0;
  for (double s : sorted) sum += s;
  t.mean_ms = sum / static_cast<double>(n);
  if (n >= 2 && t.mean_ms != 0) {
    double sq = 0;
    for (double s : sorted) sq += (s - t.mean_ms) * (s - t.mean_ms);
    t.rel_stdev = std::sqrt(sq / static_cast<double>(n - 1)) / std::abs(t.mean_ms);
  }
  return t;
}

}  // namespace flashtune::measure
