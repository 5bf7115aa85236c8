// harness/runner/shard.hpp: which share of an experiment's work this process does (`run --shard I/N`),
// or the share an MPI launcher or a Slurm job gave it through the environment. No cluster code of our
// own: the launcher starts the processes, each takes its deterministic share, `db merge` joins them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace flashtune::runner {

// Shard `index` of `count` (0 <= index < count). Work units are numbered in the experiment's order
// (studies, then problems, then configs in enumeration order); unit u belongs to shard u mod count.
struct Shard {
  int index = 0;
  int count = 1;
  std::string source;  ///< where it came from ("--shard", "OMPI_COMM_WORLD_RANK/SIZE", ...); empty: none

  bool sharded() const { return count > 1; }
  bool owns(std::int64_t unit) const { return count <= 1 || unit % count == index; }
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
};

/// Parses "I/N" (0 <= I < N). Throws core::UserError naming `what` and the text when malformed.
Shard parse_shard(const std::string& text, const std::string& what = "--shard");

/// The shard the environment names, through `getenv` (injectable for tests), first found wins:
///   Open MPI     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
///   PMI (MPICH, Intel MPI, srun --mpi=pmi2)   PMI_RANK, PMI_SIZE
///   Slurm array  SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_COUNT, or with SLURM_ARRAY_TASK_MIN/MAX
///                (and SLURM_ARRAY_TASK_STEP); an array task that runs several tasks (srun, SLURM_NTASKS
///                > 1) is split further by SLURM_PROCID
///   Slurm tasks  SLURM_PROCID, SLURM_NTASKS
/// None of them: shard 0/1 (everything). Throws core::UserError naming the variable when one is malformed.
Shard shard_from_environment(const std::function<const char*(const char*)>& getenv);

}  // namespace flashtune::runner
