-- db/migrations/002_resume_and_early_stop.sql: schema version 2.
-- Adds what v1 could not record or find fast: whether a measurement was abandoned against an incumbent
-- (trials.stopped_early), the compile's name expression and constant memory, a stable run uid so that
-- databases from several machines can be merged without duplicating runs, and an index for the
-- resume lookup (Store::find_trial), which in v1 scanned every trial of the experiment.

ALTER TABLE trials ADD COLUMN stopped_early INTEGER;
ALTER TABLE compiles ADD COLUMN name_expression TEXT NOT NULL DEFAULT '';
ALTER TABLE compiles ADD COLUMN constant_bytes INTEGER;
ALTER TABLE runs ADD COLUMN uid TEXT;
UPDATE runs SET uid = lower(hex(randomblob(16))) WHERE uid IS NULL;

CREATE UNIQUE INDEX runs_by_uid ON runs (uid);
CREATE INDEX trials_for_resume
  ON trials (experiment_name, stage, family, problem_id, config_id, source_hash, device_key);
