// harness/cli/main.cpp: the flashtune binary. All work is in cli::run_cli (commands.cpp).
#include "harness/cli/commands.hpp"

int main(int argc, char** argv) { return flashtune::cli::run_cli(argc, argv); }
