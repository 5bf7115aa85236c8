// db/store.hpp: the SQLite store of runs, problems, configs, compiles and trials (schema: db/schema.sql).
// Every trial is committed when record_trial returns, so a killed run loses nothing and resumes through
// find_trial. The only public door to SQLite: sqlite3.h stays inside db/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/rows.hpp"
#include "harness/core/types.hpp"

namespace flashtune::db {

// A failed SQLite call: the SQLite result code, the call or SQL text, SQLite's message and file:line.
class StoreError : public core::Error {
 public:
  StoreError(int code, std::string call, const std::string& message, const char* file, int line);
  int code() const noexcept { return m_code; }                ///< SQLite (extended) result code
  const std::string& call() const noexcept { return m_call; } ///< the C call or the SQL that failed
  const std::string& file() const noexcept { return m_file; }
  int line() const noexcept { return m_line; }

 private:
  int m_code;
  std::string m_call;
  std::string m_file;
  int m_line;
};

// What identifies a run: the experiment and the machine. Empty strings are stored as ''.
struct RunInfo {
  std::string experiment_name, experiment_path, experiment_hash, command_line, host, gpu_name,
      gpu_arch, gpu_uuid, driver_version, cuda_version, nvrtc_version, project_commit, device_key;
  bool compile_only = false;
};

// One finished trial. problem/config are stored once per (family, key) and referenced.
struct TrialRecord {
  std::int64_t run_id = 0;  ///< from begin_run; must name an existing run
  std::string experiment_name, family, stage;
  core::Problem problem;
  core::Config config;
  std::string source_hash, device_key;
  std::uint64_t seed = 0;  ///< stored as its int64 bit pattern, read back exactly
  core::TrialResult result;
};

// One measurement of a peer (another library's attention) by `flashtune peers` (db/schema.sql peer_trials).
struct PeerRecord {
  std::int64_t run_id = 0;  ///< from begin_run; must name an existing run
  std::string experiment_name;
  std::string peer;         ///< sdpa_flash | sdpa_cudnn | sdpa_efficient | flex | fa4 (any [a-z0-9_]+ name)
  std::string library;      ///< what ran, with versions
  std::string pass;         ///< "fwd" | "bwd"
  core::Problem problem;    ///< the attention problem; stored under family attn_fwd
  std::string device_key;   ///< as TrialRecord's (the GPU name)
  std::string status;       ///< "ok" | "unsupported" | "wrong_result" | "error"
  std::string reason;       ///< why not ok ("" when ok)
  std::uint64_t seed = 0;
  std::optional<core::Timing> timing;
  std::optional<core::Validation> validation;  ///< of checked_output, the output with the worst error ratio
  std::string checked_output;                  ///< "o" | "dq" | "dk" | "dv" | "dsinks" | ""
  std::optional<double> tflops;                ///< [TFLOP/s] visible-pair FLOPs / median
  std::optional<std::int64_t> device_bytes;    ///< [bytes] allocated by the timed call
};

/// The problem a problems.json value describes ({"dims": {...}, "dtype": "bf16"}, as Store writes it). Throws
/// core::Error naming what is wrong when the text is not such an object.
core::Problem problem_from_json(const std::string& json);
/// The config a configs.json value describes ({"block_m": 64, ...}, as Store writes it). Throws core::Error naming
/// what is wrong when the text is not an object of integers.
core::Config config_from_json(const std::string& json);
/// problem_from_json and config_from_json for the typed rows: an unreadable value (a row written by hand; the Store
/// has written both since its first version) reads as the empty problem (no dims, f32) or config instead of throwing.
core::Problem read_problem_json(const std::string& json);
core::Config read_config_json(const std::string& json);
/// `text` as an SQL string literal ('it''s'), for the conditions given to Store::sql.
std::string sql_quote(const std::string& text);

// The result of Store::sql (the user's own SELECT) as text, ready to print as a table, CSV or JSON. SQL NULL is "".
struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

// What identifies a trial for resuming and claiming: a rerun skips a key already recorded.
struct ResumeKey {
  std::string experiment_name, stage, family, problem_key, config_key, source_hash, device_key;
};

// The answer of Store::claim_trial.
struct Claim {
  enum class Outcome {
    claimed,   ///< this run holds the key now: run the trial and record it
    recorded,  ///< a trial of this key is recorded already (`recorded` is the latest): skip it
    taken,     ///< another run that is still running holds it (`holder`): skip it
  };
  Outcome outcome = Outcome::claimed;
  std::optional<core::TrialResult> recorded;
  std::int64_t holder_run = 0;  ///< outcome taken: the run that holds the key
  std::string holder;           ///< outcome taken: "run 5 (pid 1234 on node17)"
};

// What Store::merge_from added to the database, and what it found there already.
struct MergeCounts {
  std::int64_t runs_added = 0, runs_known = 0;      ///< runs, by uid
  std::int64_t trials_added = 0, trials_known = 0;  ///< trials, by the resume key
  std::int64_t compiles_added = 0;                  ///< compiles, by cache key
  std::int64_t peer_trials_added = 0;               ///< peer measurements, by (run, peer, pass, problem)
};

// The database at one path. Opening it read-write (Access) creates the parent folders and the file, checks
// it (quick_check), switches to WAL, waits up to kBusyTimeoutMs for other processes' locks, migrates an
// older schema in one transaction and marks interrupted the runs whose process is gone; read-only opens
// write nothing. Two processes running one experiment into one file claim each trial (claim_trial).
// Durability: WAL with synchronous=NORMAL. A commit is in the WAL file (the OS page cache) when the
// call returns, so it survives the process being killed (SIGKILL, crash, OOM); only a power loss or OS
// crash may lose the last few commits, never corrupt the file. Lost trials are simply re-run on resume.
// Not thread-safe: use one Store per thread or process (several processes may share one file).
class Store {
 public:
  static constexpr int kBusyTimeoutMs = 30000;  ///< [ms] wait for another process's write lock

