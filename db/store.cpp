// db/store.cpp: the Store over SQLite: open (read-write: integrity check, WAL, busy timeout, migrations,
// dead runs marked; read-only: nothing written), record runs, compiles and trials (one transaction each),
// claims and the resume lookup (the CLI's typed queries: db/queries.cpp; the read-only SQL door: db/sql_guard.cpp;
// merging databases: db/merge.cpp). Schema: db/schema.sql.
#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "db/embedded_sql.hpp"
#include "db/owner.hpp"
#include "db/sqlite_util.hpp"
#include "db/store_impl.hpp"

namespace flashtune::db {

using detail::Stmt;
using detail::Transaction;

core::Problem problem_from_json(const std::string& json) {
  try {
    const auto j = nlohmann::json::parse(json);
    core::Problem p;
    for (const auto& [name, v] : j.at("dims").items()) p.dims[name] = v.get<std::int64_t>();
    const std::string dtype = j.at("dtype").get<std::string>();
    const auto d = core::parse_dtype(dtype);
    if (!d) throw core::Error("problem JSON has an unknown dtype '" + dtype + "'");
    p.dtype = *d;
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw core::Error(std::string("unreadable problem JSON: ") + e.what());
  }
}

core::Config config_from_json(const std::string& json) {
  try {
    const auto j = nlohmann::json::parse(json);
    core::Config c;
    for (const auto& [name, v] : j.items()) c.values[name] = v.get<std::int64_t>();
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw core::Error(std::string("unreadable config JSON: ") + e.what());
  }
}

core::Problem read_problem_json(const std::string& json) {
  try {
    return problem_from_json(json);
  } catch (const core::Error&) {
    return {};
  }
}

core::Config read_config_json(const std::string& json) {
  try {
    return config_from_json(json);
  } catch (const core::Error&) {
    return {};
  }
}

std::string sql_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

namespace {

std::string short_file(const char* file) {
  const std::string f = file ? file : "";
  const auto pos = f.rfind("/db/");
  return pos == std::string::npos ? f : f.substr(pos + 1);
}

std::string store_error_message(int code, const std::string& call, const std::string& message,
                                const char* file, int line) {
  return "sqlite error " + std::to_string(code) + " (" + sqlite3_errstr(code) + "): " + message +
         "; in `" + call + "` at " + short_file(file) + ":" + std::to_string(line);
}

}  // namespace

StoreError::StoreError(int code, std::string call, const std::string& message, const char* file,
                       int line)
    : core::Error(store_error_message(code, call, message, file, line)),
      m_code(code),
      m_call(std::move(call)),
      m_file(short_file(file)),
      m_line(line) {}

std::string detail::file_uri(const std::filesystem::path& path) {
  std::string out = "file:";
  for (const unsigned char c : std::filesystem::absolute(path).string()) {
    if (c == '?' || c == '#' || c == '%' || c < 0x20) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

namespace {

// PRAGMA quick_check before anything is written: a partly corrupt file is refused with its name, instead
// of a run row being inserted and the run failing on the first damaged page ("malformed").
void check_integrity(sqlite3* db, const std::filesystem::path& path) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &raw, nullptr);
  std::string verdict;
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(raw);
    if (rc == SQLITE_ROW) {
      const auto* t = sqlite3_column_text(raw, 0);
      verdict = t ? reinterpret_cast<const char*>(t) : "";
      rc = SQLITE_OK;
    }
  }
  const std::string message = sqlite3_errmsg(db);
  sqlite3_finalize(raw);
  if ((rc & 0xff) == SQLITE_NOTADB) detail::throw_sql(db, rc, "PRAGMA quick_check(1)");  // names the file
  const std::string advice = "; nothing was written to it (restore a copy, or salvage it with: sqlite3 " +
                             path.string() + " .recover > salvaged.sql)";
  if ((rc & 0xff) == SQLITE_CORRUPT)
    throw core::Error(path.string() + ": database is corrupt (" + message + ")" + advice);
  if (rc != SQLITE_OK && rc != SQLITE_DONE) detail::throw_sql(db, rc, "PRAGMA quick_check(1)");
  if (verdict != "ok" && !verdict.empty())
    throw core::Error(path.string() + ": database is corrupt (PRAGMA quick_check: " + verdict + ")" + advice);
}

}  // namespace

