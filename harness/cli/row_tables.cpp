// harness/cli/row_tables.cpp: runs, trials and best rows formatted into Tables (the digits each column shows).
#include "harness/cli/row_tables.hpp"

#include <cstdio>
#include <string>

#include "harness/cli/results.hpp"

namespace flashtune::cli {

namespace {

std::string integer(std::optional<std::int64_t> v) { return v ? std::to_string(*v) : ""; }

std::string fixed3(std::optional<double> v) {
  if (!v) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", *v);
  return buf;
}

}  // namespace

Table runs_table(const std::vector<db::RunRow>& runs) {
  Table out{{"id", "started", "experiment", "gpu", "device_key", "compile_only", "status", "trials", "ok"}, {}};
  for (const auto& r : runs)
    out.rows.push_back({std::to_string(r.id), r.started, r.experiment, r.gpu, r.device_key, r.compile_only ? "1" : "0",
                        r.status, std::to_string(r.trials), std::to_string(r.ok)});
  return out;
}

Table trials_table(const std::vector<db::TrialRow>& trials) {
  Table out{{"id", "family", "stage", "problem", "config", "status", "reason", "median_ms", "iqr_ms", "gbps", "tflops",
             "max_abs_err", "registers", "spill_bytes", "shared_static_bytes", "compile_ms", "sm_mhz", "power_capped"},
            {}};
  for (const auto& t : trials)
    out.rows.push_back({std::to_string(t.trial_id), t.family, t.stage, t.problem, t.config, t.status, t.reason,
                        num(t.median_ms), num(t.iqr_ms), num(t.gbps), num(t.tflops), num(t.max_abs_err, 3),
                        integer(t.registers), integer(t.spill_bytes), integer(t.shared_static_bytes), num(t.compile_ms),
                        num(t.sm_clock_mhz), num(t.power_capped)});
  return out;
}

Table best_table(const std::vector<db::BestRow>& best) {
  Table out{{"family", "stage", "problem", "gpu", "config", "median_ms", "iqr_ms", "gbps", "tflops", "max_abs_err",
             "run_id", "trial_id", "source_hash", "copy_ratio", "ok_trials"},
            {}};
  for (const auto& b : best) {
    const auto& t = b.trial;
    out.rows.push_back({t.family, t.stage, t.problem, t.gpu, t.config, num(t.median_ms), num(t.iqr_ms), num(t.gbps),
                        num(t.tflops), num(t.max_abs_err, 3), std::to_string(t.run_id), std::to_string(t.trial_id),
                        t.source_hash, fixed3(b.copy_ratio), std::to_string(b.ok_trials)});
  }
  return out;
}

}  // namespace flashtune::cli
