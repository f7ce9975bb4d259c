-- job_insert_if_absent --
-- Invariant 7: the conflict target repeats the partial index's predicate, so a second active job with this fingerprint inserts nothing (zero rows: someone else's job exists); the row inserted is its submitted event too (submitted_detail set: migration 0037, read through engine_history), so a submit that inserts nothing records nothing.
INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, submitted_by,
                         parent_job_id, parent_step_run_id, child_key, signals, approvals,
                         traceparent, submitted_detail)
VALUES (%(id)s, %(flow)s, %(flow_version)s, %(params)s, %(fingerprint)s, %(submitted_by)s,
        %(parent_job_id)s, %(parent_step_run_id)s, %(child_key)s, %(signals)s::text[],
        %(approvals)s::text[], %(traceparent)s, %(submitted_detail)s)
ON CONFLICT (fingerprint) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id, flow, status, created_at;

-- job_select_active_by_fingerprint --
-- At most one row: the partial unique index allows one active job per fingerprint.
SELECT id, flow, status, created_at
FROM engine_jobs
WHERE fingerprint = %(fingerprint)s AND status IN ('pending', 'running');

-- job_select_signals --
-- The signals a job may receive, recorded from its flow's declaration at submit (NULL: submitted before signals were declared); read after the job row was locked, before a signal is written.
SELECT flow, flow_version, signals FROM engine_jobs WHERE id = %(job_id)s;

-- job_select_approval_parties --
-- Read after the job row was locked, before an approval signal is written: the approvals the job recorded at submit (NULL: none, an older job) and who submitted it and each of its ancestors (parent, grandparent, ...), the job first; a parent's row is never changed once its child exists, so no lock is needed on it.
WITH RECURSIVE up AS (
    SELECT id, parent_job_id, submitted_by, approvals, 0 AS depth
    FROM engine_jobs WHERE id = %(job_id)s
    UNION ALL
    SELECT p.id, p.parent_job_id, p.submitted_by, NULL::text[], up.depth + 1
    FROM engine_jobs AS p JOIN up ON p.id = up.parent_job_id
    WHERE up.depth < 64
)
SELECT id, submitted_by, approvals, depth FROM up ORDER BY depth;

-- job_mark_rejected_if_failed --
-- In the transaction that failed the job by a step's Reject (after job_finish_if_active_logged): the data's decision, which `engine retry` refuses and a parent step reads (engine.Child.rejected); zero rows: the job did not fail in it.
UPDATE engine_jobs SET rejected = true
WHERE id = %(job_id)s AND status = 'failed'
RETURNING id;

-- job_select_rejected_in_retry --
-- Read before a retry, only to refuse it: the job, or a failed descendant a retry would reopen, that a step's Reject failed (the data's decision, not a fault); the nearest first.
WITH RECURSIVE tree AS (
    SELECT id, flow, rejected, error, 0 AS depth FROM engine_jobs WHERE id = %(job_id)s
    UNION ALL
    SELECT c.id, c.flow, c.rejected, c.error, tree.depth + 1
    FROM engine_jobs AS c JOIN tree ON c.parent_job_id = tree.id
    WHERE c.status = 'failed' AND tree.depth < 64
)
SELECT id, flow, error, depth FROM tree WHERE rejected ORDER BY depth, id LIMIT 1;

-- job_select_status --
-- The status of one job, for messages to the user.
SELECT status FROM engine_jobs WHERE id = %(job_id)s;

