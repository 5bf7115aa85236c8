// db/merge.cpp: merging databases (flashtune db merge): Store::check_merge_source refuses what cannot be merged
// before anything is written, Store::merge_from copies a source's runs, problems, configs, compiles, trials, warm
// starts and peer measurements.
#include <array>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "db/sqlite_util.hpp"
#include "db/store_impl.hpp"

namespace flashtune::db {

using detail::file_uri;
using detail::Stmt;
using detail::Transaction;

namespace {

constexpr std::array<std::string_view, 5> kMergedTables = {"runs", "problems", "configs", "compiles", "trials"};

// Column names of `schema`.`table`, in order.
std::vector<std::string> columns_of(sqlite3* db, const std::string& schema, std::string_view table) {
  Stmt s(db, "PRAGMA " + schema + ".table_info(" + std::string(table) + ")");
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text(1));
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& prefix = "") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + prefix + i;
  return out;
}

// A read-only connection to a file that is to be merged, closed when it goes out of scope.
struct ReadOnly {
  sqlite3* db = nullptr;
  ~ReadOnly() { sqlite3_close_v2(db); }
};

}  // namespace

void Store::check_merge_source(const std::filesystem::path& source, const std::filesystem::path& output) {
  namespace fs = std::filesystem;
  const std::string name = source.string();
  std::error_code ec;
  if (!fs::exists(source, ec)) throw core::UserError(name + ": no such file");
  if (!fs::is_regular_file(source, ec)) throw core::UserError(name + ": not a file");
  if (fs::equivalent(source, output, ec)) throw core::UserError(name + ": is the output database itself");
  // Opened as Store(read_only) does: a WAL file on a read-only mount is read as immutable.
  ReadOnly ro;
  auto open = [&](const std::string& uri) {
    sqlite3_close_v2(ro.db);
    ro.db = nullptr;
    if (sqlite3_open_v2(uri.c_str(), &ro.db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) != SQLITE_OK)
      throw core::UserError(name + ": cannot open: " + (ro.db ? sqlite3_errmsg(ro.db) : "out of memory"));
    sqlite3_busy_timeout(ro.db, kBusyTimeoutMs);
    const int rc = sqlite3_exec(ro.db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
    return rc & 0xff;
  };
  if (const int rc = open(file_uri(source) + "?mode=ro"); rc == SQLITE_CANTOPEN || rc == SQLITE_READONLY)
    open(file_uri(source) + "?mode=ro&immutable=1");
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v2(ro.db,
                                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                                    "('runs', 'problems', 'configs', 'compiles', 'trials')",
                                    -1, &raw, nullptr);
  int tables = 0;
  int step = rc == SQLITE_OK ? sqlite3_step(raw) : rc;
  if (step == SQLITE_ROW) tables = sqlite3_column_int(raw, 0);
  const std::string message = sqlite3_errmsg(ro.db);
  sqlite3_finalize(raw);
  if (step != SQLITE_ROW) throw core::UserError(name + ": not an SQLite database (" + message + ")");
  if (tables != int(kMergedTables.size()))
    throw core::UserError(name + ": not a flashtune database (it lacks the runs, problems, configs, compiles and "
                                 "trials tables)");
  Stmt v(ro.db, "PRAGMA user_version");
  v.step();
  const int version = int(v.int64(0));
  if (version > latest_version())
    throw core::UserError(name + ": database schema version " + std::to_string(version) +
                          " is newer than this flashtune build knows (" + std::to_string(latest_version()) +
                          "); merge with a newer flashtune");
  if (version < 1) throw core::UserError(name + ": not a flashtune database (schema version 0)");
}

MergeCounts Store::merge_from(const std::filesystem::path& source) {
  namespace fs = std::filesystem;
  check_merge_source(source);
  const std::string name = source.string();

  // A consistent snapshot of the source (WAL content included) in a temporary file: the source is only read.
  static int counter = 0;
  const fs::path snap = fs::temp_directory_path() /
                        ("flashtune_merge_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".sqlite");
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(p.string() + suffix, ec);
    }
  } remove_snapshot{snap};
  {
    ReadOnly src, dst;  // (FT_CHECK_SQL wants its connection named db)
    const bool readable = sqlite3_open_v2((file_uri(source) + "?mode=ro").c_str(), &src.db,
                                          SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) == SQLITE_OK &&
                          sqlite3_exec(src.db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) ==
                              SQLITE_OK;
    if (!readable) {  // a WAL file on a read-only mount (check_merge_source read it the same way)
      sqlite3_close_v2(src.db);
      src.db = nullptr;
      if (const int rc = sqlite3_open_v2((file_uri(source) + "?mode=ro&immutable=1").c_str(), &src.db,
                                         SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
          rc != SQLITE_OK)
        detail::throw_sql(src.db, rc, "sqlite3_open_v2: " + name);
    }
    sqlite3_busy_timeout(src.db, kBusyTimeoutMs);
    if (const int rc = sqlite3_open_v2(snap.c_str(), &dst.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
        rc != SQLITE_OK)
      detail::throw_sql(dst.db, rc, "sqlite3_open_v2: " + snap.string());
    sqlite3_backup* b = sqlite3_backup_init(dst.db, "main", src.db, "main");
    if (!b) detail::throw_sql(dst.db, sqlite3_errcode(dst.db), "sqlite3_backup_init: " + name);
    const int step = sqlite3_backup_step(b, -1);
    const int finish = sqlite3_backup_finish(b);
    if (step != SQLITE_DONE) detail::throw_sql(dst.db, step, "sqlite3_backup_step: " + name);
    if (finish != SQLITE_OK) detail::throw_sql(dst.db, finish, "sqlite3_backup_finish: " + name);
  }
  { Store migrated(snap); }  // migrates an older schema forward, in the copy

  sqlite3* db = m_impl->db;
  Stmt(db, "ATTACH DATABASE ?1 AS src").bind(1, snap.string()).run();
  struct Detach {
    sqlite3* db;
    ~Detach() { sqlite3_exec(db, "DETACH DATABASE src", nullptr, nullptr, nullptr); }
  } detach{db};

  // The columns this build writes; the source must have each (it may have more, from a hand edit: ignored).
  std::map<std::string, std::vector<std::string>> cols;
  for (auto table : kMergedTables) {
    const auto mine = columns_of(db, "main", table);
    const auto theirs = columns_of(db, "src", table);
    for (const auto& c : mine)
      if (std::find(theirs.begin(), theirs.end(), c) == theirs.end())
        throw core::UserError(name + ": schema mismatch: table " + std::string(table) + " has no column " + c);
    auto& keep = cols[std::string(table)];
    for (const auto& c : mine)
      if (c != "id") keep.push_back(c);
  }

  MergeCounts n;
  Transaction tx(db);
  {
    Stmt all(db, "SELECT count(*) FROM src.runs");
    all.step();
    const std::int64_t runs = all.int64(0);
    Stmt(db, "INSERT INTO main.runs (" + join(cols["runs"]) + ") SELECT " + join(cols["runs"], "s.") +
                 " FROM src.runs s WHERE s.uid NOT IN (SELECT uid FROM main.runs WHERE uid IS NOT NULL) ORDER BY s.id")
        .run();
    n.runs_added = sqlite3_changes(db);
    n.runs_known = runs - n.runs_added;
  }
  for (const char* table : {"problems", "configs"})
    Stmt(db, "INSERT OR IGNORE INTO main." + std::string(table) + " (" + join(cols[table]) + ") SELECT " +
                 join(cols[table]) + " FROM src." + table + " ORDER BY id")
        .run();
  Stmt(db, "INSERT OR IGNORE INTO main.compiles (" + join(cols["compiles"]) + ") SELECT " + join(cols["compiles"]) +
               " FROM src.compiles ORDER BY id")
      .run();
  n.compiles_added = sqlite3_changes(db);

  std::vector<std::string> exprs;
  for (const auto& c : cols["trials"]) {
    if (c == "run_id") exprs.push_back("mr.id");
    else if (c == "problem_id") exprs.push_back("mp.id");
    else if (c == "config_id") exprs.push_back("mc.id");
    else if (c == "compile_id") exprs.push_back("mk.id");
    else exprs.push_back("t." + c);
  }
  {
    Stmt all(db, "SELECT count(*) FROM src.trials");
    all.step();
    const std::int64_t trials = all.int64(0);
    Stmt(db,
         "INSERT INTO main.trials (" + join(cols["trials"]) + ") SELECT " + join(exprs) +
             " FROM src.trials t"
             " JOIN src.runs sr ON sr.id = t.run_id JOIN main.runs mr ON mr.uid = sr.uid"
             " JOIN src.problems sp ON sp.id = t.problem_id"
             " JOIN main.problems mp ON mp.family = sp.family AND mp.key = sp.key"
             " JOIN src.configs sc ON sc.id = t.config_id"
             " JOIN main.configs mc ON mc.family = sc.family AND mc.key = sc.key"
             " LEFT JOIN src.compiles sk ON sk.id = t.compile_id LEFT JOIN main.compiles mk ON mk.cache_key = sk.cache_key"
             " WHERE t.id = (SELECT max(u.id) FROM src.trials u WHERE u.experiment_name = t.experiment_name"
             "   AND u.stage = t.stage AND u.family = t.family AND u.problem_id = t.problem_id"
             "   AND u.config_id = t.config_id AND u.source_hash = t.source_hash AND u.device_key = t.device_key)"
             " AND NOT EXISTS (SELECT 1 FROM main.trials m WHERE m.experiment_name = t.experiment_name"
             "   AND m.stage = t.stage AND m.family = t.family AND m.problem_id = mp.id AND m.config_id = mc.id"
             "   AND m.source_hash = t.source_hash AND m.device_key = t.device_key)"
             " ORDER BY t.id")
        .run();
    n.trials_added = sqlite3_changes(db);
    n.trials_known = trials - n.trials_added;
  }
  // Warm starts (v5; the snapshot was migrated, so the table exists there), linked to the merged runs.
  Stmt(db,
       "INSERT INTO main.warm_starts (run_id, family, stage, problem_key, sources, first, created_at)"
       " SELECT mr.id, w.family, w.stage, w.problem_key, w.sources, w.first, w.created_at FROM src.warm_starts w"
       " JOIN src.runs sr ON sr.id = w.run_id JOIN main.runs mr ON mr.uid = sr.uid"
       " WHERE NOT EXISTS (SELECT 1 FROM main.warm_starts m WHERE m.run_id = mr.id AND m.family = w.family"
       "   AND m.stage = w.stage AND m.problem_key = w.problem_key) ORDER BY w.id")
      .run();
  // Peer measurements (v6), linked to the merged runs and problems; one per (run, peer, pass, problem, device).
  {
    std::vector<std::string> peer_cols;
    for (const auto& c : columns_of(db, "main", "peer_trials"))
      if (c != "id" && c != "run_id" && c != "problem_id") peer_cols.push_back(c);
    Stmt(db,
         "INSERT INTO main.peer_trials (run_id, problem_id, " + join(peer_cols) + ") SELECT mr.id, mp.id, " +
             join(peer_cols, "t.") +
             " FROM src.peer_trials t JOIN src.runs sr ON sr.id = t.run_id JOIN main.runs mr ON mr.uid = sr.uid"
             " JOIN src.problems sp ON sp.id = t.problem_id"
             " JOIN main.problems mp ON mp.family = sp.family AND mp.key = sp.key"
             " WHERE NOT EXISTS (SELECT 1 FROM main.peer_trials m WHERE m.run_id = mr.id AND m.peer = t.peer"
             "   AND m.pass = t.pass AND m.problem_id = mp.id AND m.device_key = t.device_key) ORDER BY t.id")
        .run();
    n.peer_trials_added = sqlite3_changes(db);
  }
  tx.commit();
  return n;
}

}  // namespace flashtune::db