  enum class Access {
    /// Creates the file if missing; checks it (PRAGMA quick_check) before anything is written, switches to
    /// WAL, migrates an older schema, and marks `interrupted` the runs of this host whose process is gone.
    read_write,
    /// Never writes the file, its journal mode or its folder (a read-only mount, another user's file):
    /// the file must exist; an older schema is migrated in a private in-memory copy; a WAL database whose
    /// -shm cannot be created (a read-only mount) is read as immutable. Writing methods then fail.
    read_only,
  };

  /// Opens the database. Throws StoreError on SQLite failures (the message names the file),
  /// core::UserError when the file is not an SQLite database, is missing (read_only) or its schema is newer
  /// than this build knows (latest_version()), and core::Error naming the file when it is corrupt.
  explicit Store(const std::filesystem::path& path, Access access = Access::read_write);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;

  static int latest_version();           ///< schema version this build writes (number of migrations)
  static std::string_view schema_sql();  ///< the documented current schema (db/schema.sql), embedded
  int version() const;                   ///< PRAGMA user_version of the open file
  const std::filesystem::path& path() const noexcept { return m_path; }

  /// Inserts a run with status 'running', started_at = now and this process as its owner (owner.hpp);
  /// returns its id.
  std::int64_t begin_run(const RunInfo& info);
  /// Records the measured device-to-device copy bandwidth [GB/s] of the run's GPU.
  void set_copy_bandwidth(std::int64_t run_id, double gbps);
  /// Records that run `run_id` warm-started (family, stage, problem): `sources_json` and `first_json` as
  /// db/schema.sql's warm_starts describes them.
  void record_warm_start(std::int64_t run_id, const std::string& family, const std::string& stage,
                         const std::string& problem_key, const std::string& sources_json, const std::string& first_json);
  /// Sets finished_at = now and status: "finished" | "failed" | "interrupted" | "crashed" (a sticky CUDA
  /// error ended the process's GPU work; a new process resumes) (else throws core::Error).
  void finish_run(std::int64_t run_id, const std::string& status);

  /// Inserts or updates the compile with rec.cache_key (an empty key is derived from family, source
  /// hash, arch, options and name expression) and returns its id. A cache-hit record never overwrites
  /// the stored one (it carries no compile time). nvrtc_version is stored when not empty.
  std::int64_t record_compile(const core::CompileRecord& rec, const std::string& family,
                              const std::string& source_hash, const std::string& nvrtc_version = {});

  /// Inserts the trial, its problem and config (upserts) and its compile (linked), in one transaction;
  /// committed when it returns. The compile's NVRTC version is taken from the run. Returns the trial id.
  std::int64_t record_trial(const TrialRecord& trial);

  /// Inserts a peer measurement (and its problem, upserted under family attn_fwd), committed when it returns.
  /// Throws core::Error for a pass other than fwd / bwd or a status other than those PeerRecord names.
  std::int64_t record_peer_trial(const PeerRecord& rec);
  /// Peer measurements of one run (0: of every run) in id order, typed.
  std::vector<PeerRow> peer_trials(std::int64_t run_id = 0) const;

