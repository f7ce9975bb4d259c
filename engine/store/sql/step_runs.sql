-- step_run_insert_many --
-- A step key exists once per job: a step run already inserted is skipped, and only the new ones get an outbox row, in the caller's transaction (invariant 8); written already published (published = true) for a transport that publishes in this same transaction, so the sweeper counts it as announced and no relay sends it again.
WITH new_runs AS (
    INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, max_attempts, item,
                                  concurrency_key, concurrency_limit, concurrency_per_job)
    SELECT r.id, %(job_id)s, r.step, r.fanout_key, r.fingerprint, r.max_attempts, r.item,
           r.concurrency_key, r.concurrency_limit, r.concurrency_per_job
    FROM unnest(%(ids)s::uuid[], %(steps)s::text[], %(fanout_keys)s::text[],
                %(fingerprints)s::text[], %(max_attempts)s::int[], %(items)s::jsonb[],
                %(concurrency_keys)s::text[], %(concurrency_limits)s::int[],
                %(concurrency_per_job)s::boolean[])
         AS r (id, step, fanout_key, fingerprint, max_attempts, item,
               concurrency_key, concurrency_limit, concurrency_per_job)
    ON CONFLICT ON CONSTRAINT engine_step_runs_step_key DO NOTHING
    RETURNING id
)
INSERT INTO engine_outbox (step_run_id, published_at)
SELECT n.id, CASE WHEN %(published)s THEN clock_timestamp() END FROM new_runs AS n
RETURNING id, step_run_id;

-- step_claim_if_available --
-- Invariant 2: one conditional UPDATE (pending and due, or running with an expired lease, of an active job of a flow version this worker runs, under the attempt cap, with a slot of its concurrency key free) takes a fresh token and attempts + 1 (a woken wait's slot, kept by status, is held by the lease from here on); the job row is locked first (the one lock order: job, then its key's advisory lock, then its step runs), the job start and the claimed/reclaimed event are written only from the row it returns, in the same statement (the first claim of a step run is not an event row but its started_by, read through engine_history); zero rows is a normal outcome.
WITH job AS (
    SELECT j.id, j.flow, j.params, j.traceparent
    FROM engine_jobs AS j
    WHERE j.id = %(job_id)s
      AND j.status IN ('pending', 'running')
      AND (j.flow || ':' || j.flow_version) = ANY (%(runnable)s::text[])
    FOR NO KEY UPDATE
), claimed AS (
    UPDATE engine_step_runs AS s
    SET status = 'running',
        attempts = s.attempts + 1,
        lease_owner = %(worker)s,
        lease_token = gen_random_uuid(),
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
        started_at = coalesce(s.started_at, clock.t),
        started_by = CASE WHEN s.started_at IS NULL AND s.attempts = 0
                          THEN %(worker)s ELSE s.started_by END,
        claimed_at = clock.t,
        concurrency_kept = false
    -- clock: one reading for started_at and claimed_at, so that a first claim is told from
    -- the row as it is when claimed (prev may be an older version: see first_claim)
    FROM engine_step_runs AS prev, job AS j, (SELECT clock_timestamp() AS t) AS clock
    WHERE s.id = %(id)s
      AND s.job_id = j.id
      AND prev.id = s.id
      AND s.attempts < s.max_attempts
      AND ((s.status = 'pending' AND s.available_at <= clock_timestamp())
        OR (s.status = 'running' AND s.lease_expires_at <= clock_timestamp()))
      -- last, and over j: the key is locked (waited for) only once the job row is
      AND (s.concurrency_key IS NULL
        OR engine_concurrency_slot_free(s.concurrency_key, s.concurrency_limit,
                                        s.concurrency_per_job, j.id, s.id, 'wait'))
    RETURNING s.id, s.job_id, s.step, s.fanout_key, s.fingerprint, s.attempts, s.max_attempts,
              s.attempt_base, s.retries,
              s.lease_token, s.lease_expires_at, s.item, s.concurrency_key, j.flow, j.params,
              j.traceparent,
              prev.status AS previous_status, prev.lease_owner AS previous_owner,
              -- folded (started_by set) from the row as it was when claimed, never from
              -- prev, which a concurrent claim and release may have left behind
              (s.started_by IS NOT NULL AND s.attempts = 1
               AND s.started_at = s.claimed_at) AS first_claim
), started AS (
    UPDATE engine_jobs
    SET status = 'running', started_at = clock_timestamp()
    WHERE id = (SELECT c.job_id FROM claimed AS c) AND (status = 'pending' OR started_at IS NULL)
), logged AS (
    INSERT INTO engine_events (kind, job_id, step_run_id, worker, attempt, detail)
    SELECT CASE WHEN c.previous_status = 'running' THEN 'reclaimed' ELSE 'claimed' END,
           c.job_id, c.id, %(worker)s, c.attempts,
           CASE WHEN c.previous_status = 'running'
                THEN jsonb_build_object('from', c.previous_owner) ELSE '{}'::jsonb END
    FROM claimed AS c
    WHERE NOT c.first_claim  -- the first is folded into the row (started_by: migration 0035)
)
SELECT * FROM claimed;

