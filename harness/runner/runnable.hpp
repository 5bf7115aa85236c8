// harness/runner/runnable.hpp: a problem's configs split by KernelFamily::can_run on the device before any
// strategy sees them, so strategies propose only configs that can run and trial budgets count runnable
// trials only; the configs that cannot run are grouped by the kind of reason for one line of the run's log.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "harness/kernels/family.hpp"

namespace flashtune::runner {

struct Unrunnable {
  core::Config config;
  std::string reason;  ///< can_run's text, "shared memory 98304 B > 101376 B per block"
};

struct RunnableSplit {
  std::vector<core::Config> runnable;   ///< in the order given
  std::vector<Unrunnable> unrunnable;   ///< in the order given
  /// reason kind (reason_kind) -> configs; e.g. "shared memory # B > # B per block" -> 12.
  std::map<std::string, std::int64_t> by_reason() const;
  /// "12 x shared memory # B > # B per block (e.g. block_m=128,...: shared memory 98304 B > 101376 B per
  /// block); 3 x ...", most frequent first; "" when every config can run.
  std::string summary() const;
};

/// can_run(config, problem, device) for each config (cheap: no compile).
RunnableSplit split_runnable(const kernels::KernelFamily& family, const std::vector<core::Config>& configs,
                             const core::Problem& problem, const core::DeviceLimits& device);

/// A reason with every run of digits replaced by '#', so reasons that differ only in their numbers group.
std::string reason_kind(const std::string& reason);

}  // namespace flashtune::runner
