-- outbox_lock_unpublished_many --
-- SKIP LOCKED: concurrent relays never hand the same row on at once; rows of uncommitted transactions are invisible, so nothing is published before its commit.
SELECT o.id, o.step_run_id, s.job_id,
       greatest(0, extract(epoch FROM o.deliver_at - clock_timestamp()))::float8 AS delay_s
FROM engine_outbox AS o
JOIN engine_step_runs AS s ON s.id = o.step_run_id
WHERE o.published_at IS NULL
  AND (%(ids)s::bigint[] IS NULL OR o.id = ANY (%(ids)s::bigint[]))
  AND o.deliver_at <= clock_timestamp() + make_interval(secs => %(horizon_s)s)
ORDER BY o.id
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;

-- outbox_mark_published_many --
-- Marked after the rows were handed on: a crash in between causes a harmless duplicate, never a loss.
UPDATE engine_outbox
SET published_at = clock_timestamp()
WHERE id = ANY (%(ids)s::bigint[]) AND published_at IS NULL
RETURNING id;

-- outbox_notify --
-- Sent in a caller's transaction that wrote outbox rows: PostgreSQL delivers it only on commit, so a relay wakes for committed rows only (invariant 8).
SELECT pg_notify('engine_outbox', '');

-- outbox_listen --
-- A relay's own connection listens for committed outbox rows.
LISTEN engine_outbox;

-- outbox_insert_delayed --
-- A retry's announcement, delivered when its backoff ends; in the same transaction as the retry.
INSERT INTO engine_outbox (step_run_id, deliver_at)
VALUES (%(step_run_id)s, %(deliver_at)s)
RETURNING id;

-- outbox_insert_many --
-- Announcements for step runs made ready again, in the same transaction.
INSERT INTO engine_outbox (step_run_id)
SELECT unnest(%(ids)s::uuid[])
RETURNING id;

-- outbox_insert_if_slot_free --
-- An eager successor its checkpoint created pending (its key's lock was busy, or no slot was free), read after that checkpoint committed: announced now if its key has a slot free (the claim its message makes waits for the key's lock, and counts again); otherwise nothing, and the holder's end announces it (outbox_insert_for_freed_keys sees it, committed now).
INSERT INTO engine_outbox (step_run_id)
SELECT s.id
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id AND j.status IN ('pending', 'running')
WHERE s.id = ANY (%(ids)s::uuid[]) AND s.status = 'pending'
  AND engine_concurrency_slot_free(s.concurrency_key, s.concurrency_limit,
                                   s.concurrency_per_job, s.job_id, s.id, 'none')
RETURNING id;

-- outbox_insert_for_claimable --
-- Invariant 9: a claimable step run (due, or lease expired) of the sweep's slice (engine_sweep_slice) or just woken (ids) not announced since it became claimable (or for republish_after) is announced again, up to limit a round (the sweeper checks the same slice again next round when the limit was reached); a lost message delays work, never loses it.
INSERT INTO engine_outbox (step_run_id)
SELECT s.id
FROM (SELECT id, job_id, status, attempts, max_attempts, available_at, lease_expires_at,
             claimed_at
      FROM engine_sweep_slice(
          %(pending_after_at)s, %(pending_after_id)s, %(pending_upto_at)s, %(pending_upto_id)s,
          %(running_after_at)s, %(running_after_id)s, %(running_upto_at)s, %(running_upto_id)s)
      -- woken after the slice's bounds were read: due now, past its end
      UNION ALL
      SELECT id, job_id, status, attempts, max_attempts, available_at, lease_expires_at,
             claimed_at
      FROM engine_step_runs WHERE id = ANY (%(ids)s::uuid[])) AS s
JOIN engine_jobs AS j ON j.id = s.job_id AND j.status IN ('pending', 'running')
WHERE s.attempts < s.max_attempts
  AND ((s.status = 'pending' AND s.available_at <= clock_timestamp())
    OR (s.status = 'running' AND s.lease_expires_at <= clock_timestamp()))
  AND NOT EXISTS (
      SELECT 1 FROM engine_outbox AS o
      WHERE o.step_run_id = s.id
        AND o.deliver_at >= greatest(
            CASE WHEN s.status = 'pending' THEN s.available_at ELSE s.claimed_at END,
            clock_timestamp() - make_interval(secs => %(republish_after_s)s)))
