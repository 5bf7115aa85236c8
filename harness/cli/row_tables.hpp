// harness/cli/row_tables.hpp: the Store's typed rows (db/rows.hpp) as the Tables `query runs`, `query trials` and
// `query best` print: the CLI, not the database, decides how a number is written.
#pragma once

#include <vector>

#include "db/rows.hpp"
#include "harness/cli/table.hpp"

namespace flashtune::cli {

/// id, started, experiment, gpu, device_key, compile_only (0/1), status, trials, ok.
Table runs_table(const std::vector<db::RunRow>& runs);
/// id, family, stage, problem, config, status, reason, median_ms, iqr_ms, gbps, tflops, max_abs_err, registers,
/// spill_bytes, shared_static_bytes, compile_ms: times, rates and compile time to 5 significant digits, errors 3.
Table trials_table(const std::vector<db::TrialRow>& trials);
/// family, stage, problem, gpu, config, median_ms, iqr_ms, gbps, tflops, max_abs_err, run_id, trial_id,
/// source_hash, copy_ratio (3 decimals), ok_trials; digits as trials_table.
Table best_table(const std::vector<db::BestRow>& best);

}  // namespace flashtune::cli