-- step_claim_many_if_available --
-- Invariant 2 for a batch of deliveries: one conditional UPDATE over their (step run, job) pairs claims every one that is claimable, each with a fresh token and attempts + 1, exactly as step_claim_if_available does for one; the jobs are locked first, in id order (the one lock order), and zero or more rows are normal; a first claim, folded into its row, says the batch it came in (started_detail). A step run with a concurrency key is left out (the key's holders are counted by a statement's snapshot, which would not see the batch's own earlier rows): its delivery is claimed on its own.
WITH wanted AS (
    SELECT m.id, m.job_id FROM unnest(%(ids)s::uuid[], %(job_ids)s::uuid[]) AS m (id, job_id)
), jobs AS (
    SELECT j.id, j.flow, j.params, j.traceparent
    FROM engine_jobs AS j
    -- by key, and active by finished_at (engine_jobs_check), never by status: planned from
    -- no statistics, or a short queue's, a semi-join with `wanted` or a status filter read
    -- every active job through the partial index of active jobs (13 ms behind 2,000 jobs)
    WHERE j.id = ANY (%(job_ids)s::uuid[])
      AND j.finished_at IS NULL
      AND (j.flow || ':' || j.flow_version) = ANY (%(runnable)s::text[])
    ORDER BY j.id
    FOR NO KEY UPDATE
), claimed AS (
    UPDATE engine_step_runs AS s
    SET status = 'running',
        attempts = s.attempts + 1,
        lease_owner = %(worker)s,
        lease_token = gen_random_uuid(),
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
        started_at = coalesce(s.started_at, clock.t),
        started_by = CASE WHEN s.started_at IS NULL AND s.attempts = 0
                          THEN %(worker)s ELSE s.started_by END,
        started_detail = CASE WHEN s.started_at IS NULL AND s.attempts = 0
                              AND cardinality(%(ids)s::uuid[]) > 1
                              THEN jsonb_build_object('batch', cardinality(%(ids)s::uuid[]))
                              ELSE s.started_detail END,
        claimed_at = clock.t
    FROM engine_step_runs AS prev, jobs AS j, wanted AS w,
         (SELECT clock_timestamp() AS t) AS clock  -- one reading: see step_claim_if_available
    WHERE s.id = w.id
      AND s.job_id = w.job_id
      AND s.job_id = j.id
      AND prev.id = s.id
      AND s.concurrency_key IS NULL
      AND s.attempts < s.max_attempts
      AND ((s.status = 'pending' AND s.available_at <= clock_timestamp())
        OR (s.status = 'running' AND s.lease_expires_at <= clock_timestamp()))
    RETURNING s.id, s.job_id, s.step, s.fanout_key, s.fingerprint, s.attempts, s.max_attempts,
              s.attempt_base, s.retries,
              s.lease_token, s.lease_expires_at, s.item, s.concurrency_key, j.flow, j.params,
              j.traceparent,
              prev.status AS previous_status, prev.lease_owner AS previous_owner,
              -- folded (started_by set) from the row as it was when claimed, never from
              -- prev, which a concurrent claim and release may have left behind
              (s.started_by IS NOT NULL AND s.attempts = 1
               AND s.started_at = s.claimed_at) AS first_claim
), started AS (
    UPDATE engine_jobs
    SET status = 'running', started_at = clock_timestamp()
    WHERE id IN (SELECT c.job_id FROM claimed AS c) AND (status = 'pending' OR started_at IS NULL)
), logged AS (
    INSERT INTO engine_events (kind, job_id, step_run_id, worker, attempt, detail)
    SELECT CASE WHEN c.previous_status = 'running' THEN 'reclaimed' ELSE 'claimed' END,
           c.job_id, c.id, %(worker)s, c.attempts,
           CASE WHEN c.previous_status = 'running'
                THEN jsonb_build_object('from', c.previous_owner) ELSE '{}'::jsonb END
    FROM claimed AS c
    WHERE NOT c.first_claim  -- the first is folded into the row (started_by: migration 0035)
)
SELECT * FROM claimed;

-- step_select_claim_refusal --
-- Read after a claim matched zero rows, only to decide what to do with the message; never used to write.
SELECT s.status, s.attempts, s.max_attempts, s.job_id, j.flow, j.flow_version,
       s.status = 'running' AND s.lease_expires_at > clock_timestamp() AS lease_live,
       greatest(0, extract(epoch FROM s.available_at - clock_timestamp()))::float8 AS due_in_s,
       greatest(0, extract(epoch FROM s.lease_expires_at - clock_timestamp()))::float8 AS lease_left_s,
       j.status AS job_status, s.concurrency_key,
       NOT engine_concurrency_slot_free(s.concurrency_key, s.concurrency_limit,
                                        s.concurrency_per_job, s.job_id, s.id, 'none') AS over_limit
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id
WHERE s.id = %(id)s AND s.job_id = %(job_id)s;

-- step_run_insert_claimed --
-- An eager successor: created already leased (attempts 1, a fresh token) to the worker whose checkpoint made it ready, in that checkpoint's transaction and under the job's row lock, so no other worker can have seen it pending; the insert is conditional on the step key, and zero rows (it exists already) means "not ours". Over its concurrency limit (or its key locked by a claim: only tried, never waited for under the job lock) it is created pending instead, costs no attempt, and is announced after the commit if its key has a slot free by then (outbox_insert_if_slot_free: the lock was only busy), else by its key's holder when that ends. Its claim is the row itself (started_by, started_detail: migration 0035); the claim_refused event is written only for the row it returns. No outbox row: should the worker die, the lease lapses and the sweeper announces it (invariant 9).
WITH slot AS (
    SELECT %(concurrency_key)s::text IS NULL
        OR engine_concurrency_slot_free(%(concurrency_key)s::text, %(concurrency_limit)s::int,
                                        %(concurrency_per_job)s::boolean, %(job_id)s::uuid,
                                        %(id)s::uuid, 'try') AS free
), claimed AS (
    INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, max_attempts, item,
                                  concurrency_key, concurrency_limit, concurrency_per_job,
                                  status, attempts, lease_owner, lease_token, lease_expires_at,
                                  started_at, claimed_at, started_by, started_detail)
    SELECT %(id)s::uuid, %(job_id)s::uuid, %(step)s::text, %(fanout_key)s::text,
           %(fingerprint)s::text, %(max_attempts)s::int,
           %(item)s::jsonb, %(concurrency_key)s::text, %(concurrency_limit)s::int,
           %(concurrency_per_job)s::boolean,
           CASE WHEN slot.free THEN 'running' ELSE 'pending' END,
           CASE WHEN slot.free THEN 1 ELSE 0 END,
           CASE WHEN slot.free THEN %(worker)s END,
           CASE WHEN slot.free THEN gen_random_uuid() END,
           CASE WHEN slot.free THEN clock_timestamp() + make_interval(secs => %(lease_s)s) END,
           CASE WHEN slot.free THEN clock_timestamp() END,
           CASE WHEN slot.free THEN clock_timestamp() END,
           CASE WHEN slot.free THEN %(worker)s END,
           CASE WHEN slot.free THEN '{"eager": true}'::jsonb END
    FROM slot
    ON CONFLICT ON CONSTRAINT engine_step_runs_step_key DO NOTHING
    RETURNING id, job_id, step, fanout_key, fingerprint, attempts, max_attempts,
              lease_token, lease_expires_at, item, concurrency_key, status
), logged AS (
    INSERT INTO engine_events (kind, job_id, step_run_id, worker, attempt, detail)
    SELECT 'claim_refused', c.job_id, c.id, %(worker)s, c.attempts,
           jsonb_build_object('reason', 'over_limit', 'key', c.concurrency_key, 'eager', true)
    FROM claimed AS c
    WHERE c.status <> 'running'  -- a claim is folded into the row (started_by: migration 0035)
)
SELECT * FROM claimed;

