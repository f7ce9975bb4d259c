-- What an approver sees: a wait's summary (issue 28, "approvals that show what is approved").
--
-- A step that waits for a signal may publish, before it parks, what the
-- person who sends the signal needs to decide (a posting's rejected
-- documents and totals). The park stores it with the wait, in the same
-- fenced transaction (a stale attempt parks nothing and stores nothing).
-- Like wait_signal and wait_until it stays after the wake, as the record of
-- what was approved, until the step run parks again with another (or none).
-- NULL: the wait published nothing (every wait before this migration).

ALTER TABLE engine_step_runs ADD COLUMN wait_summary jsonb;
ALTER TABLE engine_step_runs ADD CONSTRAINT engine_step_runs_wait_summary_object
    CHECK (wait_summary IS NULL OR jsonb_typeof(wait_summary) = 'object');

-- The approvals inbox (every step run waiting for a signal now) reads the
-- partial index engine_step_runs_wait_signal of 0011.

-- The worker parks its step runs with their summary.
GRANT UPDATE (wait_summary) ON engine_step_runs TO engine_worker;
