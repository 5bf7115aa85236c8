// tuner/space.hpp: a search space (named tunables, each with a list of values) and its enumeration.
// Pure value code: no CUDA, no files, no clock, so every strategy can be tested on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::tuner {

// The cartesian product of each tunable's values. Dimension order is significant: it fixes the
// enumeration order (the last dimension varies fastest).
struct SearchSpace {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> dims;

  /// Number of configs in the product (1 for no dimensions, 0 when some dimension has no values).
  /// Throws core::Error when the count does not fit in int64.
  std::int64_t size() const;
};

/// Every config of `space` for which `keep` returns true, in odometer order (last dimension fastest),
/// so the order is deterministic and the same on every machine. `keep` may be empty (keep all).
/// Throws core::Error when two dimensions share a name.
std::vector<core::Config> enumerate(const SearchSpace& space,
                                    const std::function<bool(const core::Config&)>& keep = {});

}  // namespace flashtune::tuner