-- step_run_insert_claimed_many --
-- step_run_insert_claimed for a round's eager successors that hold no concurrency key (a keyed one counts its key's holders by its statement's snapshot, which would not see its neighbours' rows: it goes alone), in one statement: each created already leased to the worker whose checkpoint made it ready, in that checkpoint's transaction and under its job's row lock; the insert is conditional on the step key, and no row for one (it exists already) means "not ours". A row per successor created, with its place in the arrays (n). No outbox row: should the worker die, the lease lapses and the sweeper announces it (invariant 9).
WITH given AS (
    SELECT g.*
    FROM unnest(%(id)s::uuid[], %(job_id)s::uuid[], %(step)s::text[], %(fanout_key)s::text[],
                %(fingerprint)s::text[], %(max_attempts)s::int[], %(item)s::jsonb[],
                %(concurrency_per_job)s::boolean[])
         WITH ORDINALITY AS g (id, job_id, step, fanout_key, fingerprint, max_attempts, item,
                               concurrency_per_job, n)
), claimed AS (
    INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, max_attempts, item,
                                  concurrency_per_job,
                                  status, attempts, lease_owner, lease_token, lease_expires_at,
                                  started_at, claimed_at, started_by, started_detail)
    SELECT g.id, g.job_id, g.step, g.fanout_key, g.fingerprint, g.max_attempts, g.item,
           g.concurrency_per_job,
           'running', 1, %(worker)s, gen_random_uuid(),
           clock_timestamp() + make_interval(secs => %(lease_s)s),
           clock_timestamp(), clock_timestamp(), %(worker)s, '{"eager": true}'::jsonb
    FROM given AS g
    ORDER BY g.n
    ON CONFLICT ON CONSTRAINT engine_step_runs_step_key DO NOTHING
    RETURNING id, job_id, step, fanout_key, fingerprint, attempts, max_attempts,
              lease_token, lease_expires_at, item, concurrency_key, status
)
SELECT c.*, g.n FROM claimed AS c JOIN given AS g ON g.id = c.id;