LIMIT %(limit)s
RETURNING id, step_run_id;

-- sweep_lock_try --
-- One sweeper at a time republishes; the others skip this round (the relay itself is safe concurrently). The round that takes the lock runs without JIT (set_config local to its transaction): its statements read by key, and their estimates over a deep queue (a count of an orphaned version's jobs, a slice's function) had PostgreSQL compile one for 0.8 s to run it in 1 ms.
SELECT locked, locked AND set_config('jit', 'off', true) IS NOT NULL AS jit_off
FROM (SELECT pg_try_advisory_xact_lock(hashtextextended('engine.sweeper', 0)) AS locked) AS l;

-- outbox_insert_after --
-- A step run refused at no attempt (left for a worker of another deploy, or over its concurrency limit) is announced again after delay_s (database clock), through the outbox like any announcement, so the sweeper reads it as announced and sends no copy of its own: one copy per waiting step run goes round.
INSERT INTO engine_outbox (step_run_id, deliver_at)
VALUES (%(step_run_id)s, clock_timestamp() + make_interval(secs => %(delay_s)s))
RETURNING id;

-- outbox_insert_after_not_runnable --
-- A step run refused at no attempt because its flow version is not loaded here is announced again through the outbox like outbox_insert_after (one copy goes round): after handoff_s while a live worker (running, seen within live_s by the database clock) has that version loaded, so the refusal never hides it from one that can run it, else after delay_s (a deploy that left no live worker with it: slow enough never to spin).
INSERT INTO engine_outbox (step_run_id, deliver_at)
SELECT s.id,
       clock_timestamp() + make_interval(secs => CASE
           WHEN EXISTS (
               SELECT 1 FROM engine_workers AS w
               WHERE w.status = 'running'
                 AND w.last_seen_at >= clock_timestamp() - make_interval(secs => %(live_s)s::float8)
                 AND (j.flow || ':' || j.flow_version) = ANY (w.runnable))
           THEN %(handoff_s)s::float8 ELSE %(delay_s)s::float8 END)
FROM engine_step_runs AS s
JOIN engine_jobs AS j ON j.id = s.job_id
WHERE s.id = %(step_run_id)s
RETURNING id;

