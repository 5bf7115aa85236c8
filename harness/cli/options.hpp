// harness/cli/options.hpp: what every subcommand's option parsing shares (Boost.Program_options): the default
// database and the parse that prints help with examples. Private to harness/cli.
#pragma once

#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace flashtune::cli {

inline constexpr const char* kDefaultDb = "db/flashtune.sqlite";

/// Parses a subcommand's options (adding --help); prints the usage, the options and `examples` and returns false when
/// --help was given. Throws boost::program_options::error on a bad option (run_cli reports it in one line).
inline bool parse(const std::vector<std::string>& args, boost::program_options::options_description& opts,
                  const boost::program_options::positional_options_description& pos,
                  boost::program_options::variables_map& vm, const std::string& usage, const std::string& examples) {
  namespace po = boost::program_options;
  opts.add_options()("help,h", "show this help");
  po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: " << usage << "\n\n" << opts << "\nexamples:\n" << examples;
    return false;
  }
  po::notify(vm);
  return true;
}

}  // namespace flashtune::cli