-- step_savepoint --
-- A step in a group commit that writes nothing of its own sets its savepoint in its checkpoint's message: should anything after it fail (or be refused), the group rolls back to it, and the neighbours' checkpoints before it still commit. Set once per step and never released (a rollback goes to the latest one of this name).
SAVEPOINT engine_step;

-- step_savepoint_rollback --
-- Back to the savepoint of the step that failed; the group goes on (its neighbours commit).
ROLLBACK TO SAVEPOINT engine_step;

-- lease_extend_if_owner --
-- Invariant 4: only the holder of the current token renews, by the database clock; zero rows means the lease was lost. A lease holding a concurrency slot is never renewed once expired: its slot may have gone to the next holder, so it stays lost; looked at under the key's lock (no job row lock: a renewal holds nothing else), so a renewal never commits after a claim counted the lease as lapsed.
UPDATE engine_step_runs
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s)
WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
  AND (concurrency_key IS NULL
       OR engine_concurrency_hold(concurrency_key, NULL, id, %(token)s::uuid))
RETURNING lease_expires_at;

-- lease_release_if_owner --
-- Invariants 13 and 14: the holder gives the step run back at once (shutdown, a step it cannot run) with the attempt it had taken, so a release never leaves a row at its cap; a lost lease releases nothing.
UPDATE engine_step_runs
SET status = 'pending', available_at = clock_timestamp(), attempts = attempts - 1,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
RETURNING id;