-- outbox_insert_for_freed_keys --
-- No polling storm: for each concurrency key of these jobs' step runs and their descendants' (and, for the sweeper, of holders whose lease expired) that has a slot free now, only the next waiting step runs (pending and due, or running with an expired lease whose reclaim was refused over the limit, under the cap, of an active job, not a woken wait that holds its slot already) are announced: the oldest ones, as many as slots are free, or for a key held per job every waiting step run of the oldest waiting job with a slot free (never those of a job holding it, or freeing it here: they were announced when they became ready, and announcing them at each sibling's checkpoint would send a fan-out's messages over and over; refused meanwhile, another job held the key, and its end announces them); and a woken wait refused over the limit (its slot kept, a child or a parent of its job holding the key meanwhile) once its slot is free; a key still full announces nothing. Holders are running with a live lease or keep their slot by status (waiting, or woken and not yet claimed); a child job's ancestors' holds do not count against it (checked by engine_concurrency_slot_free, only for a child the plain count finds blocked).
WITH RECURSIVE tree (id) AS (
    SELECT unnest(%(job_ids)s::uuid[])
    UNION
    SELECT c.id FROM engine_jobs AS c JOIN tree ON c.parent_job_id = tree.id
), keys AS (
    SELECT DISTINCT s.concurrency_key AS key
    FROM tree
    JOIN engine_step_runs AS s ON s.job_id = tree.id
    WHERE s.concurrency_key IS NOT NULL
    UNION
    SELECT s.concurrency_key
    FROM engine_step_runs AS s
    WHERE %(expired)s AND s.status = 'running' AND s.lease_expires_at <= clock_timestamp()
      AND s.concurrency_key IS NOT NULL
), holders AS (
    SELECT k.key, count(h.id) AS runs,
           coalesce(array_agg(DISTINCT h.job_id) FILTER (WHERE h.id IS NOT NULL),
                    '{}'::uuid[]) AS jobs
    FROM keys AS k
    LEFT JOIN LATERAL (
        SELECT r.id, r.job_id FROM engine_step_runs AS r
        WHERE r.concurrency_key = k.key AND r.status = 'running'
          AND r.lease_expires_at > clock_timestamp()
        UNION ALL
        SELECT r.id, r.job_id FROM engine_step_runs AS r
        WHERE r.concurrency_key = k.key AND r.concurrency_kept
          AND r.status IN ('waiting', 'pending')
    ) AS h ON true
    GROUP BY k.key
), waiting AS (
    SELECT w.id, w.job_id, h.key, w.concurrency_limit AS lim, w.concurrency_per_job AS per_job,
           j.parent_job_id IS NOT NULL AS child, h.runs,
           w.job_id = ANY (h.jobs) OR w.job_id = ANY (%(job_ids)s::uuid[]) AS mine,
           cardinality(h.jobs) - (w.job_id = ANY (h.jobs))::int AS other_jobs,
           row_number() OVER (PARTITION BY h.key ORDER BY w.available_at, w.created_at, w.id) AS n
    FROM holders AS h
    -- each key's step runs read by that key (OFFSET 0 keeps the subquery apart): as a
    -- join, the planner could read every active job's step runs first and the keys
    -- last (15 s at 1.5M pending step runs, none of them keyed)
    CROSS JOIN LATERAL (
        SELECT w.* FROM engine_step_runs AS w
        WHERE w.concurrency_key = h.key AND NOT w.concurrency_kept
          AND w.attempts < w.max_attempts
          AND ((w.status = 'pending' AND w.available_at <= clock_timestamp())
            -- a reclaim refused over the limit: its own copy comes back only later
            OR (w.status = 'running' AND w.lease_expires_at <= clock_timestamp()
                AND EXISTS (SELECT 1 FROM engine_outbox AS o
                            WHERE o.step_run_id = w.id AND o.deliver_at > clock_timestamp())))
        OFFSET 0
    ) AS w
    JOIN engine_jobs AS j ON j.id = w.job_id AND j.status IN ('pending', 'running')
), free AS (
    SELECT w.*
    FROM waiting AS w
    WHERE CASE
        -- its job holds the key (or just held it): its step runs were announced when they
        -- became ready; refused meanwhile, they are announced when the job that held it ends
        WHEN w.per_job AND w.mine THEN false
        WHEN w.per_job AND w.other_jobs < w.lim THEN true
        WHEN NOT w.per_job AND w.n <= w.lim - w.runs THEN true
        WHEN w.child AND (w.per_job OR w.n <= w.lim)
            THEN engine_concurrency_slot_free(w.key, w.lim, w.per_job, w.job_id, w.id, 'none')
        ELSE false END
), firsts AS (
    SELECT f.id, f.job_id, f.per_job, f.n,
           first_value(f.job_id) OVER (PARTITION BY f.key ORDER BY f.n) AS first_job
    FROM free AS f
), woken AS (
    -- a woken wait (its slot kept, not claimed yet) with a slot free now: its
    -- claim may have been refused over the limit (a child of its job, or a job
    -- it is a child of, held the key meanwhile), and its own copy comes back
    -- only later; whether that refusal's copy is committed yet is not looked
    -- at (it may commit just after this), so a wait announced already may be
    -- announced twice: a second copy finds it claimed and is dropped
    SELECT w.id, 0::bigint AS n
    FROM keys AS k
    JOIN engine_step_runs AS w
      ON w.concurrency_key = k.key AND w.concurrency_kept AND w.status = 'pending'
     AND w.available_at <= clock_timestamp() AND w.attempts < w.max_attempts
    JOIN engine_jobs AS j ON j.id = w.job_id AND j.status IN ('pending', 'running')
    WHERE engine_concurrency_slot_free(w.concurrency_key, w.concurrency_limit,
                                       w.concurrency_per_job, w.job_id, w.id, 'none')
)
INSERT INTO engine_outbox (step_run_id)
SELECT a.id
FROM (
    SELECT f.id, f.n FROM firsts AS f WHERE NOT f.per_job OR f.job_id = f.first_job
    UNION ALL
    SELECT w.id, w.n FROM woken AS w
) AS a
ORDER BY a.n
LIMIT %(limit)s
RETURNING id;
