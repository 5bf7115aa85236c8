-- db/migrations/005_warm_starts.sql: schema version 5.
-- A search may begin from what the database says of neighbouring problems (tuner/warm_start.hpp, issue 23):
-- one row per (run, family, stage, problem) that was warm-started, saying from which measured problems and
-- with which first configs, so that a result can be traced to the history it was given. Nothing else changes.

CREATE TABLE warm_starts (
  id          INTEGER PRIMARY KEY,
  run_id      INTEGER NOT NULL REFERENCES runs (id),
  family      TEXT    NOT NULL,
  stage       TEXT    NOT NULL,
  problem_key TEXT    NOT NULL,
  sources     TEXT    NOT NULL,
  first       TEXT    NOT NULL,
  created_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX warm_starts_by_run ON warm_starts (run_id);
