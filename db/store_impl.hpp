// db/store_impl.hpp: private to db/ (store.cpp, sql_guard.cpp, merge.cpp): the Store's connection and the
// upserts, migrations and dead-run reaping its sources share, and the file-name-to-URI rule.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "db/embedded_sql.hpp"
#include "db/owner.hpp"
#include "db/sqlite_util.hpp"
#include "db/store.hpp"

namespace flashtune::db {

namespace detail {

// `path` as an SQLite URI ("file:/a%3Fb.sqlite"), so that characters such as ? and # stay part of the name.
std::string file_uri(const std::filesystem::path& path);

// A negative count (unknown) as SQL NULL.
inline std::optional<int> known(int v) { return v < 0 ? std::nullopt : std::optional<int>(v); }

}  // namespace detail

struct Store::Impl {
  using Stmt = detail::Stmt;
  using Transaction = detail::Transaction;
  sqlite3* db = nullptr;
  bool read_only = false;  // Access::read_only: query_only stays on (an in-memory migrated copy included)
  ~Impl() { sqlite3_close_v2(db); }  // never throws; finalizes nothing (Stmt finalizes its own)

  int user_version() const {
    Stmt s(db, "PRAGMA user_version");
    s.step();
    return static_cast<int>(s.int64(0));
  }

  std::int64_t upsert_problem(const std::string& family, const core::Problem& p) {  // read by problem_from_json
    nlohmann::json j;
    j["dims"] = p.dims;
    j["dtype"] = std::string(core::to_string(p.dtype));
    const std::string key = p.key();
    Stmt(db, "INSERT INTO problems (family, key, json) VALUES (?1, ?2, ?3) "
             "ON CONFLICT (family, key) DO NOTHING")
        .bind(1, family).bind(2, key).bind(3, j.dump()).run();
    Stmt s(db, "SELECT id FROM problems WHERE family = ?1 AND key = ?2");
    s.bind(1, family).bind(2, key).step();
    return s.int64(0);
  }

  std::int64_t upsert_config(const std::string& family, const core::Config& c) {
    const nlohmann::json j = c.values;
    const std::string key = c.key();
    Stmt(db, "INSERT INTO configs (family, key, hash, json) VALUES (?1, ?2, ?3, ?4) "
             "ON CONFLICT (family, key) DO NOTHING")
        .bind(1, family).bind(2, key).bind(3, core::hash_hex(key)).bind(4, j.dump()).run();
    Stmt s(db, "SELECT id FROM configs WHERE family = ?1 AND key = ?2");
    s.bind(1, family).bind(2, key).step();
    return s.int64(0);
  }

  std::int64_t upsert_compile(const core::CompileRecord& rec, const std::string& family,
                              const std::string& source_hash, const std::string& nvrtc_version) {
    const std::string cache_key =
        !rec.cache_key.empty()
            ? rec.cache_key
            : core::hash_hex(family + '\n' + source_hash + '\n' + rec.arch + '\n' + rec.options +
                             '\n' + rec.name_expression);
    // A cache hit carries no compile time and maybe no log: it must not replace the real record.
    const std::string on_conflict =
        rec.cache_hit
            ? "DO NOTHING"
            : "DO UPDATE SET family = excluded.family, arch = excluded.arch, "
              "options = excluded.options, "
              "nvrtc_version = CASE WHEN excluded.nvrtc_version <> '' THEN excluded.nvrtc_version "
              "ELSE nvrtc_version END, "
              "source_hash = excluded.source_hash, lowered_name = excluded.lowered_name, "
              "ok = excluded.ok, log = excluded.log, registers = excluded.registers, "
              "spill_store_bytes = excluded.spill_store_bytes, "
              "spill_load_bytes = excluded.spill_load_bytes, "
              "stack_frame_bytes = excluded.stack_frame_bytes, "
              "shared_static_bytes = excluded.shared_static_bytes, "
              "cubin_bytes = excluded.cubin_bytes, compile_ms = excluded.compile_ms, "
              "name_expression = excluded.name_expression, constant_bytes = excluded.constant_bytes";
    const auto& r = rec.resources;
    Stmt(db,
         "INSERT INTO compiles (cache_key, family, arch, options, nvrtc_version, source_hash, "
         "lowered_name, ok, log, registers, spill_store_bytes, spill_load_bytes, stack_frame_bytes, "
         "shared_static_bytes, cubin_bytes, compile_ms, name_expression, constant_bytes) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18) "
         "ON CONFLICT (cache_key) " + on_conflict)
        .bind(1, cache_key).bind(2, family).bind(3, rec.arch).bind(4, rec.options)
        .bind(5, nvrtc_version).bind(6, source_hash).bind(7, rec.lowered_name).bind(8, rec.ok)
        .bind(9, rec.log).bind(10, detail::known(r.registers)).bind(11, detail::known(r.spill_store_bytes))
        .bind(12, detail::known(r.spill_load_bytes)).bind(13, detail::known(r.stack_frame_bytes))
        .bind(14, detail::known(r.shared_static_bytes)).bind(15, static_cast<std::int64_t>(rec.cubin_bytes))
        .bind(16, rec.compile_ms).bind(17, rec.name_expression).bind(18, detail::known(r.constant_bytes))
        .run();
    Stmt s(db, "SELECT id FROM compiles WHERE cache_key = ?1");
    s.bind(1, cache_key).step();
    return s.int64(0);
  }

  // Marks `interrupted` every run of this host still recorded `running` whose owner process is gone.
  void reap_dead_runs() {
    std::vector<std::int64_t> dead;
    {
      Stmt s(db, "SELECT id, owner_host, owner_pid, owner_start FROM runs WHERE status = 'running' "
                 "AND owner_pid IS NOT NULL");
      while (s.step())
        if (liveness({s.text(1), s.int64(2), s.text(3)}) == Liveness::gone) dead.push_back(s.int64(0));
    }
    for (const auto id : dead)
      Stmt(db, "UPDATE runs SET status = 'interrupted', finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
               "WHERE id = ?1 AND status = 'running'")
          .bind(1, id).run();
  }

  void migrate(const std::filesystem::path& path) {
    const int latest = Store::latest_version();
    auto refuse_newer = [&](int v) {
      if (v > latest)
        throw core::UserError(path.string() + ": database schema version " + std::to_string(v) +
                              " is newer than this flashtune build knows (" +
                              std::to_string(latest) +
                              "); use a newer flashtune or another database file");
    };
    refuse_newer(user_version());
    if (user_version() == latest) return;
    Transaction tx(db);
    const int from = user_version();  // again under the write lock: another process may have migrated
    refuse_newer(from);
    for (int v = from; v < latest; ++v) detail::exec(db, embedded::kMigrations[v]);
    detail::exec(db, "PRAGMA user_version = " + std::to_string(latest));
    tx.commit();
  }
};

}  // namespace flashtune::db
