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

-- A round's slice as rows, for the statements that check it (the ended jobs'
-- leftovers, the lost announcements): the pending step runs in (after, upto]
-- by (available_at, id) and the running ones in (after, upto] by
-- (lease_expires_at, id), read along the indexes above. The bounds come from
-- the round's first statement (step_sweep_slice), so the rows never travel to
-- the worker and back (10,000 ids cost 80 ms of Python and an ANY array per
-- statement).
CREATE FUNCTION engine_sweep_slice(
    pending_after_at timestamptz, pending_after_id uuid,
    pending_upto_at timestamptz, pending_upto_id uuid,
    running_after_at timestamptz, running_after_id uuid,
    running_upto_at timestamptz, running_upto_id uuid
) RETURNS SETOF engine_step_runs
LANGUAGE sql STABLE AS $$
    SELECT s.* FROM engine_step_runs AS s
    WHERE s.status = 'pending'
      AND (s.available_at, s.id) > (pending_after_at, pending_after_id)
      AND (s.available_at, s.id) <= (pending_upto_at, pending_upto_id)
    UNION ALL
    SELECT s.* FROM engine_step_runs AS s
    WHERE s.status = 'running'
      AND (s.lease_expires_at, s.id) > (running_after_at, running_after_id)
      AND (s.lease_expires_at, s.id) <= (running_upto_at, running_upto_id)
$$;
REVOKE ALL ON FUNCTION engine_sweep_slice(timestamptz, uuid, timestamptz, uuid,
                                          timestamptz, uuid, timestamptz, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engine_sweep_slice(timestamptz, uuid, timestamptz, uuid,
                                             timestamptz, uuid, timestamptz, uuid) TO engine_worker;
