// harness/cli/table.cpp: terminal table, CSV and JSON printers for query results.
#include "harness/cli/table.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "harness/core/types.hpp"

namespace flashtune::cli {

Format parse_format(const std::string& s) {
  if (s == "table") return Format::table;
  if (s == "csv") return Format::csv;
  if (s == "json") return Format::json;
  throw core::UserError("unknown --format '" + s + "' (table, csv or json)");
}

namespace {
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + '"';
}

// A JSON value for a cell: numbers stay numbers, everything else is a string.
nlohmann::json json_cell(const std::string& v) {
  if (v.empty()) return nullptr;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end && *end == '\0' && v.find_first_not_of("0123456789.eE+-") == std::string::npos) {
    if (v.find_first_of(".eE") == std::string::npos) return std::stoll(v);
    return d;
  }
  return v;
}
}  // namespace

void print_table(std::ostream& out, const Table& t, Format f) {
  if (f == Format::csv) {
    for (std::size_t i = 0; i < t.columns.size(); ++i) out << (i ? "," : "") << csv_field(t.columns[i]);
    out << '\n';
    for (const auto& row : t.rows) {
      for (std::size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << csv_field(row[i]);
      out << '\n';
    }
    return;
  }
  if (f == Format::json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& row : t.rows) {
      nlohmann::json o = nlohmann::json::object();
      for (std::size_t i = 0; i < t.columns.size() && i < row.size(); ++i) o[t.columns[i]] = json_cell(row[i]);
      arr.push_back(std::move(o));
    }
    out << arr.dump(2) << '\n';
    return;
  }
  std::vector<std::size_t> width(t.columns.size());
  for (std::size_t i = 0; i < t.columns.size(); ++i) width[i] = t.columns[i].size();
  for (const auto& row : t.rows)
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], std::min<std::size_t>(row[i].size(), 60));
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < width.size(); ++i) {
      std::string c = i < cells.size() ? cells[i] : "";
      if (c.size() > 60) c = c.substr(0, 57) + "...";
      out << (i ? "  " : "") << c << std::string(width[i] - c.size(), ' ');
    }
    out << '\n';
  };
  line(t.columns);
  std::vector<std::string> rule;
  for (auto w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& row : t.rows) line(row);
  out << "(" << t.rows.size() << " row" << (t.rows.size() == 1 ? "" : "s") << ")\n";
}

}  // namespace flashtune::cli
