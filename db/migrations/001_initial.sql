-- db/migrations/001_initial.sql: schema version 1, the first flashtune database layout.
-- Never edit a released migration: change the schema with a new numbered file and keep db/schema.sql
-- (the documented current schema) in step; tests/db/store_test.cpp checks that the two agree.
-- Times are ISO-8601 UTC text with milliseconds ("2025-01-31T12:00:00.123Z").

CREATE TABLE runs (
  id              INTEGER PRIMARY KEY,
  experiment_name TEXT    NOT NULL,
  experiment_path TEXT    NOT NULL DEFAULT '',
  experiment_hash TEXT    NOT NULL DEFAULT '',
  command_line    TEXT    NOT NULL DEFAULT '',
  host            TEXT    NOT NULL DEFAULT '',
  gpu_name        TEXT    NOT NULL DEFAULT '',
  gpu_arch        TEXT    NOT NULL DEFAULT '',
  gpu_uuid        TEXT    NOT NULL DEFAULT '',
  driver_version  TEXT    NOT NULL DEFAULT '',
  cuda_version    TEXT    NOT NULL DEFAULT '',
  nvrtc_version   TEXT    NOT NULL DEFAULT '',
  project_commit  TEXT    NOT NULL DEFAULT '',
  device_key      TEXT    NOT NULL DEFAULT '',
  compile_only    INTEGER NOT NULL DEFAULT 0,
  copy_gbps       REAL,
  started_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  finished_at     TEXT,
  status          TEXT    NOT NULL DEFAULT 'running'
);

CREATE TABLE problems (
  id     INTEGER PRIMARY KEY,
  family TEXT NOT NULL,
  key    TEXT NOT NULL,
  json   TEXT NOT NULL,
  UNIQUE (family, key)
);

CREATE TABLE configs (
  id     INTEGER PRIMARY KEY,
  family TEXT NOT NULL,
  key    TEXT NOT NULL,
  hash   TEXT NOT NULL,
  json   TEXT NOT NULL,
  UNIQUE (family, key)
);

CREATE TABLE compiles (
  id                  INTEGER PRIMARY KEY,
  cache_key           TEXT    NOT NULL UNIQUE,
  family              TEXT    NOT NULL,
  arch                TEXT    NOT NULL,
  options             TEXT    NOT NULL DEFAULT '',
  nvrtc_version       TEXT    NOT NULL DEFAULT '',
  source_hash         TEXT    NOT NULL DEFAULT '',
  lowered_name        TEXT    NOT NULL DEFAULT '',
  ok                  INTEGER NOT NULL,
  log                 TEXT    NOT NULL DEFAULT '',
  registers           INTEGER,
  spill_store_bytes   INTEGER,
  spill_load_bytes    INTEGER,
  stack_frame_bytes   INTEGER,
  shared_static_bytes INTEGER,
  cubin_bytes         INTEGER NOT NULL DEFAULT 0,
  compile_ms          REAL    NOT NULL DEFAULT 0,
  created_at          TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE trials (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs (id),
  experiment_name TEXT    NOT NULL,
  family          TEXT    NOT NULL,
  stage           TEXT    NOT NULL,
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  config_id       INTEGER NOT NULL REFERENCES configs (id),
  source_hash     TEXT    NOT NULL,
  device_key      TEXT    NOT NULL,
  status          TEXT    NOT NULL,
  reason          TEXT    NOT NULL DEFAULT '',
  compile_id      INTEGER REFERENCES compiles (id),
  seed            INTEGER NOT NULL DEFAULT 0,
  median_ms       REAL,
  iqr_ms          REAL,
  min_ms          REAL,
  max_ms          REAL,
  mean_ms         REAL,
  rel_stdev       REAL,
  converged       INTEGER,
  cold            INTEGER,
  n_samples       INTEGER,
  samples_json    TEXT,
  gbps            REAL,
  tflops          REAL,
  max_abs_err     REAL,
  max_rel_err     REAL,
  naive_err       REAL,
  tolerance       REAL,
  nan_count       INTEGER,
  created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE INDEX trials_by_run ON trials (run_id);
