-- db/migrations/006_peer_trials.sql: schema version 6.
-- Peers (PyTorch SDPA backends, FlexAttention, FlashAttention-4) measured on an experiment's attention problems by
-- `flashtune peers` with flashtune's timing method and validated against the same pass rule. They live in a table
-- of their own, apart from `trials`, so that nothing that reads trials (resume, best, export, the tuner's warm
-- start) can ever take a peer for a config of ours. Nothing else changes.

CREATE TABLE peer_trials (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs (id),
  experiment_name TEXT    NOT NULL,
  peer            TEXT    NOT NULL,
  library         TEXT    NOT NULL DEFAULT '',
  pass            TEXT    NOT NULL,
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  device_key      TEXT    NOT NULL,
  status          TEXT    NOT NULL,
  reason          TEXT    NOT NULL DEFAULT '',
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
  tflops          REAL,
  max_abs_err     REAL,
  max_rel_err     REAL,
  naive_err       REAL,
  tolerance       REAL,
  nan_count       INTEGER,
  checked_output  TEXT    NOT NULL DEFAULT '',
  device_bytes    INTEGER,
  created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX peer_trials_by_run ON peer_trials (run_id);
