// harness/cli/peers.hpp: `flashtune peers`: other libraries' attention (PyTorch SDPA backends, FlexAttention,
// FlashAttention-4) measured on an experiment's attention problems by the Python module flashtune.peers
// (python/flashtune/peers.py), recorded as peer measurements (db peer_trials, never exportable), and the table
// that sets them beside flashtune's best (`query peers`; grade, report and the course CSV use the same join).
//
// The job the CLI writes and the result it reads are JSON (python/README.md "Peers"): the job names the problems
// (index, key, dims, dtype, passes), the peers, the experiment's measure settings and a seed; the result gives the
// GPU, the libraries' versions and one entry per (problem index, peer, pass): status, reason, library, seed,
// timing (samples and their statistics), validation (of the worst-checked output) and device bytes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "harness/cli/results.hpp"
#include "harness/cli/table.hpp"
#include "harness/core/types.hpp"

namespace flashtune::experiment {
struct Experiment;
}

namespace flashtune::cli {

/// One attention problem of an experiment and the passes its studies tune: "fwd" when attn_fwd, attn_naive or
/// attn_eager has it, "bwd" when an attn_bwd_* stage has it.
struct PeerProblem {
  core::Problem problem;
  std::vector<std::string> passes;
};
/// The experiment's attention problems, deduplicated by key, in file order; empty when it has none.
std::vector<PeerProblem> attention_problems(const experiment::Experiment& exp);

/// One measurement of a job: (problem index, peer, pass).
struct PeerItem {
  std::int64_t index = 0;
  std::string peer, pass;
  auto operator<=>(const PeerItem&) const = default;
};

/// The job file's JSON. `peers` empty: every known peer. seed 0: a fresh seed per problem. `skip`: measurements not
/// to run (those an earlier child measured or died in).
nlohmann::json peers_job(const std::vector<PeerProblem>& problems, const std::vector<std::string>& peers,
                         const core::MeasureSettings& measure, std::uint64_t seed,
                         const std::vector<PeerItem>& skip = {});

/// What a result file says: the GPU and one record per entry (run_id, experiment_name and device_key left for the
/// caller to fill). TFLOP/s are computed here from the problem's visible pairs (DESIGN.md). Throws core::UserError
/// naming `source` and the entry when the JSON does not follow the contract (an index out of range, a missing
/// field, an unknown pass or status).
struct PeerResults {
  std::string gpu_name, gpu_uuid, cuda_version, libraries;  ///< libraries: "torch 2.11.0, triton 3.6.0, ..."
  std::vector<db::PeerRecord> records;
  std::vector<PeerItem> items;         ///< records[i]'s measurement
  std::optional<PeerItem> in_flight;   ///< the measurement under way when the file was last written, if any
};
PeerResults parse_peer_results(const nlohmann::json& result, const std::vector<PeerProblem>& problems,
                               const std::string& source);

/// [TFLOP/s] of a pass ("fwd": 4 * head_dim per visible pair per query head; "bwd": 2.5x) done in `ms`; the dims
/// `problem` leaves out take their defaults (kernels::attn::complete_problem).
double attention_tflops(core::Problem problem, const std::string& pass, double ms);

/// flashtune's best for the passes peers are measured on, per (problem key, gpu): the attn_fwd winner and the
/// backward's stage sum (backward_sum over the stage winners); each absent when not measured.
struct AttentionBest {
  core::Problem shape;  ///< the problem the key names
  std::optional<double> fwd_ms, bwd_ms;
  /// [MHz] the SM clock its trial recorded: the forward's, the backward's longest stage's (empty when not recorded).
  std::optional<double> fwd_mhz, bwd_mhz;
  /// Why there is no bwd_ms although backward stages were measured (which ones; a whole backward needs a way of
  /// attn_bwd_ways.hpp: e.g. attn_bwd_fused counts only beside attn_bwd_preprocess); empty otherwise.
  std::string bwd_missing;
};
std::map<std::pair<std::string, std::string>, AttentionBest> attention_best(const std::vector<TrialRow>& trials);

/// One row per peer measurement: problem, gpu, pass, peer, library, status, peer_ms, flashtune_ms, speedup
/// (peer_ms / flashtune_ms: > 1 means flashtune is faster), the two TFLOP/s, the peer's error and tolerance,
/// reason, the SM clocks the two ran at (the peer's samples; flashtune's trial, the backward's longest stage's).
/// Peers' latest measurement per (problem, gpu, pass, peer) counts.
Table peers_table(const std::vector<TrialRow>& trials, const std::vector<db::PeerRow>& peers);

/// `flashtune peers EXPERIMENT.yaml [options]`: args are the words after "peers". Exit statuses as run_cli's.
int cmd_peers(const std::vector<std::string>& args, const std::string& command_line);

}  // namespace flashtune::cli
