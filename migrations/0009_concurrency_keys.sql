-- Concurrency keys (issue 14): "at most N of these at a time per key".
--
-- A step run carries the key its flow (or step) declared, rendered from the
-- job's parameters when the step run is created, and the limit: the claim
-- needs no Python. A slot is a running step run with a live lease, so a
-- holder that dies frees its slot when its lease expires. With
-- concurrency_per_job the step runs of one job share one slot: the limit
-- counts jobs, not step runs.
ALTER TABLE engine_step_runs
    ADD COLUMN concurrency_key     text,
    ADD COLUMN concurrency_limit   integer,
    ADD COLUMN concurrency_per_job boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT engine_step_runs_concurrency
        CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL)
               AND (concurrency_limit IS NULL OR concurrency_limit >= 1));

-- The holders of a key (counted by every claim of that key) and its waiters
-- (the next to announce when a holder finishes).
CREATE INDEX engine_step_runs_concurrency_running
    ON engine_step_runs (concurrency_key) WHERE status = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX engine_step_runs_concurrency_pending
    ON engine_step_runs (concurrency_key, available_at)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;

-- Whether a step run of job `job` (id `self`) may hold a slot of `key` now.
--
-- lock_mode 'wait' (a claim) takes the key's transaction-scoped advisory lock
-- first, waiting for a concurrent claimer of the key to commit; 'try' (an
-- eager successor, inside a checkpoint that holds its job's row lock) never
-- waits: a held lock answers "no slot", so no lock cycle can form; 'none'
-- reads only (why a claim was refused). VOLATILE on purpose: PostgreSQL gives
-- each query of a volatile function a fresh snapshot, so the count below is
-- taken after the lock is granted and sees every claim committed before it,
-- although it runs inside the caller's single statement.
CREATE FUNCTION engine_concurrency_slot_free(
    key text, lim integer, per_job boolean, job uuid, self uuid, lock_mode text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    runs       bigint;
    other_jobs bigint;
    mine       boolean;
BEGIN
    IF key IS NULL THEN
        RETURN true;
    END IF;
    IF lock_mode = 'wait' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('engine.concurrency:' || key, 0));
    ELSIF lock_mode = 'try' THEN
        IF NOT pg_try_advisory_xact_lock(hashtextextended('engine.concurrency:' || key, 0)) THEN
            RETURN false;
        END IF;
    END IF;
    SELECT count(*), count(DISTINCT h.job_id) FILTER (WHERE h.job_id <> job),
           coalesce(bool_or(h.job_id = job), false)
    INTO runs, other_jobs, mine
    FROM engine_step_runs AS h
    WHERE h.concurrency_key = key
      AND h.status = 'running'
      AND h.lease_expires_at > clock_timestamp()
      AND h.id IS DISTINCT FROM self;
    IF per_job THEN
        RETURN mine OR other_jobs < lim;
    END IF;
    RETURN runs < lim;
END
$$;

-- The worker inserts step runs with their key; it never changes a key.
GRANT EXECUTE ON FUNCTION engine_concurrency_slot_free(text, integer, boolean, uuid, uuid, text)
    TO engine_worker;
