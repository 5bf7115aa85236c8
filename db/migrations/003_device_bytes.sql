-- db/migrations/003_device_bytes.sql: schema version 3.
-- Records the device memory each trial allocated (inputs, outputs and workspaces such as a naive
-- baseline's materialized score matrix), so that a run can say "M x less memory" than its baseline.

ALTER TABLE trials ADD COLUMN device_bytes INTEGER;
