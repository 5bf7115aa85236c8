// harness/experiment/yaml_reader.hpp: private to harness/experiment. Reading a YAML tree so that every mistake is
// located: the file a failure names (Ctx), a map reader that refuses unknown and repeated keys, and scalar conversions.
// Every failure throws core::UserError "FILE:LINE:COL: key 'path.to.key': message" (marks printed 1-based).
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::experiment::detail {

/// The names separated by ", " (for "allowed: a, b, c" lists in messages).
std::string join(const std::vector<std::string>& v);

// Everything a check needs to report where it failed.
class Ctx {
 public:
  explicit Ctx(std::string file) : m_file(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Mark& m, const std::string& key, const std::string& msg) const {
    std::string where = m_file;
    if (!m.is_null()) where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    throw core::UserError(where + ": " + (key.empty() ? "" : "key '" + key + "': ") + msg);
  }
  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& msg) const {
    fail(at.Mark(), key, msg);
  }

 private:
  std::string m_file;
};

/// How a node reads in a message: "nothing (null)", "a list", "a map" or the scalar in quotes.
std::string describe(const YAML::Node& n);

// "must be >= 0, got -3" for a range check on a scalar value.
std::string got_msg(const std::string& rule, const YAML::Node& n);

// One key of a checked map: its name, its dotted path for messages, and its key and value nodes (their marks).
struct Entry {
  std::string key, path;
  YAML::Node key_node, value;
};

// A YAML map whose keys are checked against an allowed list, with no key given twice.
class MapReader {
 public:
  MapReader(const Ctx& ctx, const YAML::Node& node, const std::string& path, std::vector<std::string> allowed)
      : m_ctx(ctx), m_node(node), m_path(path) {
    if (!node.IsMap()) ctx.fail(node, path, "expected a map with keys (" + join(allowed) + "), got " + describe(node));
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node k = it->first;
      if (!k.IsScalar()) ctx.fail(k, path, "map keys must be plain names, got " + describe(k));
      const std::string key = k.Scalar(), sub = path.empty() ? key : path + "." + key;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        ctx.fail(k, sub, "unknown key (allowed: " + join(allowed) + ")");
      if (!seen.insert(key).second) ctx.fail(k, sub, "given twice");
      m_entries.push_back({key, sub, k, it->second});
    }
  }

  const Entry* get(const std::string& key) const {
    for (const auto& e : m_entries)
      if (e.key == key) return &e;
    return nullptr;
  }
  const Entry& require(const std::string& key) const {
    if (const Entry* e = get(key)) return *e;
    m_ctx.fail(m_node, m_path.empty() ? key : m_path + "." + key, "required key is missing");
  }
  const std::vector<Entry>& entries() const { return m_entries; }
  const YAML::Node& node() const { return m_node; }

 private:
  const Ctx& m_ctx;
  YAML::Node m_node;
  std::string m_path;
  std::vector<Entry> m_entries;
};

// ---- scalars: each fails at `n`, naming `path`, unless it is a scalar of the kind asked for ---------------------
/// The scalar's text; `what` ("an integer") completes "expected ..., got ..." when `n` is a list, map or null.
const std::string& scalar(const Ctx& ctx, const YAML::Node& n, const std::string& path, const char* what);
std::string to_string_value(const Ctx& ctx, const YAML::Node& n, const std::string& path);
/// Decimal, an optional leading '+'; out of the 64-bit range is an error.
std::int64_t to_int(const Ctx& ctx, const YAML::Node& n, const std::string& path);
std::uint64_t to_uint(const Ctx& ctx, const YAML::Node& n, const std::string& path);
/// to_int, and within int's range.
int to_int32(const Ctx& ctx, const YAML::Node& n, const std::string& path);
/// A finite number (strtod syntax).
double to_double(const Ctx& ctx, const YAML::Node& n, const std::string& path);
/// true / yes / on and false / no / off in any case; nullopt otherwise (no error: callers decide).
std::optional<bool> parse_bool(std::string s);
bool to_bool(const Ctx& ctx, const YAML::Node& n, const std::string& path);

// A scalar or a non-empty list of scalars, as (node, path) pairs for the caller to convert.
std::vector<std::pair<YAML::Node, std::string>> one_or_list(const Ctx& ctx, const YAML::Node& n, const std::string& path);

/// A range-checked setting: key `key` of `r`, if given, read by `read` (to_int, to_int32, to_double) into `out`;
/// `ok(out)` false fails at the value with got_msg(rule) ("must be >= 0, got -3"). Absent, `out` keeps its default.
template <class T, class Ok>
void read_checked(const Ctx& ctx, const MapReader& r, const char* key, T& out,
                  T (*read)(const Ctx&, const YAML::Node&, const std::string&), Ok ok, const char* rule) {
  if (const Entry* e = r.get(key)) {
    out = read(ctx, e->value, e->path);
    if (!ok(out)) ctx.fail(e->value, e->path, got_msg(rule, e->value));
  }
}

}  // namespace flashtune::experiment::detail