-- lease_release_free_if_owner --
-- Invariants 14, 18 and 20: the holder gives back a step run whose body ran but did not commit through no fault of its own (its checkpoint lost a lock wait or a deadlock, its group was rolled back) with the attempt it had taken, counting the free release, only while it has released fewer than `max` since it last parked; zero rows: the lease was lost, or its free releases are spent (it is charged instead: step_release_charged_if_leased).
UPDATE engine_step_runs
SET status = 'pending', available_at = clock_timestamp(), attempts = attempts - 1,
    free_releases = free_releases + 1,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
  AND free_releases < %(max)s
RETURNING free_releases;

-- step_release_charged_if_leased --
-- Invariant 20: past its free releases the holder gives the step run back charged: the attempt it took stays used, it is due after its backoff with the reason as its error, only under the attempt cap (at the cap it is dead-lettered instead); it touches this one step row and no job row, like a release, so it never waits for whatever held its checkpoint up.
UPDATE engine_step_runs
SET status = 'pending', available_at = clock_timestamp() + make_interval(secs => %(delay_s)s),
    error = %(error)s,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
  AND attempts < max_attempts
RETURNING available_at, free_releases;

-- step_select_status --
-- Read after a fenced write matched zero rows, only to say why (cancelled, or owned by another attempt); never used to write.
SELECT s.status, j.status AS job_status
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id
WHERE s.id = %(id)s;

