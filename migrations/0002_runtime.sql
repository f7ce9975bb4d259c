-- Runtime: delayed delivery of retries through the outbox.

-- A retry's "ready" row is delivered when its backoff ends; transports that
-- cannot delay that long (SQS: 900 s) deliver early or leave it to the sweeper.
ALTER TABLE engine_outbox ADD COLUMN deliver_at timestamptz NOT NULL DEFAULT clock_timestamp();
-- The sweeper asks "was this step run announced since it became claimable?".
CREATE INDEX engine_outbox_step_run ON engine_outbox (step_run_id, deliver_at DESC);

-- When the current (or last) lease was taken: a running step run whose lease
-- expired counts as announced only by a message sent after that claim.
ALTER TABLE engine_step_runs ADD COLUMN claimed_at timestamptz;
