-- step_wait_children_if_reopened --
-- A retried step run whose children were reopened with it waits for them, as it did before they ended badly, rather than running to find them active: it keeps its concurrency key's slot (by status) only if a slot is free now, counted after the key's lock like a claim (invariant 17), so its children run inside it; without one they take their own and it runs once they end; no attempt is used (invariant 14), and no deadline is set (its wait sets a fresh one).
UPDATE engine_step_runs AS s
SET status = 'waiting', wait_children = true, wait_signal = NULL, wait_until = NULL,
    concurrency_kept = s.concurrency_key IS NOT NULL
        AND engine_concurrency_slot_free(s.concurrency_key, s.concurrency_limit,
                                         s.concurrency_per_job, s.job_id, s.id, 'wait')
WHERE s.id = %(id)s AND s.status = 'pending'
  AND EXISTS (SELECT 1 FROM engine_jobs AS c
              WHERE c.parent_step_run_id = s.id AND c.status IN ('pending', 'running'))
RETURNING s.id, s.concurrency_kept;

-- step_park_if_leased --
-- Invariants 14, 16 and 17: only the lease holder parks its step run, for a signal or a deadline, or (children) for its child jobs (a keyed one only while its lease is live, looked at under its key's lock: a lapsed holder keeps no slot and children never inherit a slot their parent lost, engine_concurrency_hold), in a statement after the one that locked the job row (for children, also the children rows: job_lock_children), so a signal or a child's end committed by whoever held that lock is seen; the attempt comes back (waiting is not running the step) and the lease goes, but its concurrency slot is kept (by status) until the step run is claimed again, ends or is cancelled; if what it waits for has happened already (the signal exists, no child is active any more) it is pending again at once rather than waiting for a wake that has happened; the wait's summary (what the approver sees, NULL for none) is stored by the same fenced statement, so a stale attempt stores none; a deadline set by an earlier park of the same children wait (as many waits passed before it) is kept (each child's end wakes the step, which must not move it), any other wait gets its own.
WITH ready AS (
    SELECT CASE WHEN %(children)s::boolean
                THEN NOT EXISTS (
                    SELECT 1 FROM engine_jobs
                    WHERE parent_step_run_id = %(id)s AND status IN ('pending', 'running'))
                ELSE EXISTS (
                    SELECT 1 FROM engine_signals
                    WHERE job_id = %(job_id)s AND name = %(signal)s)
           END AS now
)
UPDATE engine_step_runs AS s
SET status = CASE WHEN ready.now THEN 'pending' ELSE 'waiting' END,
    attempts = s.attempts - 1, free_releases = 0,
    available_at = clock_timestamp(),
    wait_until = CASE
        WHEN %(until)s::timestamptz IS NOT NULL THEN %(until)s::timestamptz
        WHEN %(children)s::boolean AND s.wait_children AND s.wait_signal IS NULL
             AND s.wait_until IS NOT NULL
             AND cardinality(s.wait_past) = cardinality(%(past)s::timestamptz[])
            THEN s.wait_until
        ELSE clock_timestamp() + make_interval(secs => %(timeout_s)s::float8) END,
    wait_signal = %(signal)s, wait_children = %(children)s::boolean,
    wait_past = %(past)s::timestamptz[], wait_summary = %(summary)s::jsonb,
    concurrency_kept = s.concurrency_key IS NOT NULL,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
FROM ready
WHERE s.id = %(id)s AND s.job_id = %(job_id)s AND s.lease_token = %(token)s
  AND s.status = 'running'
  AND (s.concurrency_key IS NULL
       OR engine_concurrency_hold(s.concurrency_key, s.job_id, s.id, %(token)s::uuid))
RETURNING s.status, s.wait_signal, s.wait_until;

-- step_wake_by_signal --
-- A signal wakes its job's step runs waiting for it (the job row locked by the statement before, the one lock order); each wake is logged by this statement; attempts are untouched (they came back when the wait began).
WITH woken AS (
    UPDATE engine_step_runs
    SET status = 'pending', available_at = clock_timestamp()
    WHERE job_id = %(job_id)s AND status = 'waiting' AND wait_signal = %(name)s
    RETURNING id, job_id, attempts
), logged AS (
    INSERT INTO engine_events (kind, job_id, step_run_id, attempt, detail)
    SELECT 'woken', w.job_id, w.id, w.attempts,
           jsonb_build_object('by', 'signal', 'signal', %(name)s::text)
    FROM woken AS w
)
SELECT id FROM woken;

