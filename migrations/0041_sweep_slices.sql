-- The sweeper reads the queue a slice at a time (engine/worker/sweeper.py,
-- QueueSlices): the next pending step runs in (available_at, id) order and the
-- next running ones in (lease_expires_at, id) order after where its last round
-- stopped. Its scans of expired leases and due step runs had these partial
-- indexes on the time alone; with the id beside it each slice is read in
-- index order and stops at its limit, where the time alone left a sort of
-- every row from the slice's start on (1.2 s for 570,910 running step runs,
-- to return 10,000). Replaced, not added: the same rows, one more key each,
-- and a step run's writes maintain as many indexes as before. Each covers
-- only pending or only running step runs: a short build at a live queue's size.

CREATE INDEX engine_step_runs_available_id
    ON engine_step_runs (available_at, id) WHERE status = 'pending';
DROP INDEX engine_step_runs_available;

CREATE INDEX engine_step_runs_lease_expiry_id
    ON engine_step_runs (lease_expires_at, id) WHERE status = 'running';
DROP INDEX engine_step_runs_lease_expiry;
