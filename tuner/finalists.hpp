// tuner/finalists.hpp: naming a winner. A search measures each config once, at a moment of its own;
// the fastest few are then re-measured interleaved (A B C, B C A, C A B, ...) so that slow drift of
// the GPU (clocks, temperature, a neighbour's load) hits them alike. A finalist whose median lies
// within the noise band of the fastest ties with it, and a tie is broken by a fixed rule, not by noise,
// and reported as a tie. Pure functions: the runner does the measuring.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::tuner {

// The `count` fastest configs offered so far: status ok, timed to the end (not stopped early).
// Ascending median; of equal medians the one offered first stays ahead.
class TopConfigs {
 public:
  explicit TopConfigs(int count) : m_count(count > 0 ? std::size_t(count) : 0) {}
  /// Considers one trial; returns true when it enters the top.
  bool offer(const core::Config& c, const core::TrialResult& r);
  const std::vector<std::pair<core::Config, double>>& entries() const { return m_entries; }  ///< (config, median [ms])
  std::vector<core::Config> configs() const;

 private:
  std::size_t m_count;
  std::vector<std::pair<core::Config, double>> m_entries;
};

/// The slot order of an interleaved re-measurement of `n` finalists over `rounds` rounds: round r
/// visits them starting at finalist r % n (0 1 2, 1 2 0, 2 0 1, 0 1 2, ...), so no finalist is always
/// measured first, or always right after the same other one. Empty when n or rounds <= 0.
std::vector<int> interleaved_order(int n, int rounds);

struct FinalistStats {
  double median_ms = 0, iqr_ms = 0;  ///< [ms] of the re-measured samples (quantiles as NumPy's default)
  std::size_t samples = 0;
};

struct Verdict {
  std::size_t winner = 0;            ///< index into the finalists
  std::size_t fastest = 0;           ///< the finalist with the lowest re-measured median
  std::vector<std::size_t> tied;     ///< finalists tied with the fastest, itself included; size 1: no tie
  std::vector<FinalistStats> stats;  ///< per finalist
  bool tie() const { return tied.size() > 1; }
};

/// Names the winner from each finalist's re-measured samples [ms] (all rounds together).
/// The fastest has the lowest median (equal medians: the earlier finalist). Finalist j ties with the
/// fastest f when median_j - median_f <= max(tie_band * median_f, 1.58 * (iqr_f / sqrt(n_f) +
/// iqr_j / sqrt(n_j))): the second term is the half width of the notches of McGill, Tukey and
/// Larsen's box plots (1978), medians whose notches overlap are not told apart. Of the tied configs the
/// winner is the one whose values compare smallest (Config::values: tunables in name order, compared
/// numerically, so usually the smaller tiles): a rule that does not depend on the noise, so the same
/// tie gives the same winner on every rerun. Throws core::Error when the counts differ, there are no
/// finalists, a finalist has no samples, or tie_band < 0.
Verdict name_winner(const std::vector<core::Config>& finalists, const std::vector<std::vector<double>>& samples_ms,
                    double tie_band);

}  // namespace flashtune::tuner
