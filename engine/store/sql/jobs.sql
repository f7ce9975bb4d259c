-- job_insert_if_absent --
-- Invariant 7: the conflict target repeats the partial index's predicate, so a second active job with this fingerprint inserts nothing (zero rows: someone else's job exists).
INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, submitted_by)
VALUES (%(id)s, %(flow)s, %(flow_version)s, %(params)s, %(fingerprint)s, %(submitted_by)s)
ON CONFLICT (fingerprint) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id, flow, status, created_at;

-- job_select_active_by_fingerprint --
-- At most one row: the partial unique index allows one active job per fingerprint.
SELECT id, flow, status, created_at
FROM engine_jobs
WHERE fingerprint = %(fingerprint)s AND status IN ('pending', 'running');

-- step_run_insert_many_with_outbox --
-- A step key exists once per job: a step run already inserted is skipped, and only the new ones get an outbox row, in the caller's transaction (invariant 8).
WITH new_runs AS (
    INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, max_attempts, item)
    SELECT r.id, %(job_id)s, r.step, r.fanout_key, r.fingerprint, r.max_attempts, r.item
    FROM unnest(%(ids)s::uuid[], %(steps)s::text[], %(fanout_keys)s::text[],
                %(fingerprints)s::text[], %(max_attempts)s::int[], %(items)s::jsonb[])
         AS r (id, step, fanout_key, fingerprint, max_attempts, item)
    ON CONFLICT ON CONSTRAINT engine_step_runs_step_key DO NOTHING
    RETURNING id
)
INSERT INTO engine_outbox (step_run_id)
SELECT id FROM new_runs
RETURNING id, step_run_id;

-- step_run_insert_many_announced --
-- For a transport that publishes in this same transaction: a step key exists once per job, and each new step run's outbox row is written already published, so the sweeper counts it as announced and no relay sends it again.
WITH new_runs AS (
    INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, max_attempts, item)
    SELECT r.id, %(job_id)s, r.step, r.fanout_key, r.fingerprint, r.max_attempts, r.item
    FROM unnest(%(ids)s::uuid[], %(steps)s::text[], %(fanout_keys)s::text[],
                %(fingerprints)s::text[], %(max_attempts)s::int[], %(items)s::jsonb[])
         AS r (id, step, fanout_key, fingerprint, max_attempts, item)
    ON CONFLICT ON CONSTRAINT engine_step_runs_step_key DO NOTHING
    RETURNING id
)
INSERT INTO engine_outbox (step_run_id, published_at)
SELECT n.id, clock_timestamp() FROM new_runs AS n;

-- job_select_status --
-- The status of one job, for messages to the user.
SELECT status FROM engine_jobs WHERE id = %(job_id)s;

-- job_progress --
-- Step runs finished over step runs known so far (fan-outs add runs as they expand).
SELECT j.status, j.error,
       count(s.id)::int AS total,
       count(s.id) FILTER (WHERE s.status = 'done')::int AS done
FROM engine_jobs AS j
LEFT JOIN engine_step_runs AS s ON s.job_id = j.id
WHERE j.id = %(job_id)s
GROUP BY j.id;
