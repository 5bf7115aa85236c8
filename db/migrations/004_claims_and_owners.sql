-- db/migrations/004_claims_and_owners.sql: schema version 4.
-- Two processes running the same experiment into one database both found a trial unrecorded, ran it and
-- recorded it twice (issue 23: 22-25 of 27 trials). A trial is now claimed before it runs: one row per
-- resume key in trial_claims (a unique index), taken in the same transaction that checks trials, so a
-- second writer sees the claim and skips. A run also records the process that owns it (host, pid, start),
-- so a later process can tell a run whose process was killed (-9) from one still running, mark it
-- `interrupted`, and take over its claims. Nothing is dropped or rewritten: trials recorded twice before
-- this version stay as they are (find_trial and merge take the latest of a key, as before).

ALTER TABLE runs ADD COLUMN owner_host TEXT;
ALTER TABLE runs ADD COLUMN owner_pid INTEGER;
ALTER TABLE runs ADD COLUMN owner_start TEXT;

CREATE TABLE trial_claims (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs (id),
  experiment_name TEXT    NOT NULL,
  stage           TEXT    NOT NULL,
  family          TEXT    NOT NULL,
  problem_key     TEXT    NOT NULL,
  config_key      TEXT    NOT NULL,
  source_hash     TEXT    NOT NULL,
  device_key      TEXT    NOT NULL,
  claimed_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE UNIQUE INDEX trial_claims_by_key
  ON trial_claims (experiment_name, stage, family, problem_key, config_key, source_hash, device_key);
