// harness/cli/commands.hpp: the flashtune subcommands (run, devices, kernels in commands.cpp; query, export, grade,
// report, db in result_commands.cpp; replay; peers in peers.hpp).
#pragma once

#include <string>
#include <vector>

namespace flashtune::cli {

/// Parses argv, runs one subcommand. Returns the exit status: 0 success, 2 a user's mistake (one line on
/// stderr naming it), 1 any other failure.
int run_cli(int argc, char** argv);

/// `flashtune replay ...` (replay.cpp): args are the words after "replay". Same exit statuses, and 1
/// when --bar was asked and not met.
int cmd_replay(const std::vector<std::string>& args);

// The results commands (result_commands.cpp): args are the words after the command's name; errors are thrown for
// run_cli to report. grade returns 1 when a test case failed; the others 0.
int cmd_query(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_grade(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_db(const std::vector<std::string>& args);

}  // namespace flashtune::cli