-- checkpoint_put_if_leased --
-- Invariant 5: the output commits only while our token is current, and for a step run holding a concurrency slot only while its lease is live (an expired slot may have gone to the next holder), looked at under the key's lock so that it serialises with the key's claims (engine_concurrency_hold, migration 0018: a claim counting the holders waits for this commit); zero rows rolls back the whole step transaction; the job row is locked first, which serialises the completions of one job, and the success is written only with a real checkpoint, on the row itself (finished_by, finished_detail: migration 0035; engine_history reads it as the succeeded event), with when the step started running (timed: on the database clock, as the worker's slot converts its own) and how long it ran.
WITH job AS (
    SELECT id, status FROM engine_jobs WHERE id = %(job_id)s FOR NO KEY UPDATE
), done AS (
    UPDATE engine_step_runs AS s
    SET status = 'done', output = %(output)s, finished_at = clock_timestamp(),
        finished_by = %(worker)s,
        finished_detail = CASE WHEN %(timed)s::boolean THEN jsonb_build_object(
            'started_at', %(started_at)s::timestamptz, 'ran_s', %(ran_s)s::float8) END,
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM job
    WHERE s.id = %(id)s AND s.job_id = job.id
      AND s.lease_token = %(token)s AND s.status = 'running'
      AND (s.concurrency_key IS NULL
       OR engine_concurrency_hold(s.concurrency_key, s.job_id, s.id, %(token)s::uuid))
    RETURNING s.id, s.job_id, s.attempts, s.output
)
SELECT job.status AS job_status, done.id IS NOT NULL AS checkpointed,
       CASE WHEN %(with_output)s THEN done.output END AS output
FROM job LEFT JOIN done ON true;

-- checkpoint_put_many_if_leased --
-- checkpoint_put_if_leased for a round's step runs (of distinct jobs, engine.runner.rounds) in one statement, not one per step run: the jobs locked first, in id order (the one lock order), then every checkpoint guarded by its own token (and, holding a key, its key's lock) exactly as alone; a refused one writes nothing and its row says so (checkpointed false), its neighbours are as they would be without it. A row per step run given, in the order given (n). Executor start-up, the CHECK constraints read again and the plan looked up were per statement: a round of ten paid them ten times.
WITH given AS (
    SELECT g.*
    FROM unnest(%(ids)s::uuid[], %(job_ids)s::uuid[], %(tokens)s::uuid[], %(outputs)s::jsonb[],
                %(timed)s::boolean[], %(started_at)s::timestamptz[], %(ran_s)s::float8[],
                %(with_output)s::boolean[])
         WITH ORDINALITY AS g (id, job_id, token, output, timed, started_at, ran_s, with_output, n)
), job AS (
    -- locked one by one on its key, in id order (a lateral lookup runs in its outer
    -- rows' order); `id = ANY` or a join, planned with no statistics, read every job
    SELECT j.id, j.status
    FROM (SELECT DISTINCT k.id FROM unnest(%(job_ids)s::uuid[]) AS k (id) ORDER BY k.id) AS k
    CROSS JOIN LATERAL (
        SELECT id, status FROM engine_jobs WHERE id = k.id FOR NO KEY UPDATE
    ) AS j
), done AS (
    UPDATE engine_step_runs AS s
    SET status = 'done', output = g.output, finished_at = clock_timestamp(),
        finished_by = %(worker)s,
        finished_detail = CASE WHEN g.timed THEN jsonb_build_object(
            'started_at', g.started_at, 'ran_s', g.ran_s) END,
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM given AS g, job
    WHERE s.id = g.id AND s.job_id = g.job_id AND job.id = g.job_id
      AND s.lease_token = g.token AND s.status = 'running'
      AND (s.concurrency_key IS NULL
       OR engine_concurrency_hold(s.concurrency_key, s.job_id, s.id, g.token))
    RETURNING s.id, s.output
)
SELECT job.status AS job_status, done.id IS NOT NULL AS checkpointed,
       CASE WHEN g.with_output THEN done.output END AS output
FROM given AS g
LEFT JOIN job ON job.id = g.job_id
LEFT JOIN done ON done.id = g.id
ORDER BY g.n;

-- step_counts_by_jobs --
-- step_counts_by_job for a round's jobs, read after its checkpoints (their job locks held): each job's steps and how many of each are done.
SELECT k.job_id, c.step, c.total, c.done
FROM (SELECT DISTINCT k.job_id FROM unnest(%(job_ids)s::uuid[]) AS k (job_id)) AS k
CROSS JOIN LATERAL (
    -- job by job on its key (a join of all of them was planned, with no statistics, as
    -- one read of every step run)
    SELECT s.step, count(*)::int AS total, count(*) FILTER (WHERE s.status = 'done')::int AS done
    FROM engine_step_runs AS s
    WHERE s.job_id = k.job_id
    GROUP BY s.step
) AS c;

-- step_retry_if_leased --
-- Invariant 16: only the lease holder schedules a retry, and only under the attempt cap; the job row is locked first (one lock order).
WITH job AS (
    SELECT id FROM engine_jobs WHERE id = %(job_id)s FOR NO KEY UPDATE
)
UPDATE engine_step_runs AS s
SET status = 'pending',
    available_at = clock_timestamp() + make_interval(secs => %(delay_s)s),
    error = %(error)s,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
FROM job
WHERE s.id = %(id)s AND s.job_id = job.id AND s.lease_token = %(token)s AND s.status = 'running'
  AND s.attempts < s.max_attempts
RETURNING s.available_at;

-- step_dead_if_leased --
-- Invariant 16: only the lease holder dead-letters its step run (attempts exhausted or a permanent failure); the job row is locked first (one lock order).
WITH job AS (
    SELECT id FROM engine_jobs WHERE id = %(job_id)s FOR NO KEY UPDATE
)
UPDATE engine_step_runs AS s
SET status = 'dead', error = %(error)s, finished_at = clock_timestamp(),
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
FROM job
WHERE s.id = %(id)s AND s.job_id = job.id AND s.lease_token = %(token)s AND s.status = 'running'
RETURNING s.id, s.job_id, s.attempts;

-- step_dead_if_expired_exhausted_many --
-- A worker died during the last allowed attempt: its lease expired and no claim may follow, so the step run is dead; the jobs are locked first, in id order (one lock order).
WITH jobs AS (
    SELECT j.id, j.flow
    FROM engine_jobs AS j
    WHERE j.id IN (
        SELECT s.job_id FROM engine_step_runs AS s
        WHERE s.status = 'running' AND s.lease_expires_at <= clock_timestamp()
          AND s.attempts >= s.max_attempts)
    ORDER BY j.id
    FOR NO KEY UPDATE
)
UPDATE engine_step_runs AS s
SET status = 'dead', finished_at = clock_timestamp(),
    error = coalesce(s.error, '{}'::jsonb) || jsonb_build_object(
        'type', 'LeaseExpired',
        'message', 'the worker holding the last allowed attempt stopped renewing its lease',
        'worker', s.lease_owner),
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
FROM jobs
WHERE s.job_id = jobs.id
  AND s.status = 'running' AND s.lease_expires_at <= clock_timestamp()
  AND s.attempts >= s.max_attempts
RETURNING s.id, s.job_id, s.attempts, s.step, jobs.flow;

-- step_sweep_slice --
-- Read only: where the next slice of the queue a sweep checks ends (invariants 9 and 13), never the whole of it: up to limit pending step runs in (available_at, id) order after (pending_at, pending_id), and up to limit running ones in (lease_expires_at, id) order after (running_at, running_id), each read along its partial index (0041); for each part with any, how many and the last one's key (a part with none has no row). A part with fewer than limit has reached its end (the sweeper starts it over).
WITH pending AS (
    SELECT s.available_at AS at, s.id
    FROM engine_step_runs AS s
    WHERE s.status = 'pending' AND (s.available_at, s.id) > (%(pending_at)s, %(pending_id)s)
    ORDER BY s.available_at, s.id
    LIMIT %(limit)s
), running AS (
    SELECT s.lease_expires_at AS at, s.id
    FROM engine_step_runs AS s
    WHERE s.status = 'running' AND (s.lease_expires_at, s.id) > (%(running_at)s, %(running_id)s)
    ORDER BY s.lease_expires_at, s.id
    LIMIT %(limit)s
)
(SELECT 'pending' AS status, count(*) OVER ()::int AS n, p.at, p.id
 FROM pending AS p ORDER BY p.at DESC, p.id DESC LIMIT 1)
UNION ALL
(SELECT 'running', count(*) OVER ()::int, r.at, r.id
 FROM running AS r ORDER BY r.at DESC, r.id DESC LIMIT 1);

-- step_cancel_if_job_ended_many --
-- Invariant 13: a step run left pending, running or waiting under a job that ended (a dead worker's lease, an older engine) is finished as cancelled: those of the sweep's slice (engine_sweep_slice, pending and running) and every waiting one; the jobs are locked first, in id order, and re-checked as ended under the lock (a concurrent retry reopens them). Each candidate job is looked up by key (an array unnested): with a join, the planner merged the candidates with every job in key order, expecting the limit to stop it early, and read all 4.7M when none had ended (14 s).
WITH ended AS (
    SELECT j.id
    FROM unnest(ARRAY(
        SELECT job_id FROM engine_sweep_slice(
            %(pending_after_at)s, %(pending_after_id)s, %(pending_upto_at)s, %(pending_upto_id)s,
            %(running_after_at)s, %(running_after_id)s, %(running_upto_at)s, %(running_upto_id)s)
        UNION
        SELECT job_id FROM engine_step_runs WHERE status = 'waiting')) AS c (id)
    JOIN engine_jobs AS j ON j.id = c.id
    WHERE j.status IN ('done', 'failed', 'cancelled')
    ORDER BY j.id
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF j
)
UPDATE engine_step_runs AS s
SET status = 'cancelled', finished_at = clock_timestamp(),
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
FROM ended
WHERE s.job_id = ended.id AND s.status IN ('pending', 'running', 'waiting')
RETURNING s.id, s.job_id, s.attempts;

-- step_counts_by_job --
-- Scheduling reads the state of every step of the job under the job lock.
SELECT step, count(*)::int AS total, count(*) FILTER (WHERE status = 'done')::int AS done
FROM engine_step_runs
WHERE job_id = %(job_id)s
GROUP BY step;

-- step_outputs_select --
-- Checkpoints are immutable once done, so reading them needs no lock.
SELECT step, fanout_key, output
FROM engine_step_runs
WHERE job_id = %(job_id)s AND step = ANY (%(steps)s::text[]) AND status = 'done';

-- step_cancel_by_job --
-- Clearing the tokens fences every running step of the job (ended, under its row lock): their commits are refused, and their heartbeats read "cancelled"; a waiting one waits no more.
UPDATE engine_step_runs
SET status = 'cancelled', finished_at = clock_timestamp(),
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE job_id = %(job_id)s AND status IN ('pending', 'running', 'waiting')
RETURNING id;

-- step_select_queue_lag --
-- Read-only, for metrics: the age of the oldest step run claimable now by the claim's own predicate (pending and due, or running with an expired lease, under the cap, of an active job, with a slot of its concurrency key free: waiting for a limit is not lag), from when it became claimable; 0 when none waits.
SELECT coalesce(extract(epoch FROM clock_timestamp() - min(
           CASE WHEN s.status = 'pending' THEN s.available_at ELSE s.lease_expires_at END)),
       0)::float8 AS lag_s
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id AND j.status IN ('pending', 'running')
WHERE s.attempts < s.max_attempts
  AND ((s.status = 'pending' AND s.available_at <= clock_timestamp())
    OR (s.status = 'running' AND s.lease_expires_at <= clock_timestamp()))
  AND (s.concurrency_key IS NULL
    OR engine_concurrency_slot_free(s.concurrency_key, s.concurrency_limit,
                                    s.concurrency_per_job, s.job_id, s.id, 'none'));

-- step_count_by_status --
-- Read-only, for `engine status --json`: every step run counted once, by its status.
SELECT status, count(*)::int AS n FROM engine_step_runs GROUP BY status;

-- lease_live --
-- Read-only: is the lease `token` on step run `id` still ours and live, by the database clock? A step submitting a child job asks first (issue 27): a step run whose lease lapsed holds nothing, its key's slot least of all, so it hands nothing on; its commit (a park or a checkpoint) looks again under its key's lock.
SELECT EXISTS (
    SELECT 1 FROM engine_step_runs
    WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
      AND lease_expires_at > clock_timestamp()) AS live;

-- step_reopen_by_jobs --
-- Resume the jobs (their rows locked; one job's retry, or a bulk retry's chunk) from their last checkpoints: only dead and cancelled step runs go back to pending, in a new retry round (retries + 1; attempts restart from attempt_base, the cap moves by the step's own budget, never grows) and with a fresh wait (a timed-out wait waits again); done ones are never rerun.
UPDATE engine_step_runs
SET status = 'pending', available_at = clock_timestamp(), finished_at = NULL,
    retries = retries + 1, attempt_base = attempts,
    max_attempts = attempts + (max_attempts - attempt_base), free_releases = 0,
    wait_signal = NULL, wait_until = NULL,
    wait_children = false, wait_past = '{}', wait_summary = NULL, concurrency_kept = false
WHERE job_id = ANY(%(ids)s::uuid[]) AND status IN ('dead', 'cancelled')
RETURNING id, job_id;