-- step_wake_if_due_many --
-- Invariant 13: a waiting step run is claimable later, at its deadline: the sweeper makes it pending once wait_until has passed (the step then finds its timeout); jobs are locked first, in id order, and a wake a signal did meanwhile is not repeated (the row is re-checked as waiting).
WITH jobs AS (
    SELECT j.id
    FROM engine_jobs AS j
    WHERE j.id IN (
        SELECT job_id FROM engine_step_runs
        WHERE status = 'waiting' AND wait_until <= clock_timestamp())
      AND j.status IN ('pending', 'running')
    ORDER BY j.id
    LIMIT %(limit)s
    FOR NO KEY UPDATE
), woken AS (
    UPDATE engine_step_runs AS s
    SET status = 'pending', available_at = clock_timestamp()
    FROM jobs
    WHERE s.job_id = jobs.id AND s.status = 'waiting' AND s.wait_until <= clock_timestamp()
    RETURNING s.id, s.job_id, s.attempts, s.wait_signal, s.wait_until
), logged AS (
    INSERT INTO engine_events (kind, job_id, step_run_id, worker, attempt, detail)
    SELECT 'woken', w.job_id, w.id, %(worker)s, w.attempts,
           jsonb_build_object('by', 'timeout', 'signal', w.wait_signal, 'until', w.wait_until)
    FROM woken AS w
)
SELECT id, job_id FROM woken;

-- step_wake_parent --
-- A child job's end wakes the parent step run waiting for its children, in the transaction that ended the child (which holds the child row: a park taking job_lock_children waits for it); each end wakes it, and the step, run again, parks again while children are active; the wake is logged by this statement.
WITH woken AS (
    UPDATE engine_step_runs AS s
    SET status = 'pending', available_at = clock_timestamp()
    FROM engine_jobs AS c
    WHERE c.id = %(child_job_id)s AND s.id = c.parent_step_run_id
      AND s.status = 'waiting' AND s.wait_children
    RETURNING s.id, s.job_id, s.attempts
), logged AS (
    INSERT INTO engine_events (kind, job_id, step_run_id, attempt, detail)
    SELECT 'woken', w.job_id, w.id, w.attempts,
           jsonb_build_object('by', 'child', 'child', %(child_job_id)s::text)
    FROM woken AS w
)
SELECT id FROM woken;

-- step_wake_parent_many --
-- step_wake_parent for the jobs a round's checkpoints ended (rows of one statement: engine.store.batch), in one statement: each parent step run waiting for its children is woken once (two children of one parent ending together wake it once, as one after the other would), and logged; a row per parent woken, with the place (n) of the child that woke it.
WITH given AS (
    SELECT g.child, g.n FROM unnest(%(child_job_id)s::uuid[]) WITH ORDINALITY AS g (child, n)
), woken AS (
    UPDATE engine_step_runs AS s
    SET status = 'pending', available_at = clock_timestamp()
    FROM engine_jobs AS c
    WHERE c.id = ANY (%(child_job_id)s::uuid[]) AND s.id = c.parent_step_run_id
      AND s.status = 'waiting' AND s.wait_children
    RETURNING s.id, s.job_id, s.attempts, c.id AS child
), logged AS (
    INSERT INTO engine_events (kind, job_id, step_run_id, attempt, detail)
    SELECT 'woken', w.job_id, w.id, w.attempts,
           jsonb_build_object('by', 'child', 'child', w.child::text)
    FROM woken AS w
)
SELECT w.id, g.n FROM woken AS w JOIN given AS g ON g.child = w.child;

-- step_select_children_timed_out --
-- Read by a running step in its fenced transaction: whether its last wait for its children ran out (its deadline, by the database clock); writes nothing.
SELECT coalesce(wait_children AND wait_signal IS NULL AND wait_until <= clock_timestamp(), false)
           AS timed_out,
       wait_until, wait_past
FROM engine_step_runs
WHERE id = %(id)s;

-- step_select_awaiting_signal --
-- Read-only, for the approvals inbox: every step run of an active job waiting for a signal now (the partial index of waiting step runs), oldest park first, with its job, the job's parent (a child job's) and the summary its wait published; "since" is its last waiting event. With job_id: only that job's and its child jobs' (a job's page).
SELECT s.id AS step_run_id, s.job_id, j.flow, j.params, j.submitted_by,
       j.parent_job_id, p.flow AS parent_flow, s.step, s.fanout_key,
       s.wait_signal AS signal, s.wait_until AS deadline, s.wait_summary AS summary,
       coalesce(w.at, s.available_at) AS since
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id AND j.status IN ('pending', 'running')
LEFT JOIN engine_jobs AS p ON p.id = j.parent_job_id
LEFT JOIN LATERAL (
    SELECT e.at FROM engine_events AS e
    WHERE e.step_run_id = s.id AND e.kind = 'waiting'
    ORDER BY e.id DESC LIMIT 1) AS w ON true
WHERE s.status = 'waiting' AND s.wait_signal IS NOT NULL
  AND (%(job_id)s::uuid IS NULL OR j.id = %(job_id)s::uuid OR j.parent_job_id = %(job_id)s::uuid)
ORDER BY since, s.id
LIMIT %(limit)s;

-- step_count_awaiting_signal --
-- Read-only, for the console's approvals badge: how many step runs of active jobs wait for a signal now (the partial index of waiting step runs; no summaries read).
SELECT count(*)::int AS n
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id AND j.status IN ('pending', 'running')
WHERE s.status = 'waiting' AND s.wait_signal IS NOT NULL;
