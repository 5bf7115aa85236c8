// harness/cli/commands.hpp: the flashtune subcommands (run, devices, kernels, query, export, replay; peers in peers.hpp).
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

}  // namespace flashtune::cli
