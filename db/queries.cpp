// db/queries.cpp: the questions to the store answered in typed rows (db/rows.hpp): the CLI's (the runs with their
// counts, the trials with their run and compile, the fastest trial per (family, stage, problem, gpu)) and the
// runner's (a warm start's history). Values are read with SQLite's column accessors; the callers format them.
#include <sqlite3.h>

#include <charconv>
#include <unordered_map>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "db/owner.hpp"
#include "db/sqlite_util.hpp"
#include "db/store_impl.hpp"

namespace flashtune::db {

using detail::Stmt;

namespace {

// A REAL printed by SQLite's printf with `format` and read back correctly rounded, as std::stod read the text the
// typed rows replaced. NULL: empty; Inf and subnormals: as stored.
std::optional<double> reread_real(const Stmt& s, int i, const char* format) {
  if (s.is_null(i)) return std::nullopt;
  const double exact = s.real(i);
  char buf[64];
  sqlite3_snprintf(sizeof buf, buf, format, exact);
  double v = 0;
  const auto [end, ec] = std::from_chars(buf, buf + std::strlen(buf), v);
  return ec == std::errc() ? v : exact;
}

// A REAL as the text layer handed it to the CLI before these typed rows: SQLite's printf('%.17g') (3.40 writes 16
// significant digits and drops the 17th). Kept so that every output of query, export, grade and report stays
// byte-identical (tests/results/golden_test.cpp); the exact value (s.real(i)) would change the last digit of the
// full-precision numbers that export writes.
std::optional<double> text_layer_real(const Stmt& s, int i) { return reread_real(s, i, "%.17g"); }

// A REAL as sqlite3_column_text renders it ("%!.15g": 15 significant digits), what the warm start read through
// Store::sql before history_trials. Kept so that warm starts order configs exactly as before: the exact value could
// break differently a tie of two scores equal to 15 digits.
std::optional<double> column_text_real(const Stmt& s, int i) { return reread_real(s, i, "%!.15g"); }

std::optional<std::int64_t> opt_int(const Stmt& s, int i) {
  return s.is_null(i) ? std::nullopt : std::optional(s.int64(i));
}

// The columns read_trial reads (kTrialColumnCount of them), over the joins of kTrialJoins.
constexpr const char* kTrialColumns =
    "t.id, t.run_id, r.experiment_name, r.experiment_path, "
    "CASE WHEN r.gpu_name = '' THEN r.gpu_arch ELSE r.gpu_name END, t.family, t.stage, p.key, c.key, t.status, "
    "t.reason, t.median_ms, t.iqr_ms, t.mean_ms, t.rel_stdev, t.n_samples, t.tflops, t.gbps, t.max_abs_err, "
    "t.tolerance, t.device_bytes, coalesce(t.stopped_early, 0), t.source_hash, t.device_key, r.copy_gbps, "
    "k.registers, k.spill_store_bytes + k.spill_load_bytes, k.shared_static_bytes, k.compile_ms, p.json, c.json, "
    "t.sm_clock_mhz, t.power_capped";
constexpr int kTrialColumnCount = 33;
constexpr const char* kTrialJoins =
    " FROM trials t JOIN runs r ON r.id = t.run_id JOIN problems p ON p.id = t.problem_id "
    "JOIN configs c ON c.id = t.config_id LEFT JOIN compiles k ON k.id = t.compile_id ";

// problems.json and configs.json values parsed once per distinct text: a query's rows share a few of each.
struct ParsedJson {
  std::unordered_map<std::string, core::Problem> problems;
  std::unordered_map<std::string, core::Config> configs;
  const core::Problem& problem(std::string text) {
    const auto [it, added] = problems.try_emplace(std::move(text));
    if (added) it->second = read_problem_json(it->first);
    return it->second;
  }
  const core::Config& config(std::string text) {
    const auto [it, added] = configs.try_emplace(std::move(text));
    if (added) it->second = read_config_json(it->first);
    return it->second;
  }
};

TrialRow read_trial(const Stmt& s, ParsedJson& parsed) {
  TrialRow t;
  t.trial_id = s.int64(0), t.run_id = s.int64(1);
  t.experiment = s.text(2), t.experiment_path = s.text(3), t.gpu = s.text(4), t.family = s.text(5);
  t.stage = s.text(6), t.problem = s.text(7), t.config = s.text(8), t.status = s.text(9), t.reason = s.text(10);
  t.median_ms = text_layer_real(s, 11), t.iqr_ms = text_layer_real(s, 12), t.mean_ms = text_layer_real(s, 13);
  t.rel_stdev = text_layer_real(s, 14);
  t.n_samples = s.int64(15);  // NULL reads 0
  t.tflops = text_layer_real(s, 16), t.gbps = text_layer_real(s, 17), t.max_abs_err = text_layer_real(s, 18);
  t.tolerance = text_layer_real(s, 19);
  t.device_bytes = s.int64(20);
  t.stopped_early = s.int64(21) != 0;
  t.source_hash = s.text(22), t.device_key = s.text(23);
  t.copy_gbps = text_layer_real(s, 24);
  t.registers = opt_int(s, 25), t.spill_bytes = opt_int(s, 26), t.shared_static_bytes = opt_int(s, 27);
  t.compile_ms = text_layer_real(s, 28);
  t.shape = parsed.problem(s.text(29)), t.tunables = parsed.config(s.text(30));
  t.sm_clock_mhz = text_layer_real(s, 31), t.power_capped = text_layer_real(s, 32);
  return t;
}

}  // namespace

std::vector<RunRow> Store::runs() const {
  Stmt s(m_impl->db,
         "SELECT r.id, r.started_at, r.experiment_name, CASE WHEN r.gpu_name = '' THEN r.gpu_arch ELSE r.gpu_name END, "
         "r.device_key, r.compile_only, r.status, count(t.id), coalesce(sum(t.status IN ('ok', 'compiled')), 0), "
         "r.owner_host, coalesce(r.owner_pid, 0), r.owner_start "
         "FROM runs r LEFT JOIN trials t ON t.run_id = r.id GROUP BY r.id ORDER BY r.id");
  std::vector<RunRow> out;
  while (s.step()) {
    RunRow r;
    r.id = s.int64(0), r.started = s.text(1), r.experiment = s.text(2), r.gpu = s.text(3), r.device_key = s.text(4);
    r.compile_only = s.int64(5) != 0, r.status = s.text(6), r.trials = s.int64(7), r.ok = s.int64(8);
    // A run left `running` by a process that is gone (killed -9, its host rebooted) shows as interrupted, even
    // where the file is read-only.
    if (r.status == "running" && liveness({s.text(9), s.int64(10), s.text(11)}) == Liveness::gone) r.status = "interrupted";
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<TrialRow> Store::trials(std::int64_t run_id, const std::string& family_filter) const {
  Stmt s(m_impl->db, std::string("SELECT ") + kTrialColumns + kTrialJoins +
                         "WHERE (?1 = 0 OR t.run_id = ?1) AND (?2 = '' OR t.family = ?2) ORDER BY t.id");
  s.bind(1, run_id).bind(2, family_filter);
  std::vector<TrialRow> out;
  ParsedJson parsed;
  while (s.step()) out.push_back(read_trial(s, parsed));
  return out;
}

std::vector<BestRow> Store::best(const std::string& family_filter) const {
  Stmt s(m_impl->db,
         std::string("WITH ranked AS ("
                     " SELECT t.id, row_number() OVER w AS rank, count(*) OVER w AS ok_trials"
                     " FROM trials t JOIN runs r ON r.id = t.run_id"
                     " WHERE t.status = 'ok' AND t.median_ms IS NOT NULL AND coalesce(t.stopped_early, 0) = 0"
                     "  AND (?1 = '' OR t.family = ?1)"
                     " WINDOW w AS (PARTITION BY t.family, t.stage, t.problem_id, r.gpu_name"
                     "              ORDER BY t.median_ms, t.id"
                     "              ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) "
                     "SELECT ") +
             kTrialColumns +
             ", CASE WHEN r.copy_gbps > 0 AND t.gbps > 0 THEN t.gbps / r.copy_gbps END, ranked.ok_trials" + kTrialJoins +
             "JOIN ranked ON ranked.id = t.id WHERE ranked.rank = 1 ORDER BY t.family, t.stage, p.key, r.gpu_name");
  s.bind(1, family_filter);
  std::vector<BestRow> out;
  ParsedJson parsed;
  while (s.step()) {
    BestRow b;
    b.trial = read_trial(s, parsed);
    if (!s.is_null(kTrialColumnCount)) b.copy_ratio = s.real(kTrialColumnCount);
    b.ok_trials = s.int64(kTrialColumnCount + 1);
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<HistoryTrialRow> Store::history_trials(const std::string& family, const std::string& stage,
                                                   const std::string& device_key,
                                                   const std::string& excluding_problem_key) const {
  Stmt s(m_impl->db,
         "SELECT p.key, p.json, c.key, t.status, t.median_ms, coalesce(t.stopped_early, 0) FROM trials t "
         "JOIN problems p ON p.id = t.problem_id JOIN configs c ON c.id = t.config_id "
         "WHERE t.family = ?1 AND t.stage = ?2 AND t.device_key = ?3 AND p.key <> ?4 AND t.status <> 'compiled' "
         "ORDER BY t.id");
  s.bind(1, family).bind(2, stage).bind(3, device_key).bind(4, excluding_problem_key);
  std::vector<HistoryTrialRow> out;
  while (s.step()) {
    HistoryTrialRow h;
    h.problem = s.text(0), h.problem_json = s.text(1), h.config = s.text(2), h.status = s.text(3);
    h.median_ms = column_text_real(s, 4);
    h.stopped_early = s.int64(5) != 0;
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace flashtune::db
