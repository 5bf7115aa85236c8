// harness/runner/search_start.hpp: where one problem's search begins (tuner/warm_start.hpp): from the configs that
// won on the nearest problems measured in the database (a warm start), else, for a learning strategy, from the
// analytic cost model's order. Each start taken is said and recorded in the store's warm_starts table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "harness/core/types.hpp"
#include "harness/kernels/family.hpp"
#include "harness/runner/printer.hpp"
#include "tuner/warm_start.hpp"

namespace flashtune::runner {

/// The run a start is recorded with and said for.
struct StartEnv {
  db::Store& store;
  std::int64_t run_id = 0;
  std::string device_key;            ///< the device whose history counts
  const core::DeviceLimits& limits;  ///< what the cost model estimates for
  Printer& printer;
};

/// A warm start over `configs`: every other problem of the same family, stage and device measured in the store
/// (any experiment, any kernel source; per config its latest trial) is history. Uninformed (a cold start, nothing
/// said or recorded) when there is none.
tuner::WarmStart warm_start(const StartEnv& env, const kernels::KernelFamily& family, const core::Problem& problem,
                            const std::vector<core::Config>& configs);

/// A cold start's order from the analytic cost model (no history), recorded with sources [{"model": name}].
/// Uninformed when the model knows none of the configs.
tuner::WarmStart model_start(const StartEnv& env, const kernels::KernelFamily& family, const core::Problem& problem,
                             const std::vector<core::Config>& configs);

}  // namespace flashtune::runner
