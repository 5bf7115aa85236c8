// db/owner.hpp: who owns a run (host, pid and the process's start) and whether that process still lives,
// so a run whose process was killed (SIGKILL, OOM, a power cut) is not shown as `running` forever.
// Linux /proc only; std only (no SQLite here).
#pragma once

#include <cstdint>
#include <string>

namespace flashtune::db {

// One process, told apart from a later one that reuses its pid: `start` is the boot id and the
// process's start time since boot [clock ticks] (/proc/PID/stat field 22), "BOOT_ID/TICKS".
struct ProcessOwner {
  std::string host;
  std::int64_t pid = 0;
  std::string start;
};

/// This process.
ProcessOwner this_process();

enum class Liveness { alive, gone, unknown };
/// alive: the process runs on this host (same pid, same start). gone: it ran on this host and no longer
/// does (no such pid, or the pid now belongs to a later process or boot). unknown: another host, or no
/// owner recorded (runs from before schema v4).
Liveness liveness(const ProcessOwner& owner);

}  // namespace flashtune::db