Store::Store(const std::filesystem::path& path, Access access) : m_path(path), m_impl(std::make_unique<Impl>()) {
  if (access == Access::read_only) {
    m_impl->read_only = true;
    open_read_only();
    detail::exec(m_impl->db, "PRAGMA query_only = ON");
    return;
  }
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  sqlite3*& db = m_impl->db;
  FT_CHECK_SQL(db, sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                   nullptr));
  FT_CHECK_SQL(db, sqlite3_extended_result_codes(db, 1));
  FT_CHECK_SQL(db, sqlite3_busy_timeout(db, kBusyTimeoutMs));
  check_integrity(db, path);
  // Stays DELETE where WAL is impossible (NFS, :memory:). Two processes opening a new database at once
  // (`run --devices`' workers) can get SQLITE_BUSY here without the busy handler being consulted (SQLite
  // does not wait on some locks of the journal-mode switch), so the switch is retried within the timeout.
  for (int waited_ms = 0;; waited_ms += 10) {
    try {
      detail::exec(db, "PRAGMA journal_mode = WAL");
      break;
    } catch (const StoreError& e) {
      if ((e.code() & 0xff) != SQLITE_BUSY || waited_ms >= kBusyTimeoutMs) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  detail::exec(db, "PRAGMA synchronous = NORMAL");
  detail::exec(db, "PRAGMA foreign_keys = ON");
  m_impl->migrate(path);
  m_impl->reap_dead_runs();
}

void Store::open_read_only() {
  const std::string name = m_path.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(m_path, ec)) throw core::UserError(name + ": no such database file");
  sqlite3*& db = m_impl->db;
  // First as any reader; on a read-only mount a WAL database's -shm cannot be created, so the file is
  // then read as immutable (nothing can change it there).
  auto open = [&](const std::string& uri) {
    sqlite3_close_v2(db);
    db = nullptr;
    FT_CHECK_SQL(db, sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr));
    FT_CHECK_SQL(db, sqlite3_extended_result_codes(db, 1));
    FT_CHECK_SQL(db, sqlite3_busy_timeout(db, kBusyTimeoutMs));
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &raw, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(raw) == SQLITE_ROW ? SQLITE_OK : sqlite3_errcode(db);
    sqlite3_finalize(raw);
    return rc;
  };
  int rc = open(detail::file_uri(m_path) + "?mode=ro");
  if ((rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_READONLY)
    rc = open(detail::file_uri(m_path) + "?mode=ro&immutable=1");
  if ((rc & 0xff) == SQLITE_NOTADB)
    throw core::UserError(name + ": not an SQLite database (" + sqlite3_errmsg(db) + ")");
  if (rc != SQLITE_OK) detail::throw_sql(db, rc, "open read-only: " + name);
  const int version = m_impl->user_version();
  if (version > latest_version())
    throw core::UserError(name + ": database schema version " + std::to_string(version) +
                          " is newer than this flashtune build knows (" + std::to_string(latest_version()) +
                          "); use a newer flashtune");
  if (version == latest_version()) return;
  // An older schema: migrated in a private copy in memory, so the queries see today's columns.
  sqlite3* mem = nullptr;
  if (const int mrc = sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE, nullptr); mrc != SQLITE_OK) {
    sqlite3_close_v2(mem);
    detail::throw_sql(nullptr, mrc, "sqlite3_open_v2(:memory:)");
  }
  sqlite3_backup* b = sqlite3_backup_init(mem, "main", db, "main");
  const int step = b ? sqlite3_backup_step(b, -1) : sqlite3_errcode(mem);
  const int finish = b ? sqlite3_backup_finish(b) : SQLITE_OK;
  if (step != SQLITE_DONE || finish != SQLITE_OK) {
    const std::string message = sqlite3_errmsg(mem);
    sqlite3_close_v2(mem);
    throw StoreError(step != SQLITE_DONE ? step : finish, "sqlite3_backup into memory: " + name, message, __FILE__,
                     __LINE__);
  }
  sqlite3_close_v2(db);
  db = mem;
  sqlite3_extended_result_codes(db, 1);
  if (version >= 1) m_impl->migrate(m_path);
}

