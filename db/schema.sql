-- db/schema.sql: the flashtune database, current schema (PRAGMA user_version = 7), documented.
-- This file is documentation and a check: a database is built by applying db/migrations/NNN_*.sql in
-- order (Store does this on open, in one transaction), and tests/db/store_test.cpp checks that the
-- migrated tables, columns and indexes equal those made by running this file. Edit both together.
-- Conventions: times are ISO-8601 UTC text with milliseconds ("2025-01-31T12:00:00.123Z"); booleans
-- are INTEGER 0/1; NULL means "not measured / unknown"; units are in brackets. Keys are text
-- (problems and configs are identified by (family, key), runs by uid) so databases can be merged.

-- One invocation of an experiment (flashtune run / compile), and the machine it ran on.
CREATE TABLE runs (
  id              INTEGER PRIMARY KEY,   -- local row id (not stable across merges: use uid)
  experiment_name TEXT    NOT NULL,      -- `name:` of the experiment YAML
  experiment_path TEXT    NOT NULL DEFAULT '',  -- path of the YAML as given on the command line
  experiment_hash TEXT    NOT NULL DEFAULT '',  -- hash of the YAML text (16 hex digits)
  command_line    TEXT    NOT NULL DEFAULT '',  -- argv joined with spaces
  host            TEXT    NOT NULL DEFAULT '',  -- machine host name
  gpu_name        TEXT    NOT NULL DEFAULT '',  -- "NVIDIA H100 80GB HBM3"; '' for compile-only runs
  gpu_arch        TEXT    NOT NULL DEFAULT '',  -- NVRTC target, "sm_90a"
  gpu_uuid        TEXT    NOT NULL DEFAULT '',  -- "GPU-xxxxxxxx-..."; '' when no GPU
  driver_version  TEXT    NOT NULL DEFAULT '',  -- CUDA driver version, "12.8" ('' when no driver)
  cuda_version    TEXT    NOT NULL DEFAULT '',  -- CUDA toolkit version the harness was built with
  nvrtc_version   TEXT    NOT NULL DEFAULT '',  -- NVRTC version loaded at run time, "13.0"
  project_commit  TEXT    NOT NULL DEFAULT '',  -- git commit of flashtune (with "-dirty" if modified)
  device_key      TEXT    NOT NULL DEFAULT '',  -- what makes timings comparable (GPU name + arch + clocks...)
  compile_only    INTEGER NOT NULL DEFAULT 0,   -- 1: no GPU, trials only compiled (status 'compiled')
  copy_gbps       REAL,                  -- [GB/s] measured device-to-device copy bandwidth; NULL unknown
  started_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),  -- [UTC]
  finished_at     TEXT,                  -- [UTC] NULL while running or when killed
  status          TEXT    NOT NULL DEFAULT 'running',  -- running | finished | failed | interrupted | crashed
  uid             TEXT,                  -- (v2) 32 hex digits, random, unique: identity across merges
  owner_host      TEXT,                  -- (v4) host of the process that wrote the run; NULL before v4
  owner_pid       INTEGER,               -- (v4) its pid
  owner_start     TEXT                   -- (v4) "BOOT_ID/TICKS": its boot and start time (a reused pid differs);
                                         --      a 'running' run whose owner is gone on this host becomes 'interrupted'
);
CREATE UNIQUE INDEX runs_by_uid ON runs (uid);

-- One shape of work of one family. json = {"dims": {"rows": 4096, ...}, "dtype": "f16"}.
CREATE TABLE problems (
  id     INTEGER PRIMARY KEY,
  family TEXT NOT NULL,          -- kernel family name, "weighted_row_sum"
  key    TEXT NOT NULL,          -- core::Problem::key(), "cols=4096,rows=16384,dtype=f32" (dtype included)
  json   TEXT NOT NULL,          -- dims and dtype as JSON (for queries with json_extract)
  UNIQUE (family, key)
);

-- One point of a family's search space. json = {"block_m": 128, "num_warps": 4, ...}.
CREATE TABLE configs (
  id     INTEGER PRIMARY KEY,
  family TEXT NOT NULL,          -- kernel family name
  key    TEXT NOT NULL,          -- core::Config::key(), "block=256,vec=4"
  hash   TEXT NOT NULL,          -- core::hash_hex(key), 16 hex digits
  json   TEXT NOT NULL,          -- the tunables as a JSON object
  UNIQUE (family, key)
);

