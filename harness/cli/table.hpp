// harness/cli/table.hpp: prints a result set as an aligned terminal table, CSV (RFC 4180 quoting) or JSON.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace flashtune::cli {

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

enum class Format { table, csv, json };
Format parse_format(const std::string& s);  ///< throws core::UserError for anything but table/csv/json

void print_table(std::ostream& out, const Table& t, Format f);

}  // namespace flashtune::cli
