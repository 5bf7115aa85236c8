// harness/experiment/yaml_reader.cpp: the located YAML checks of yaml_reader.hpp (message texts, scalar parsing).
#include "harness/experiment/yaml_reader.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace flashtune::experiment::detail {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    default: return "an undefined value";
  }
}

std::string got_msg(const std::string& rule, const YAML::Node& n) { return rule + ", got " + n.Scalar(); }

const std::string& scalar(const Ctx& ctx, const YAML::Node& n, const std::string& path, const char* what) {
  if (!n.IsScalar()) ctx.fail(n, path, std::string("expected ") + what + ", got " + describe(n));
  return n.Scalar();
}

std::string to_string_value(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  return scalar(ctx, n, path, "a string");
}

std::int64_t to_int(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::string& s = scalar(ctx, n, path, "an integer");
  std::int64_t v = 0;
  const char* b = s.data() + (s.size() > 1 && s[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) ctx.fail(n, path, "integer '" + s + "' is out of range");
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    ctx.fail(n, path, "expected an integer, got " + describe(n));
  return v;
}

std::uint64_t to_uint(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::string& s = scalar(ctx, n, path, "a non-negative integer");
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    ctx.fail(n, path, "expected a non-negative integer, got " + describe(n));
  return v;
}

int to_int32(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::int64_t v = to_int(ctx, n, path);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    ctx.fail(n, path, "integer " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

double to_double(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  const std::string& s = scalar(ctx, n, path, "a number");
  char* end = nullptr;
  const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    ctx.fail(n, path, "expected a number, got " + describe(n));
  return v;
}

std::optional<bool> parse_bool(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  return std::nullopt;
}

bool to_bool(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  auto b = parse_bool(scalar(ctx, n, path, "true or false"));
  if (!b) ctx.fail(n, path, "expected true or false, got " + describe(n));
  return *b;
}

std::vector<std::pair<YAML::Node, std::string>> one_or_list(const Ctx& ctx, const YAML::Node& n, const std::string& path) {
  std::vector<std::pair<YAML::Node, std::string>> out;
  if (n.IsSequence()) {
    if (n.size() == 0) ctx.fail(n, path, "empty list of values");
    for (std::size_t i = 0; i < n.size(); ++i) out.emplace_back(n[i], path + "[" + std::to_string(i) + "]");
  } else if (n.IsScalar()) {
    out.emplace_back(n, path);
  } else {
    ctx.fail(n, path, "expected a value or a list of values, got " + describe(n));
  }
  return out;
}

}  // namespace flashtune::experiment::detail