-- One NVRTC compile (or its cubin-cache entry), shared by every trial that used the same cubin.
CREATE TABLE compiles (
  id                  INTEGER PRIMARY KEY,
  cache_key           TEXT    NOT NULL UNIQUE,  -- hash of source, options, arch, NVRTC version, name expr.
  family              TEXT    NOT NULL,         -- kernel family name
  arch                TEXT    NOT NULL,         -- "sm_90a"
  options             TEXT    NOT NULL DEFAULT '',  -- NVRTC options, space separated
  nvrtc_version       TEXT    NOT NULL DEFAULT '',  -- "13.0"
  source_hash         TEXT    NOT NULL DEFAULT '',  -- hash of the template text (16 hex digits)
  lowered_name        TEXT    NOT NULL DEFAULT '',  -- mangled name of the instantiation
  ok                  INTEGER NOT NULL,         -- 1: a cubin was produced
  log                 TEXT    NOT NULL DEFAULT '',  -- NVRTC log including the ptxas report
  registers           INTEGER,                  -- per thread; NULL unknown
  spill_store_bytes   INTEGER,                  -- [bytes] per thread; NULL unknown
  spill_load_bytes    INTEGER,                  -- [bytes] per thread; NULL unknown
  stack_frame_bytes   INTEGER,                  -- [bytes] per thread; NULL unknown
  shared_static_bytes INTEGER,                  -- [bytes] static __shared__ per block; NULL unknown
  cubin_bytes         INTEGER NOT NULL DEFAULT 0,   -- [bytes] size of the cubin (0 when failed)
  compile_ms          REAL    NOT NULL DEFAULT 0,   -- [ms] wall time of the NVRTC call
  created_at          TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),  -- [UTC]
  name_expression     TEXT    NOT NULL DEFAULT '',  -- (v2) "weighted_row_sum_kernel<float, 256, 4>"
  constant_bytes      INTEGER                   -- (v2) [bytes] constant memory; NULL unknown
);

-- One config on one problem on one device: compile, validation, measurement and status.
-- Committed the moment it is recorded; a re-run skips a trial found by trials_for_resume.
CREATE TABLE trials (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs (id),
  experiment_name TEXT    NOT NULL,      -- copied from the run: part of the resume key
  family          TEXT    NOT NULL,      -- kernel family name
  stage           TEXT    NOT NULL,      -- role in the operation: "fwd", "bwd_dkdv", ...
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  config_id       INTEGER NOT NULL REFERENCES configs (id),
  source_hash     TEXT    NOT NULL,      -- hash of the kernel template text: an edit invalidates old trials
  device_key      TEXT    NOT NULL,      -- as runs.device_key: trials on other devices are not reused
  status          TEXT    NOT NULL,      -- core::TrialStatus: ok | compiled | invalid_config | ...
  reason          TEXT    NOT NULL DEFAULT '',  -- why it is not ok ('' when ok)
  compile_id      INTEGER REFERENCES compiles (id),  -- NULL when nothing was compiled
  seed            INTEGER NOT NULL DEFAULT 0,  -- input RNG seed (uint64 stored as its int64 bit pattern)
  median_ms       REAL,                  -- [ms] median of the samples; NULL when not measured
  iqr_ms          REAL,                  -- [ms] interquartile range of the samples
  min_ms          REAL,                  -- [ms]
  max_ms          REAL,                  -- [ms]
  mean_ms         REAL,                  -- [ms]
  rel_stdev       REAL,                  -- stdev / mean of the samples
  converged       INTEGER,               -- 1: noise target reached before the budget ran out
  cold            INTEGER,               -- 1: L2 flushed before each sample
  n_samples       INTEGER,               -- number of samples
  samples_json    TEXT,                  -- [ms] every sample in order, JSON array
  gbps            REAL,                  -- [GB/s] family bytes / median time
  tflops          REAL,                  -- [TFLOP/s] family flops / median time
  max_abs_err     REAL,                  -- max |out - ref64|; NULL when not validated
  max_rel_err     REAL,                  -- max |out - ref64| / max(|ref64|, tiny)
  naive_err       REAL,                  -- max |naive same precision - ref64|
  tolerance       REAL,                  -- pass bound: 2 * naive_err + atol
  nan_count       INTEGER,               -- NaN or Inf elements in the output
  created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),  -- [UTC]
  stopped_early   INTEGER,               -- (v2) 1: measurement abandoned against an incumbent
  device_bytes    INTEGER,               -- (v3) [bytes] device memory allocated: inputs, outputs, workspaces
  sm_clock_mhz    REAL,                  -- (v7) [MHz] mean SM clock while the samples ran (NVML); NULL unknown
  power_capped    REAL                   -- (v7) fraction [0, 1] of those clock polls with the power cap active
);
CREATE INDEX trials_by_run ON trials (run_id);
CREATE INDEX trials_for_resume
  ON trials (experiment_name, stage, family, problem_id, config_id, source_hash, device_key);

