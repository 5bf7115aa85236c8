// db/owner.cpp: process identity and liveness from /proc (db/owner.hpp).
#include "db/owner.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace flashtune::db {

namespace {

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("unknown");
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// "BOOT_ID/TICKS" of a live process, or "" when there is no such process or it has ended and waits to be
// reaped (state Z or X: a process killed with -9 whose parent has not waited for it yet). The command name
// (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
std::string start_of(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return "";
    if (i == 22) return boot_id() + "/" + field;
  }
  return "";
}

}  // namespace

ProcessOwner this_process() {
  const std::int64_t pid = ::getpid();
  return {host_name(), pid, start_of(pid)};
}

Liveness liveness(const ProcessOwner& owner) {
  if (owner.pid <= 0 || owner.start.empty() || owner.host != host_name()) return Liveness::unknown;
  const std::string now = start_of(owner.pid);
  return now == owner.start ? Liveness::alive : Liveness::gone;
}

}  // namespace flashtune::db