  /// The latest trial recorded for this resume key (arguments as find_trial), or nullopt when none: its
  /// status, reason, timing (every sample included; nullopt when not measured), GB/s and TFLOP/s, so a
  /// resumed run tells a learning strategy what was measured, not only that it was tried.
  std::optional<core::TrialResult> find_trial_result(const std::string& experiment_name,
                                                     const std::string& stage, const std::string& family,
                                                     const std::string& problem_key,
                                                     const std::string& config_key,
                                                     const std::string& source_hash,
                                                     const std::string& device_key) const;

  /// Takes `key` for run `run_id` before its trial runs, in one write transaction, so that of several
  /// processes running the same experiment into this file exactly one runs each trial: recorded when a
  /// trial of the key exists (its latest result returned), taken when another run still running holds a
  /// claim on it (its owner alive, or on another host), else claimed (a claim of a run that ended, or whose
  /// process is gone, is taken over).
  Claim claim_trial(std::int64_t run_id, const ResumeKey& key);

  /// Status of the latest trial recorded for this resume key, or nullopt when none.
  std::optional<core::TrialStatus> find_trial(const std::string& experiment_name,
                                              const std::string& stage, const std::string& family,
                                              const std::string& problem_key,
                                              const std::string& config_key,
                                              const std::string& source_hash,
                                              const std::string& device_key) const;

  /// Copies into this database what the flashtune database `source` holds and this one lacks: runs (by
  /// uid), problems and configs (by family and key), compiles (by cache key) and trials by the resume key
  /// of find_trial (experiment, stage, family, problem, config, source hash, device key; of several
  /// trials of one key in `source`, the latest), each linked to the merged run, problem, config and
  /// compile. One transaction; merging the same source again adds nothing. `source` is never written:
  /// it is read through a snapshot (SQLite's backup API into a temporary file, migrated there when its
  /// schema is older). Throws core::UserError (check_merge_source) before anything is written.
  MergeCounts merge_from(const std::filesystem::path& source);
  /// Why `source` cannot be merged, as core::UserError naming the file: it is missing, not an SQLite
  /// database, not a flashtune database, of a newer schema than this build, or this very database.
  /// Opens it read-only.
  void check_merge_source(const std::filesystem::path& source) const { check_merge_source(source, m_path); }
  /// The same for merging into `output`, which need not exist yet: check every input before creating it.
  static void check_merge_source(const std::filesystem::path& source, const std::filesystem::path& output);

  // Queries for the CLI, in typed rows (db/rows.hpp; db/queries.cpp): the CLI formats them.
  /// Every run in id order with its trial counts. A run recorded `running` whose owner process is gone (owner.hpp)
  /// shows as `interrupted` (a read-write open records that; a read-only one only shows it).
  std::vector<RunRow> runs() const;
  /// Every trial (run_id 0: of every run; family "": of every family) in id order, with its run (experiment, GPU,
  /// copy bandwidth) and its compile's resources. The REALs keep 16 significant digits: what the text layer before
  /// these rows handed the CLI (SQLite's printf('%.17g')), so that every output stays byte-identical to it.
  std::vector<TrialRow> trials(std::int64_t run_id = 0, const std::string& family_filter = "") const;
  /// Per (family, stage, problem key (includes dtype), GPU name): the trial with the lowest median (then the lowest
  /// id) among trials with status ok measured to the end (not stopped early), ordered by those keys; with the
  /// copy ratio and the group's count of such trials. family_filter: exact family name; empty: all families.
  std::vector<BestRow> best(const std::string& family_filter = "") const;
  /// The history a warm start learns from (harness/runner/search_start.hpp): every trial of `family` and `stage` on
  /// `device_key` (any experiment, any kernel source) whose problem is not `excluding_problem_key`, except those only
  /// compiled, in id order (a config's latest trial last). Each median is the value Store::sql's text gave the warm
  /// start before these rows (15 significant digits; db/queries.cpp), so warm starts order configs as they did.
  std::vector<HistoryTrialRow> history_trials(const std::string& family, const std::string& stage,
                                              const std::string& device_key,
                                              const std::string& excluding_problem_key) const;
  /// Runs one read-only statement (SELECT, WITH ... SELECT, EXPLAIN, or a PRAGMA that only reads).
  /// Anything that could write (INSERT, UPDATE, DELETE, DROP, CREATE, ATTACH, BEGIN, PRAGMA x = y),
  /// or more than one statement, is refused with core::UserError before it runs.
  QueryResult sql(const std::string& select) const;

 private:
  void open_read_only();
  struct Impl;
  std::filesystem::path m_path;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace flashtune::db
