// db/rows.hpp: the typed rows the Store's queries return (runs, trials, best per problem, peer measurements, the
// history a warm start learns from), read with SQLite's column accessors: SQL NULL is an empty std::optional, and
// no caller parses text back. The CLI formats them (table, CSV, JSON); only Store::sql, the user's own SELECT,
// answers in text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "harness/core/types.hpp"

namespace flashtune::db {

// One run with its trial counts (Store::runs).
struct RunRow {
  std::int64_t id = 0;
  std::string started;     ///< started_at, UTC "2026-11-25T19:26:40.380Z"
  std::string experiment;  ///< the experiment's name
  std::string gpu;         ///< the GPU's name; its arch for a compile-only run without one
  std::string device_key;
  bool compile_only = false;
  std::string status;  ///< as recorded, but `interrupted` for a `running` run whose owner process is gone
  std::int64_t trials = 0, ok = 0;  ///< trials recorded; of them ok or compiled
};

// One recorded trial with its run and compile (Store::trials). Times [ms], rates [TFLOP/s] [GB/s].
// Every REAL carries the 16 significant digits the text layer gave before these rows (see Store::trials).
struct TrialRow {
  std::int64_t trial_id = 0, run_id = 0;
  std::string experiment, experiment_path, gpu, family, stage, problem /* key */, config /* key */, status, reason;
  core::Problem shape;     ///< the problem `problem` names, from its problems.json (see db::read_problem_json)
  core::Config tunables;   ///< the config `config` names, from its configs.json (see db::read_config_json)
  std::optional<double> median_ms, iqr_ms, mean_ms, rel_stdev, tflops, gbps, max_abs_err, tolerance;
  std::int64_t n_samples = 0, device_bytes = 0;  ///< device_bytes [bytes]; 0 unknown
  bool stopped_early = false;
  std::string source_hash, device_key;
  std::optional<double> copy_gbps;  ///< [GB/s] the run's measured copy bandwidth
  /// Of the trial's compile (empty without one): registers per thread, spill stores + loads [bytes], static
  /// shared memory [bytes], compile time [ms].
  std::optional<std::int64_t> registers, spill_bytes, shared_static_bytes;
  std::optional<double> compile_ms;
  /// [MHz] mean SM clock while the samples ran and the fraction [0, 1] of clock polls under the power cap (v7;
  /// empty when not recorded).
  std::optional<double> sm_clock_mhz, power_capped;

  /// ok, with a median, and measured to the end (not abandoned against an incumbent).
  bool measured() const { return status == "ok" && median_ms.has_value() && !stopped_early; }
  /// Relative noise of the median: rel_stdev when recorded, else iqr / median; 0 when unknown.
  double rel_noise() const {
    if (rel_stdev && *rel_stdev >= 0) return *rel_stdev;
    if (iqr_ms && median_ms && *median_ms > 0) return *iqr_ms / *median_ms;
    return 0;
  }
};

// The fastest trial of one (family, stage, problem, gpu) (Store::best).
struct BestRow {
  TrialRow trial;
  std::optional<double> copy_ratio;  ///< trial gbps / the run's copy gbps; empty when either is unknown or 0
  std::int64_t ok_trials = 0;        ///< trials of the group with status ok measured to the end
};

// A recorded peer measurement with its run's GPU (Store::peer_trials).
struct PeerRow {
  std::int64_t id = 0, run_id = 0;
  std::string experiment, gpu, device_key, peer, library, pass, problem /* key */, status, reason;
  core::Problem shape;  ///< the problem `problem` names, from its problems.json (see db::read_problem_json)
  std::optional<double> median_ms, rel_stdev, tflops, max_abs_err, tolerance;  // [ms] [TFLOP/s]
  std::int64_t n_samples = 0;
  std::optional<std::int64_t> device_bytes;  ///< [bytes]
  std::optional<double> sm_clock_mhz, power_capped;  ///< (v7) [MHz] and [0, 1], as TrialRow's; empty when not recorded
  bool measured() const { return status == "ok" && median_ms.has_value(); }
};

// A recorded trial of another problem, what a warm start learns from (Store::history_trials).
struct HistoryTrialRow {
  std::string problem;              ///< the problem's key
  std::string problem_json;         ///< its problems.json value, as db::problem_from_json reads it
  std::string config;               ///< the config's key
  std::string status;               ///< as recorded ("ok", "incorrect", ...: core::to_string of a TrialStatus)
  std::optional<double> median_ms;  ///< [ms] empty when not measured
  bool stopped_early = false;       ///< measured against an incumbent and abandoned (a lower bound)
};

}  // namespace flashtune::db