Store::~Store() = default;
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

int Store::latest_version() { return static_cast<int>(embedded::kMigrations.size()); }
std::string_view Store::schema_sql() { return embedded::kSchema; }
int Store::version() const { return m_impl->user_version(); }

std::int64_t Store::begin_run(const RunInfo& i) {
  const ProcessOwner owner = this_process();
  Stmt(m_impl->db,
       "INSERT INTO runs (experiment_name, experiment_path, experiment_hash, command_line, host, "
       "gpu_name, gpu_arch, gpu_uuid, driver_version, cuda_version, nvrtc_version, project_commit, "
       "device_key, compile_only, uid, owner_host, owner_pid, owner_start) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, "
       "lower(hex(randomblob(16))), ?15, ?16, ?17)")
      .bind(1, i.experiment_name).bind(2, i.experiment_path).bind(3, i.experiment_hash)
      .bind(4, i.command_line).bind(5, i.host).bind(6, i.gpu_name).bind(7, i.gpu_arch)
      .bind(8, i.gpu_uuid).bind(9, i.driver_version).bind(10, i.cuda_version)
      .bind(11, i.nvrtc_version).bind(12, i.project_commit).bind(13, i.device_key)
      .bind(14, i.compile_only)
      .bind(15, owner.host).bind(16, owner.pid).bind(17, owner.start)
      .run();
  return sqlite3_last_insert_rowid(m_impl->db);
}

void Store::set_copy_bandwidth(std::int64_t run_id, double gbps) {
  Stmt(m_impl->db, "UPDATE runs SET copy_gbps = ?2 WHERE id = ?1").bind(1, run_id).bind(2, gbps).run();
  if (sqlite3_changes(m_impl->db) == 0)
    throw core::Error("set_copy_bandwidth: no run with id " + std::to_string(run_id));
}

