// harness/measure/stats.hpp: summary statistics of timing samples (pure, no CUDA), so that how a median
// or an IQR is computed is written down once and tested on known data.
#pragma once

#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::measure {

/// Quantile `q` in [0, 1] of `sorted` (ascending, non-empty) with linear interpolation between the two
/// nearest ranks (position q * (n - 1); the "type 7" rule of R and NumPy's default).
double quantile_sorted(const std::vector<double>& sorted, double q);

/// Summary of `samples_ms` [ms], kept in order in the result: median, IQR (q75 - q25), min, max, mean and
/// rel_stdev (sample standard deviation, n - 1, over the mean; 0 for fewer than 2 samples or a zero mean).
/// Empty input gives all zeros. converged / cold / stopped_early are left at their defaults.
core::Timing summarize(std::vector<double> samples_ms);

}  // namespace flashtune::measure