-- (v4) A trial taken by a run before it ran: at most one claim per resume key (the unique index), so two
-- processes running the same experiment into one database never run and record one trial twice. A
-- claim whose run is no longer running (finished, failed, interrupted, or its owner gone) is taken over.
CREATE TABLE trial_claims (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs (id),  -- the run that claimed it
  experiment_name TEXT    NOT NULL,      -- the resume key, as trials but with problem and config keys
  stage           TEXT    NOT NULL,
  family          TEXT    NOT NULL,
  problem_key     TEXT    NOT NULL,      -- core::Problem::key()
  config_key      TEXT    NOT NULL,      -- core::Config::key()
  source_hash     TEXT    NOT NULL,
  device_key      TEXT    NOT NULL,
  claimed_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))  -- [UTC]
);
CREATE UNIQUE INDEX trial_claims_by_key
  ON trial_claims (experiment_name, stage, family, problem_key, config_key, source_hash, device_key);

-- (v5) A search warm-started from the database (tuner/warm_start.hpp): per (run, family, stage, problem), the
-- measured problems it drew on and the configs it proposed first. Absent when a search started cold (no
-- history of the same family, stage and GPU, `run --no-warm-start`, or a sharded exhaustive / random study).
-- A learning search without history that began from the analytic cost model (harness/kernels/cost_model.hpp;
-- `run --no-prior` turns it off) is recorded here too, its sources [{"model": name}].
CREATE TABLE warm_starts (
  id          INTEGER PRIMARY KEY,
  run_id      INTEGER NOT NULL REFERENCES runs (id),
  family      TEXT    NOT NULL,
  stage       TEXT    NOT NULL,
  problem_key TEXT    NOT NULL,      -- core::Problem::key() of the warm-started problem
  sources     TEXT    NOT NULL,      -- JSON [{"problem": key, "distance": d, "weight": w, "best": config key}], nearest first
  first       TEXT    NOT NULL,      -- JSON [config key, ...]: proposed before the strategy's own (exhaustive: its order's head)
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))  -- [UTC]
);
CREATE INDEX warm_starts_by_run ON warm_starts (run_id);

-- (v6) A peer (another library's attention) measured by `flashtune peers` on an experiment's attention problem, with
-- flashtune's timing method (warm-up, L2 flush per sample, events, median) and validated by the same pass rule on a
-- sample of (batch, kv head) groups. Its own table, never read by resume, best, export or warm start: a peer can
-- never become an exported config. Shown beside flashtune's best by `query peers`, grade, report and the course CSV.
CREATE TABLE peer_trials (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs (id),  -- the `flashtune peers` run (its gpu and device_key)
  experiment_name TEXT    NOT NULL,      -- the experiment whose problems were measured
  peer            TEXT    NOT NULL,      -- sdpa_flash | sdpa_cudnn | sdpa_efficient | flex | fa4
  library         TEXT    NOT NULL DEFAULT '',  -- what ran, with versions: "torch 2.11.0+cu130 cuDNN 91900"
  pass            TEXT    NOT NULL,      -- fwd (O from Q, K, V) | bwd (dQ, dK, dV [, dsinks] from one saved forward)
  problem_id      INTEGER NOT NULL REFERENCES problems (id),  -- the attention problem, family 'attn_fwd'
  device_key      TEXT    NOT NULL,      -- as trials.device_key (GPU name): compared only with trials of the same
  status          TEXT    NOT NULL,      -- ok | unsupported | wrong_result | error
  reason          TEXT    NOT NULL DEFAULT '',  -- why it is not ok ('' when ok)
  seed            INTEGER NOT NULL DEFAULT 0,   -- input RNG seed (torch's)
  median_ms       REAL,                  -- [ms] as trials; NULL when not measured
  iqr_ms          REAL,                  -- [ms]
  min_ms          REAL,                  -- [ms]
  max_ms          REAL,                  -- [ms]
  mean_ms         REAL,                  -- [ms]
  rel_stdev       REAL,                  -- stdev / mean of the samples
  converged       INTEGER,               -- 1: noise target reached before the budget ran out
  cold            INTEGER,               -- 1: L2 flushed before each sample
  n_samples       INTEGER,
  samples_json    TEXT,                  -- [ms] every sample in order, JSON array
  tflops          REAL,                  -- [TFLOP/s] visible-pair FLOPs (DESIGN.md; bwd 2.5x fwd) / median time
  max_abs_err     REAL,                  -- of the worst-checked output (checked_output) against the float64 reference
  max_rel_err     REAL,
  naive_err       REAL,                  -- max |naive same precision - ref64|
  tolerance       REAL,                  -- 2 * naive_err + atol
  nan_count       INTEGER,               -- NaN or Inf elements in the peer's output
  checked_output  TEXT    NOT NULL DEFAULT '',  -- o | dq | dk | dv | dsinks: the output the error numbers are of
  device_bytes    INTEGER,               -- [bytes] device memory the timed call allocated beyond its inputs
  created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),  -- [UTC]
  sm_clock_mhz    REAL,                  -- (v7) [MHz] mean SM clock while the samples ran (NVML); NULL unknown
  power_capped    REAL                   -- (v7) fraction [0, 1] of those clock polls with the power cap active
);
CREATE INDEX peer_trials_by_run ON peer_trials (run_id);
