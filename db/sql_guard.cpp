// db/sql_guard.cpp: Store::sql, the read-only door of `flashtune db sql` / `query sql`: one statement, checked by
// an SQLite authorizer that allows reading only (and the pragmas that only read), run with query_only on.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "db/sqlite_util.hpp"
#include "db/store_impl.hpp"

namespace flashtune::db {

namespace {

// Pragmas that only read, whatever their argument (table_info(trials), integrity_check(10)).
constexpr std::array<std::string_view, 9> kReadPragmasWithArg = {
    "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "foreign_key_check", "integrity_check", "quick_check"};
// Pragmas that read when given no value (PRAGMA user_version) but write with one (= 3).
// (journal_mode is not here: SQLite counts even a query of it as a possible write.)
constexpr std::array<std::string_view, 19> kReadPragmasWithoutArg = {
    "user_version",  "schema_version", "application_id", "page_size",
    "page_count",    "freelist_count", "encoding",       "synchronous",   "foreign_keys",
    "busy_timeout",  "compile_options", "database_list", "table_list",    "collation_list",
    "function_list", "module_list",    "pragma_list",    "data_version",  "cache_size"};

bool contains(auto const& list, std::string_view name) {
  for (auto n : list)
    if (sqlite3_stricmp(std::string(n).c_str(), std::string(name).c_str()) == 0) return true;
  return false;
}

// Authorizer for Store::sql(): allows reading only. Denied actions fail the prepare with SQLITE_AUTH.
int authorize_read_only(void*, int action, const char* arg1, const char* arg2, const char*,
                        const char*) {
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_FUNCTION:
    case SQLITE_RECURSIVE:
      return SQLITE_OK;
    case SQLITE_UPDATE:  // reported while SQLite loads the schema for a table-valued pragma function;
                         // a real UPDATE of the schema table fails anyway (writable_schema is off)
      return arg1 && (std::string_view(arg1) == "sqlite_master" ||
                      std::string_view(arg1) == "sqlite_schema")
                 ? SQLITE_OK
                 : SQLITE_DENY;
    case SQLITE_PRAGMA:
      if (arg1 && contains(kReadPragmasWithArg, arg1)) return SQLITE_OK;
      if (arg1 && !arg2 && contains(kReadPragmasWithoutArg, arg1)) return SQLITE_OK;
      return SQLITE_DENY;
    default:
      return SQLITE_DENY;
  }
}

}  // namespace

QueryResult Store::sql(const std::string& select) const {
  sqlite3* db = m_impl->db;
  const std::string refused =
      "db sql: refused: only one read-only statement (SELECT, WITH ... SELECT, EXPLAIN, or a PRAGMA "
      "that reads) is allowed: ";
  sqlite3_stmt* raw = nullptr;
  sqlite3_stmt* extra = nullptr;
  int rc = SQLITE_OK, rc_extra = SQLITE_OK;
  {
    // The authorizer is consulted while preparing: anything but reading fails with SQLITE_AUTH.
    struct Authorizer {
      sqlite3* db;
      ~Authorizer() { sqlite3_set_authorizer(db, nullptr, nullptr); }
    } guard{db};
    FT_CHECK_SQL(db, sqlite3_set_authorizer(db, authorize_read_only, nullptr));
    const char* tail = nullptr;
    rc = sqlite3_prepare_v2(db, select.c_str(), static_cast<int>(select.size()), &raw, &tail);
    if (rc == SQLITE_OK && tail) rc_extra = sqlite3_prepare_v2(db, tail, -1, &extra, nullptr);
  }
  const std::string message = sqlite3_errmsg(db);
  sqlite3_finalize(extra);
  struct Finalize {
    sqlite3_stmt* s;
    ~Finalize() { sqlite3_finalize(s); }
  } finalize{raw};
  if (rc == SQLITE_AUTH || rc_extra == SQLITE_AUTH || extra != nullptr || rc_extra != SQLITE_OK)
    throw core::UserError(refused + select);
  if (rc != SQLITE_OK) throw core::UserError("db sql: " + message + ": " + select);
  if (raw == nullptr) throw core::UserError("db sql: no statement in: " + select);
  if (!sqlite3_stmt_readonly(raw)) throw core::UserError(refused + select);

  // Belt and braces: query_only makes any write that slipped through fail with SQLITE_READONLY.
  detail::exec(db, "PRAGMA query_only = ON");
  struct QueryOnly {
    sqlite3* db;
    bool keep;
    ~QueryOnly() {
      if (!keep) sqlite3_exec(db, "PRAGMA query_only = OFF", nullptr, nullptr, nullptr);
    }
  } query_only{db, m_impl->read_only};
  QueryResult out;
  const int n = sqlite3_column_count(raw);
  for (int i = 0; i < n; ++i) out.columns.emplace_back(sqlite3_column_name(raw, i));
  while ((rc = sqlite3_step(raw)) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int i = 0; i < n; ++i) {
      const auto* p = sqlite3_column_text(raw, i);
      row.emplace_back(p ? reinterpret_cast<const char*>(p) : "");
    }
    out.rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) detail::throw_sql(db, rc, "step: " + select);
  return out;
}

}  // namespace flashtune::db
