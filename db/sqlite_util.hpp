// db/sqlite_util.hpp: private to db/. FT_CHECK_SQL, a prepared-statement wrapper and a transaction
// guard over the SQLite C API, so store.cpp reads as SQL and every failure becomes a StoreError.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>

#include "db/store.hpp"

// Throws StoreError(code, call text, sqlite3_errmsg(db), file:line) unless `call` returns SQLITE_OK.
#define FT_CHECK_SQL(db, call)                                                                   \
  do {                                                                                           \
    if (const int ft_rc = (call); ft_rc != SQLITE_OK)                                            \
      throw ::flashtune::db::StoreError(ft_rc, #call, ::flashtune::db::detail::errmsg(db, ft_rc), \
                                        __FILE__, __LINE__);                                     \
  } while (false)

namespace flashtune::db::detail {

/// " (database PATH)" for a connection to a file, "" otherwise: every error names the file it is about.
inline std::string in_file(sqlite3* db) {
  const char* f = db ? sqlite3_db_filename(db, "main") : nullptr;
  return f && *f ? " (database " + std::string(f) + ")" : std::string();
}

/// SQLite's message for the connection's last error (or the generic text of `rc` without one), and the file.
inline std::string errmsg(sqlite3* db, int rc) {
  return (db ? std::string(sqlite3_errmsg(db)) : std::string(sqlite3_errstr(rc))) + in_file(db);
}

[[noreturn]] inline void throw_sql(sqlite3* db, int rc, std::string call,
                                   std::source_location at = std::source_location::current()) {
  throw StoreError(rc, std::move(call), errmsg(db, rc), at.file_name(), static_cast<int>(at.line()));
}

// One prepared statement. Binds are 1-based like SQLite's; step() returns true while there is a row.
// Errors carry the statement's SQL and the caller's file:line.
class Stmt {
 public:
  Stmt(sqlite3* db, std::string_view sql, std::source_location at = std::source_location::current())
      : m_db(db) {
    const int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &m_stmt, nullptr);
    if (rc != SQLITE_OK) throw_sql(db, rc, "prepare: " + std::string(sql), at);
  }
  ~Stmt() { sqlite3_finalize(m_stmt); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(m_stmt, i, v)); }
  Stmt& bind(int i, int v) { return check(sqlite3_bind_int64(m_stmt, i, v)); }
  Stmt& bind(int i, bool v) { return check(sqlite3_bind_int64(m_stmt, i, v ? 1 : 0)); }
  Stmt& bind(int i, double v) { return check(sqlite3_bind_double(m_stmt, i, v)); }
  Stmt& bind(int i, std::string_view v) {
    return check(sqlite3_bind_text(m_stmt, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Stmt& bind_null(int i) { return check(sqlite3_bind_null(m_stmt, i)); }
  template <class T>
  Stmt& bind(int i, const std::optional<T>& v) {
    return v ? bind(i, *v) : bind_null(i);
  }

  bool step(std::source_location at = std::source_location::current()) {
    const int rc = sqlite3_step(m_stmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw_sql(m_db, rc, std::string("step: ") + sqlite3_sql(m_stmt), at);
  }
  /// Steps a statement that returns no rows (or whose rows are not needed).
  void run(std::source_location at = std::source_location::current()) {
    while (step(at)) {
    }
  }

  int columns() const { return sqlite3_column_count(m_stmt); }
  std::string column_name(int i) const { return sqlite3_column_name(m_stmt, i); }
  bool is_null(int i) const { return sqlite3_column_type(m_stmt, i) == SQLITE_NULL; }
  std::int64_t int64(int i) const { return sqlite3_column_int64(m_stmt, i); }
  double real(int i) const { return sqlite3_column_double(m_stmt, i); }
  std::string text(int i) const {  ///< NULL -> ""
    const auto* p = sqlite3_column_text(m_stmt, i);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<std::size_t>(sqlite3_column_bytes(m_stmt, i)))
             : std::string();
  }
  sqlite3_stmt* get() const noexcept { return m_stmt; }

 private:
  Stmt& check(int rc, std::source_location at = std::source_location::current()) {
    if (rc != SQLITE_OK) throw_sql(m_db, rc, std::string("bind: ") + sqlite3_sql(m_stmt), at);
    return *this;
  }
  sqlite3* m_db;
  sqlite3_stmt* m_stmt = nullptr;
};

/// Runs SQL text that returns no rows (may hold several statements).
inline void exec(sqlite3* db, std::string_view sql,
                 std::source_location at = std::source_location::current()) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, std::string(sql).c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string message = (err ? std::string(err) : std::string(sqlite3_errstr(rc))) + in_file(db);
    sqlite3_free(err);
    throw StoreError(rc, std::string(sql.substr(0, 200)), message, at.file_name(),
                     static_cast<int>(at.line()));
  }
}

// BEGIN IMMEDIATE (takes the write lock now, so the busy timeout applies to it rather than failing
// with SQLITE_BUSY on the first write); rolled back unless commit() is called. Never throws on rollback.
class Transaction {
 public:
  explicit Transaction(sqlite3* db, std::source_location at = std::source_location::current())
      : m_db(db) {
    exec(db, "BEGIN IMMEDIATE", at);
  }
  ~Transaction() {
    if (!m_done) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit(std::source_location at = std::source_location::current()) {
    exec(m_db, "COMMIT", at);
    m_done = true;
  }

 private:
  sqlite3* m_db;
  bool m_done = false;
};

}  // namespace flashtune::db::detail
