-- Concurrency slots across waits and child jobs (issue 14).
--
-- 1. A step run parked waiting (a signal, a sleep, its children) keeps its
--    key's slot until it resumes (is claimed again), ends or is cancelled:
--    a period's posting awaiting an accountant's approval is not finished,
--    and no costing of that period may run meanwhile. A waiting run has no
--    lease, so its slot is held by status: the park sets concurrency_kept,
--    the wake (signal, child's end, timeout) leaves it set on the pending
--    run until its claim clears it (it holds by its lease from then on).
--    Cancel, dead and done end the hold by status alone.
-- 2. A child job inherits the slots of its ancestors: when counting the
--    holders of a key for a step run, the step runs of the ancestors of its
--    job (parent, grandparent: engine_jobs.parent_job_id) do not count, so a
--    close job holding period:P runs the posting and costing of P as its
--    children while any other job of P still waits.

ALTER TABLE engine_step_runs
    ADD COLUMN concurrency_kept boolean NOT NULL DEFAULT false;

-- Runs waiting when this migration runs keep their slots from now on.
UPDATE engine_step_runs SET concurrency_kept = true
WHERE status = 'waiting' AND concurrency_key IS NOT NULL;

-- The holders by status (counted beside the running ones, which have their own index).
CREATE INDEX engine_step_runs_concurrency_kept
    ON engine_step_runs (concurrency_key)
    WHERE concurrency_kept AND status IN ('waiting', 'pending') AND concurrency_key IS NOT NULL;

-- The jobs whose holds a step run of job `job` inherits: its parent, theirs, ...
-- (empty for a job submitted from outside). STABLE: one snapshot per call.
CREATE FUNCTION engine_job_ancestors(job uuid) RETURNS uuid[]
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE up (id, depth) AS (
        SELECT j.parent_job_id, 1 FROM engine_jobs AS j
        WHERE j.id = job AND j.parent_job_id IS NOT NULL
        UNION ALL
        SELECT j.parent_job_id, up.depth + 1
        FROM engine_jobs AS j JOIN up ON j.id = up.id
        WHERE j.parent_job_id IS NOT NULL AND up.depth < 64
    )
    SELECT coalesce(array_agg(id), '{}'::uuid[]) FROM up
$$;

-- The holders of `key` as a step run `self` of job `job` sees them: running
-- with a live lease, or waiting (or woken and not yet claimed again) with
-- its slot kept; never `self`, never a step run of an ancestor of `job`.
-- runs: how many; other_jobs: of how many jobs other than `job`; mine:
-- whether `job` holds one. VOLATILE: a fresh snapshot per call (see below).
CREATE FUNCTION engine_concurrency_holders(key text, job uuid, self uuid)
RETURNS TABLE (runs bigint, other_jobs bigint, mine boolean)
LANGUAGE sql VOLATILE AS $$
    WITH anc AS (
        SELECT engine_job_ancestors(job) AS ids
    ), h AS (
        SELECT s.id, s.job_id FROM engine_step_runs AS s
        WHERE s.concurrency_key = key AND s.status = 'running'
          AND s.lease_expires_at > clock_timestamp()
        UNION ALL
        SELECT s.id, s.job_id FROM engine_step_runs AS s
        WHERE s.concurrency_key = key AND s.concurrency_kept
          AND s.status IN ('waiting', 'pending')
    )
    SELECT count(*), count(DISTINCT h.job_id) FILTER (WHERE h.job_id IS DISTINCT FROM job),
           coalesce(bool_or(h.job_id = job), false)
    FROM h, anc
    WHERE h.id IS DISTINCT FROM self
      AND h.job_id <> ALL (anc.ids)
$$;

-- Whether a step run of job `job` (id `self`) may hold a slot of `key` now.
--
-- lock_mode 'wait' (a claim) takes the key's transaction-scoped advisory lock
-- first, waiting for a concurrent claimer of the key to commit; 'try' (an
-- eager successor, inside a checkpoint that holds its job's row lock) never
-- waits: a held lock answers "no slot", so no lock cycle can form; 'none'
-- reads only (why a claim was refused). VOLATILE on purpose: PostgreSQL gives
-- each query of a volatile function a fresh snapshot, so the count is taken
-- after the lock is granted and sees every claim, park and wake committed
-- before it, although it runs inside the caller's single statement.
CREATE OR REPLACE FUNCTION engine_concurrency_slot_free(
    key text, lim integer, per_job boolean, job uuid, self uuid, lock_mode text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    held record;
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
    SELECT * INTO held FROM engine_concurrency_holders(key, job, self);
    IF per_job THEN
        RETURN held.mine OR held.other_jobs < lim;
    END IF;
    RETURN held.runs < lim;
END
$$;

-- The worker parks (sets) and claims (clears); an operator's retry clears.
GRANT UPDATE (concurrency_kept) ON engine_step_runs TO engine_worker;
GRANT EXECUTE ON FUNCTION engine_job_ancestors(uuid) TO engine_worker;
GRANT EXECUTE ON FUNCTION engine_concurrency_holders(text, uuid, uuid) TO engine_worker;
