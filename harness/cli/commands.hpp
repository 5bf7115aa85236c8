// harness/cli/commands.hpp: the flashtune subcommands (run, devices, kernels, query, export).
#pragma once

namespace flashtune::cli {

/// Parses argv, runs one subcommand. Returns the exit status: 0 success, 2 a user's mistake (one line on
/// stderr naming it), 1 any other failure.
int run_cli(int argc, char** argv);

}  // namespace flashtune::cli