-- job_progress --
-- Read only: step runs done over step runs known so far, the job's descendants' included (a parent's children do its work; fan-outs and children add runs as they appear); "waiting" is derived, never stored: active, a step run waiting and none pending or running (each an index lookup by job).
WITH RECURSIVE tree AS (
    SELECT id FROM engine_jobs WHERE id = %(job_id)s
    UNION
    SELECT c.id FROM engine_jobs AS c JOIN tree ON c.parent_job_id = tree.id
), runs AS (
    SELECT count(*)::int AS total,
           count(*) FILTER (WHERE s.status = 'done')::int AS done
    FROM tree JOIN engine_step_runs AS s ON s.job_id = tree.id
)
SELECT j.status, j.error, runs.total, runs.done,
       (j.status IN ('pending', 'running')
        AND NOT EXISTS (SELECT 1 FROM engine_step_runs AS b
                        WHERE b.job_id = j.id AND b.status IN ('pending', 'running'))
        AND EXISTS (SELECT 1 FROM engine_step_runs AS w
                    WHERE w.job_id = j.id AND w.status = 'waiting')) AS waiting,
       (SELECT coalesce(json_agg(json_build_object('signal', w.wait_signal, 'until', w.wait_until,
                                                   'children', w.wait_children)
                                 ORDER BY w.created_at, w.step, w.fanout_key), '[]'::json)
        FROM engine_step_runs AS w
        WHERE w.job_id = j.id AND w.status = 'waiting') AS waits
FROM engine_jobs AS j, runs
WHERE j.id = %(job_id)s;

-- job_finish_if_active --
-- A job ends once: done when every step is, failed when one is dead, cancelled on request.
UPDATE engine_jobs
SET status = %(status)s, finished_at = clock_timestamp(), error = %(error)s
WHERE id = %(job_id)s AND status IN ('pending', 'running')
RETURNING id;

-- job_finish_if_active_logged --
-- A job ends once; its event is written only by the statement that ended it, and a job ended done (never reopened) keeps it on its row instead (finished_by: migration 0035, read as the job_done event through engine_history).
WITH finished AS (
    UPDATE engine_jobs
    SET status = %(status)s, finished_at = clock_timestamp(), error = %(error)s,
        finished_by = CASE WHEN %(status)s = 'done' THEN %(worker)s END
    WHERE id = %(job_id)s AND status IN ('pending', 'running')
    RETURNING id, status
)
INSERT INTO engine_events (kind, job_id, worker)
SELECT %(event)s, f.id, %(worker)s FROM finished AS f
WHERE f.status <> 'done' OR %(event)s <> 'job_done';

-- job_cancel_if_active --
-- Cancel ends an active job once; its step runs are cancelled in the same transaction.
UPDATE engine_jobs
SET status = 'cancelled', finished_at = clock_timestamp(), error = %(reason)s
WHERE id = %(job_id)s AND status IN ('pending', 'running')
RETURNING id;

-- job_cancel_if_leased --
-- Invariant 16: a step's Cancel ends its job only while that step's lease token is current; the job row is locked first, then the step run; step_cancel_by_job follows in the same transaction.
WITH job AS (
    SELECT id FROM engine_jobs
    WHERE id = %(job_id)s AND status IN ('pending', 'running')
    FOR NO KEY UPDATE
), mine AS (
    SELECT s.id
    FROM engine_step_runs AS s
    JOIN job ON s.job_id = job.id
    WHERE s.id = %(id)s AND s.lease_token = %(token)s AND s.status = 'running'
    FOR NO KEY UPDATE OF s
)
UPDATE engine_jobs AS j
SET status = 'cancelled', finished_at = clock_timestamp(), error = %(reason)s
FROM mine
WHERE j.id = %(job_id)s
RETURNING j.id;

-- job_reopen_children_if_ended --
-- A retry reaches down (issue 27): the failed or cancelled children of the job's dead or cancelled step runs (which run again and submit them again under the same key), and theirs, reopen with it, in the same transaction, job rows after the retried job's row and before any step run (the one lock order); a done child, and whatever is below it, stays as it is; read before the step runs are reopened. Locked and returned parents before children (by depth, then id): a join's own order is the rows' storage order under a hash join, which put a grandchild before its parent.
WITH RECURSIVE tree AS (
    SELECT c.id, 1 AS depth
    FROM engine_jobs AS c
    JOIN engine_step_runs AS s ON s.id = c.parent_step_run_id
    WHERE c.parent_job_id = %(job_id)s AND c.status IN ('failed', 'cancelled')
      AND s.status IN ('dead', 'cancelled')
    UNION
    SELECT c.id, tree.depth + 1
    FROM engine_jobs AS c
    JOIN tree ON c.parent_job_id = tree.id
    JOIN engine_step_runs AS s ON s.id = c.parent_step_run_id
    WHERE c.status IN ('failed', 'cancelled') AND s.status IN ('dead', 'cancelled')
),
locked AS (
    SELECT j.id, tree.depth
    FROM engine_jobs AS j
    JOIN tree ON tree.id = j.id
    WHERE j.status IN ('failed', 'cancelled')
    ORDER BY tree.depth, j.id
    FOR NO KEY UPDATE OF j
),
reopened AS (
    UPDATE engine_jobs AS j
    SET status = 'running', finished_at = NULL, error = NULL
    FROM locked
    WHERE j.id = locked.id
    RETURNING j.id, j.parent_step_run_id, locked.depth
)
SELECT id, parent_step_run_id FROM reopened ORDER BY depth, id;

-- job_select_parent --
-- Read before a retry, only for its message: the parent of a child job (no row for a job submitted from outside); never used to write.
SELECT p.id, p.flow, p.status
FROM engine_jobs AS c
JOIN engine_jobs AS p ON p.id = c.parent_job_id
WHERE c.id = %(job_id)s;

-- job_select_active_with_fingerprint_of --
-- Names the active job that made a reopen fail on the unique index (at most one row, by that index).
SELECT a.id
FROM engine_jobs AS j
JOIN engine_jobs AS a ON a.fingerprint = j.fingerprint AND a.status IN ('pending', 'running')
WHERE j.id = %(job_id)s;

-- job_select_active_matching --
-- Flows ask which of their jobs are running over the same data (a period, say) before they change its state: active jobs of these flows whose parameters contain these values.
SELECT id, flow, status, params, submitted_by, created_at
FROM engine_jobs
WHERE status IN ('pending', 'running')
  AND flow = ANY(%(flows)s)
  AND params @> %(params)s
  AND id IS DISTINCT FROM %(exclude)s
ORDER BY created_at, id;

-- job_select_info --
-- One job as a flow sees it: who submitted it, with what, and how it stands.
SELECT id, flow, status, params, submitted_by, created_at
FROM engine_jobs
WHERE id = %(job_id)s;

-- job_select_by_id_range --
-- Jobs whose id lies in [low, high], the range a hex prefix of a UUID covers (uuid order is byte order, so the primary keys' indexes answer it, unlike a LIKE on id::text), live or pruned (a summary, 0031: pruned is true); the limit keeps a short prefix cheap and still shows whether it is ambiguous.
SELECT id, flow, status, created_at, pruned FROM (
    (SELECT id, flow, status, created_at, false AS pruned
     FROM engine_jobs
     WHERE id BETWEEN %(low)s AND %(high)s
     ORDER BY id
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id, flow, status, created_at, true AS pruned
     FROM engine_job_summaries
     WHERE id BETWEEN %(low)s AND %(high)s
     ORDER BY id
     LIMIT %(limit)s)
) AS found
ORDER BY id
LIMIT %(limit)s;

-- job_lock_if_active --
-- The one lock order (the job row first) in a statement of its own: the statements after it in the transaction see everything committed by whoever held the lock before (a signal and a step starting to wait serialise here); zero rows when the job is not active.
SELECT id, status FROM engine_jobs
WHERE id = %(job_id)s AND status IN ('pending', 'running')
FOR NO KEY UPDATE;

-- job_select_child --
-- At most one row (unique per parent step run and key, whatever its status): the child a rerun of its parent step finds instead of submitting another.
SELECT id, flow, status, created_at
FROM engine_jobs
WHERE parent_step_run_id = %(parent_step_run_id)s AND child_key = %(child_key)s;

-- job_select_children --
-- Read by the waiting step in its fenced transaction: the children of a step run, in the order they were submitted, each done one with the checkpoint of its step run that finished last (its result, for a flow that ends in one step); writes nothing.
SELECT c.id, c.flow, c.status, c.child_key, c.error, c.created_at, c.finished_at, c.rejected,
       (SELECT s.output FROM engine_step_runs AS s
        WHERE s.job_id = c.id AND s.status = 'done' AND c.status = 'done'
        ORDER BY s.finished_at DESC, s.id
        LIMIT 1) AS output
FROM engine_jobs AS c
WHERE c.parent_step_run_id = %(parent_step_run_id)s
ORDER BY c.created_at, c.id;

-- job_lock_children --
-- A parent step about to park waits here for any child ending at that moment (its transaction holds the child row) to commit, so the park sees that end; taken after the parent job row, before the parent step run (the one lock order: parent job, child jobs, step runs).
SELECT id FROM engine_jobs
WHERE parent_step_run_id = %(parent_step_run_id)s
ORDER BY id
FOR SHARE;

-- job_cancel_descendants --
-- A job cancelled or failed leaves no child running: its active children, theirs, and so on are cancelled in the transaction that ended it (after its row, before any step run: the one lock order); they are locked level by level, ascending ids within a level (parent before child, so two cancels of nested jobs of one tree cannot deadlock); the ones cancelled are returned so their step runs follow.
WITH RECURSIVE tree AS (
    SELECT id, 1 AS depth FROM engine_jobs WHERE parent_job_id = %(job_id)s
    UNION
    SELECT c.id, tree.depth + 1 FROM engine_jobs AS c JOIN tree ON c.parent_job_id = tree.id
), locked AS (
    SELECT j.id
    FROM engine_jobs AS j
    JOIN tree ON j.id = tree.id
    WHERE j.status IN ('pending', 'running')
    ORDER BY tree.depth, j.id
    FOR NO KEY UPDATE OF j
)
UPDATE engine_jobs AS j
SET status = 'cancelled', finished_at = clock_timestamp(), error = %(reason)s
FROM locked
WHERE j.id = locked.id AND j.status IN ('pending', 'running')
RETURNING j.id;

-- job_select_version --
-- Read-only and cheap (index probes: the job's primary key, its newest event, its newest audit entry, and its step runs' first claims and successes, which are folded into them and not events: migration 0035): what a live page compares to know whether the job changed since it last drew it.
SELECT j.status,
       (SELECT max(e.id) FROM engine_events AS e WHERE e.job_id = j.id) AS last_event,
       (SELECT max(a.id) FROM engine_audit AS a WHERE a.job_id = j.id) AS last_audit,
       (SELECT count(s.started_by) + count(s.finished_by)
        FROM engine_step_runs AS s WHERE s.job_id = j.id) AS folded
FROM engine_jobs AS j
WHERE j.id = %(job_id)s;

-- job_select_state_locked --
-- A bulk action re-checks each job against the state it was previewed in under the job's row lock (FOR NO KEY UPDATE, the lock order's first step), so nothing changes it between the check and the action.
SELECT id, status, finished_at FROM engine_jobs WHERE id = %(job_id)s FOR NO KEY UPDATE;

-- job_select_many_locked --
-- A bulk action's chunk: its jobs' rows locked in one statement (FOR NO KEY UPDATE, in id order: the lock order's first step, and no two chunks deadlock), with what its re-check compares (status, finished_at) and what says whether the set-based retry may act on it as the single one would: no parent, not rejected, no failed or cancelled child (so the single retry would reopen it alone and refuse nothing).
SELECT j.id, j.status, j.finished_at,
       j.parent_job_id IS NULL AND NOT j.rejected
       AND NOT EXISTS (SELECT 1 FROM engine_jobs AS c
                       WHERE c.parent_job_id = j.id AND c.status IN ('failed', 'cancelled'))
       AS alone
FROM engine_jobs AS j
WHERE j.id = ANY(%(ids)s::uuid[])
ORDER BY j.id
FOR NO KEY UPDATE OF j;

-- job_reopen_many_if_ended --
-- Retry of failed or cancelled jobs: one job's (its children follow by job_reopen_children_if_ended), or a bulk action's chunk of jobs with no children to reopen (job_select_many_locked's alone); the partial unique index refuses the whole statement if one of them has its fingerprint active elsewhere (the caller runs it in a savepoint and names that job, or acts on that chunk one job at a time).
UPDATE engine_jobs
SET status = 'running', finished_at = NULL, error = NULL
WHERE id = ANY(%(ids)s::uuid[]) AND status IN ('failed', 'cancelled')
RETURNING id;

-- job_pin_if_exists --
-- An operator keeps a job (live, active or ended) past its retention until a date, with why; zero rows: no such live job (pruned already, or never).
UPDATE engine_jobs SET pinned_until = %(until)s, pinned_reason = %(reason)s
WHERE id = %(job_id)s
RETURNING id, flow, status;