void Store::record_warm_start(std::int64_t run_id, const std::string& family, const std::string& stage,
                              const std::string& problem_key, const std::string& sources_json,
                              const std::string& first_json) {
  Stmt(m_impl->db,
       "INSERT INTO warm_starts (run_id, family, stage, problem_key, sources, first) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
      .bind(1, run_id)
      .bind(2, family)
      .bind(3, stage)
      .bind(4, problem_key)
      .bind(5, sources_json)
      .bind(6, first_json)
      .run();
}

void Store::finish_run(std::int64_t run_id, const std::string& status) {
  if (status != "finished" && status != "failed" && status != "interrupted" && status != "crashed")
    throw core::Error("finish_run: status must be finished, failed, interrupted or crashed, not '" + status +
                      "'");
  Stmt(m_impl->db,
       "UPDATE runs SET status = ?2, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
       "WHERE id = ?1")
      .bind(1, run_id).bind(2, status).run();
  if (sqlite3_changes(m_impl->db) == 0)
    throw core::Error("finish_run: no run with id " + std::to_string(run_id));
}

std::int64_t Store::record_compile(const core::CompileRecord& rec, const std::string& family,
                                   const std::string& source_hash,
                                   const std::string& nvrtc_version) {
  Transaction tx(m_impl->db);
  const std::int64_t id = m_impl->upsert_compile(rec, family, source_hash, nvrtc_version);
  tx.commit();
  return id;
}

std::int64_t Store::record_trial(const TrialRecord& t) {
  sqlite3* db = m_impl->db;
  Transaction tx(db);
  Stmt run(db, "SELECT nvrtc_version FROM runs WHERE id = ?1");
  if (!run.bind(1, t.run_id).step())
    throw core::Error("record_trial: no run with id " + std::to_string(t.run_id) +
                      " (call begin_run first)");
  const std::string nvrtc_version = run.text(0);

  const std::int64_t problem_id = m_impl->upsert_problem(t.family, t.problem);
  const std::int64_t config_id = m_impl->upsert_config(t.family, t.config);
  std::optional<std::int64_t> compile_id;
  if (t.result.compile)
    compile_id = m_impl->upsert_compile(*t.result.compile, t.family, t.source_hash, nvrtc_version);

  Stmt s(db,
         "INSERT INTO trials (run_id, experiment_name, family, stage, problem_id, config_id, "
         "source_hash, device_key, status, reason, compile_id, seed, median_ms, iqr_ms, min_ms, "
         "max_ms, mean_ms, rel_stdev, converged, cold, n_samples, samples_json, gbps, tflops, "
         "max_abs_err, max_rel_err, naive_err, tolerance, nan_count, stopped_early, device_bytes, sm_clock_mhz, "
         "power_capped) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
         "?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33)");
  s.bind(1, t.run_id).bind(2, t.experiment_name).bind(3, t.family).bind(4, t.stage)
      .bind(5, problem_id).bind(6, config_id).bind(7, t.source_hash).bind(8, t.device_key)
      .bind(9, std::string(core::to_string(t.result.status))).bind(10, t.result.reason)
      .bind(11, compile_id).bind(12, static_cast<std::int64_t>(t.seed));
  for (int i = 13; i <= 33; ++i) s.bind_null(i);
  if (t.result.device_bytes > 0) s.bind(31, t.result.device_bytes);
  if (const auto& m = t.result.timing) {
    s.bind(13, m->median_ms).bind(14, m->iqr_ms).bind(15, m->min_ms).bind(16, m->max_ms)
        .bind(17, m->mean_ms).bind(18, m->rel_stdev).bind(19, m->converged).bind(20, m->cold)
        .bind(21, static_cast<std::int64_t>(m->samples_ms.size()))
        .bind(22, nlohmann::json(m->samples_ms).dump()).bind(23, t.result.gbps)
        .bind(24, t.result.tflops).bind(30, m->stopped_early).bind(32, m->sm_clock_mhz).bind(33, m->power_capped);
  }
  if (const auto& v = t.result.validation; v && v->checked) {
    s.bind(25, v->max_abs_err).bind(26, v->max_rel_err).bind(27, v->naive_err)
        .bind(28, v->tolerance).bind(29, v->nan_count);
  }
  s.run();
  const std::int64_t id = sqlite3_last_insert_rowid(db);
  tx.commit();
  return id;
}

Claim Store::claim_trial(std::int64_t run_id, const ResumeKey& k) {
  sqlite3* db = m_impl->db;
  Transaction tx(db);  // the write lock: checking trials and claims and claiming are one step
  Claim out;
  out.recorded = find_trial_result(k.experiment_name, k.stage, k.family, k.problem_key, k.config_key, k.source_hash,
                                   k.device_key);
  if (out.recorded) {
    out.outcome = Claim::Outcome::recorded;
    tx.commit();
    return out;
  }
  auto where = [](const std::string& t) {
    return t + "experiment_name = ?1 AND " + t + "stage = ?2 AND " + t + "family = ?3 AND " + t +
           "problem_key = ?4 AND " + t + "config_key = ?5 AND " + t + "source_hash = ?6 AND " + t + "device_key = ?7";
  };
  auto bind_key = [&](Stmt& s) -> Stmt& {
    return s.bind(1, k.experiment_name).bind(2, k.stage).bind(3, k.family).bind(4, k.problem_key)
        .bind(5, k.config_key).bind(6, k.source_hash).bind(7, k.device_key);
  };
  Stmt held(db, std::string("SELECT c.run_id, r.status, r.owner_host, r.owner_pid, r.owner_start, r.host "
                            "FROM trial_claims c LEFT JOIN runs r ON r.id = c.run_id WHERE ") + where("c."));
  if (bind_key(held).step()) {
    const std::int64_t holder = held.int64(0);
    const ProcessOwner owner{held.text(2), held.is_null(3) ? 0 : held.int64(3), held.text(4)};
    if (holder != run_id && held.text(1) == "running" && liveness(owner) != Liveness::gone) {
      out.outcome = Claim::Outcome::taken;
      out.holder_run = holder;
      out.holder = "run " + std::to_string(holder) +
                   (owner.pid > 0 ? " (pid " + std::to_string(owner.pid) + " on " + owner.host + ")"
                                  : " (on " + held.text(5) + ")");
      tx.commit();
      return out;
    }
    Stmt take(db, std::string("UPDATE trial_claims SET run_id = ?8, claimed_at = strftime('%Y-%m-%dT%H:%M:%fZ', "
                              "'now') WHERE ") + where(""));
    bind_key(take).bind(8, run_id).run();
  } else {
    Stmt claim(db, "INSERT INTO trial_claims (experiment_name, stage, family, problem_key, config_key, source_hash, "
                   "device_key, run_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    bind_key(claim).bind(8, run_id).run();
  }
  tx.commit();
  out.outcome = Claim::Outcome::claimed;
  return out;
}

std::optional<core::TrialStatus> Store::find_trial(
    const std::string& experiment_name, const std::string& stage, const std::string& family,
    const std::string& problem_key, const std::string& config_key, const std::string& source_hash,
    const std::string& device_key) const {
  const auto r = find_trial_result(experiment_name, stage, family, problem_key, config_key, source_hash, device_key);
  return r ? std::optional<core::TrialStatus>(r->status) : std::nullopt;
}

std::optional<core::TrialResult> Store::find_trial_result(
    const std::string& experiment_name, const std::string& stage, const std::string& family,
    const std::string& problem_key, const std::string& config_key, const std::string& source_hash,
    const std::string& device_key) const {
  Stmt s(m_impl->db,
         "SELECT t.status, t.reason, t.median_ms, t.iqr_ms, t.min_ms, t.max_ms, t.mean_ms, t.rel_stdev, "
         "t.converged, t.cold, t.samples_json, t.gbps, t.tflops, t.stopped_early, t.sm_clock_mhz, t.power_capped FROM trials t "
         "JOIN problems p ON p.id = t.problem_id JOIN configs c ON c.id = t.config_id "
         "WHERE t.experiment_name = ?1 AND t.stage = ?2 AND t.family = ?3 AND p.family = ?3 "
         "AND p.key = ?4 AND c.family = ?3 AND c.key = ?5 AND t.source_hash = ?6 "
         "AND t.device_key = ?7 ORDER BY t.id DESC LIMIT 1");
  s.bind(1, experiment_name).bind(2, stage).bind(3, family).bind(4, problem_key)
      .bind(5, config_key).bind(6, source_hash).bind(7, device_key);
  if (!s.step()) return std::nullopt;
  const std::string text = s.text(0);
  const auto status = core::parse_trial_status(text);
  if (!status) throw core::Error("find_trial: unknown trial status '" + text + "' in the database");
  core::TrialResult r;
  r.status = *status;
  r.reason = s.text(1);
  if (!s.is_null(2)) {
    core::Timing m;
    m.median_ms = s.real(2), m.iqr_ms = s.real(3), m.min_ms = s.real(4), m.max_ms = s.real(5);
    m.mean_ms = s.real(6), m.rel_stdev = s.real(7);
    m.converged = s.int64(8) != 0, m.cold = s.int64(9) != 0, m.stopped_early = s.int64(13) != 0;
    if (!s.is_null(10)) m.samples_ms = nlohmann::json::parse(s.text(10)).get<std::vector<double>>();
    if (!s.is_null(14)) m.sm_clock_mhz = s.real(14);
    if (!s.is_null(15)) m.power_capped = s.real(15);
    r.timing = m;
    r.gbps = s.real(11), r.tflops = s.real(12);
  }
  return r;
}

}  // namespace flashtune::db
