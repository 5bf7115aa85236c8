// tests/command.hpp: runs a shell command and captures its standard output and exit status, for the tests
// that drive the flashtune binary (or mpirun around it) end to end.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace ft_test {

struct CommandResult {
  int status;       // exit status; -1 when the command could not start or did not exit normally
  std::string out;  // standard output (and standard error where the command redirects it there)
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r{-1, {}};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

/// run_command with standard error joined to standard output (what a user would see).
inline CommandResult run_with_stderr(const std::string& cmd) { return run_command(cmd + " 2>&1"); }

/// The flashtune binary of this build.
inline std::string flashtune_binary() { return std::string(FT_BINARY_DIR) + "/harness/cli/flashtune"; }

}  // namespace ft_test
