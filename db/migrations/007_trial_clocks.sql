-- db/migrations/007_trial_clocks.sql: schema version 7.
-- Records the SM clock a trial's (and a peer trial's) samples ran at and how often the power cap held it down (NVML, polled every
-- 2 ms while the samples ran): under a power cap the same kernel runs at different clocks on different cards.

ALTER TABLE trials ADD COLUMN sm_clock_mhz REAL;
ALTER TABLE trials ADD COLUMN power_capped REAL;
ALTER TABLE peer_trials ADD COLUMN sm_clock_mhz REAL;
ALTER TABLE peer_trials ADD COLUMN power_capped REAL;
