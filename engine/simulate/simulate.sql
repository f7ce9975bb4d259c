-- sim_database_create --
-- One scratch database per run, named with the seed and the pid: runs sharing a server share no rows.
CREATE DATABASE {database};

-- sim_database_drop --
-- FORCE: workers killed mid-step may leave sessions the server has not ended yet.
DROP DATABASE IF EXISTS {database} WITH (FORCE);

-- sim_effects_create --
-- One effect per step of a job: the unique key turns a second effect into an error the oracles see.
CREATE TABLE IF NOT EXISTS sim_effects (
    job_id   uuid        NOT NULL,
    step     text        NOT NULL,
    attempt  integer     NOT NULL,
    worker   text        NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (job_id, step)
);

-- sim_effect_insert --
-- Runs in the step's fenced transaction: the effect commits with the checkpoint or not at all.
INSERT INTO sim_effects (job_id, step, attempt, worker)
VALUES (%(job_id)s, %(step)s, %(attempt)s, %(worker)s);

-- sim_clock --
-- Faults are stamped by the database clock, the clock of the events they are drawn with.
SELECT clock_timestamp() AS at;

-- sim_running_select --
-- Step runs under a live lease: their owners are mid-step, the only workers a kill may hit.
SELECT id, job_id, step, attempts, max_attempts, lease_owner,
       extract(epoch FROM clock_timestamp() - claimed_at)::float8 AS running_s
FROM engine_step_runs
WHERE status = 'running' AND lease_expires_at > clock_timestamp()
ORDER BY id;

-- sim_delivered_select --
-- Step runs already claimed (running or done): another copy of their message is a duplicate delivery.
SELECT id, job_id, step, status
FROM engine_step_runs
WHERE status IN ('running', 'done')
ORDER BY id;

-- sim_active_jobs_select --
-- Active jobs: submitting their parameters again must return them (one active job per fingerprint).
SELECT id, params
FROM engine_jobs
WHERE status IN ('pending', 'running')
ORDER BY created_at, id;

-- sim_progress --
-- Read-only progress for the console; jobs end once (done, failed or cancelled).
SELECT count(*) AS jobs,
       count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status IN ('pending', 'running')) AS active,
       (SELECT count(*) FROM engine_step_runs WHERE status = 'done') AS steps_done,
       (SELECT count(*) FROM engine_step_runs) AS steps
FROM engine_jobs;

-- oracle_no_double_effect --
-- Oracle 1: exactly one effect per step of every job, and no attempt was turned away by the unique key.
SELECT (SELECT count(*) FROM sim_effects) AS effects,
       (SELECT count(*) FROM engine_jobs AS j
         WHERE (SELECT count(*) FROM sim_effects AS e WHERE e.job_id = j.id) <> %(steps)s)
         AS jobs_off,
       (SELECT count(*) FROM engine_events
         WHERE kind IN ('retried', 'dead_lettered')
           AND detail->>'error' LIKE '%%duplicate key%%') AS refused_by_key;

-- oracle_fencing --
-- Oracle 4: each effect was written by the attempt that checkpointed its step run, never by a worker whose lease was taken over.
SELECT count(*) AS effects,
       count(*) FILTER (WHERE NOT EXISTS (
           SELECT 1 FROM engine_history AS v
           WHERE v.kind = 'succeeded' AND v.step_run_id = s.id
             AND v.worker = e.worker AND v.attempt = e.attempt)
         OR e.attempt <> s.attempts) AS unfenced,
       (SELECT count(*) FROM engine_events WHERE kind = 'fenced') AS fenced_commits
FROM sim_effects AS e
JOIN engine_step_runs AS s ON s.job_id = e.job_id AND s.step = e.step;

-- oracle_nothing_lost --
-- Oracles 7 and 8: every submitted job ended done, with every step run done, and no job ran that was not submitted.
SELECT count(*) AS jobs,
       count(*) FILTER (WHERE status = 'done') AS done,
       (SELECT count(*) FROM engine_step_runs WHERE status <> 'done') AS steps_not_done
FROM engine_jobs;

-- oracle_no_expired_running --
-- Oracle 5: once workers are quiet, no step run is left running under an expired lease.
SELECT count(*) AS stuck
FROM engine_step_runs
WHERE status = 'running' AND lease_expires_at <= clock_timestamp();

-- oracle_attempts --
-- Oracle 6: attempts go up by exactly one per claim (claimed + reclaimed events) and never pass the cap.
SELECT count(*) FILTER (WHERE s.attempts > s.max_attempts) AS over_cap,
       count(*) FILTER (WHERE s.attempts <> c.claims) AS miscounted,
       coalesce(max(s.attempts), 0) AS max_attempts_used,
       coalesce(max(s.max_attempts), 0) AS cap
FROM engine_step_runs AS s
CROSS JOIN LATERAL (
    SELECT count(*) AS claims FROM engine_history AS v
    WHERE v.step_run_id = s.id AND v.kind IN ('claimed', 'reclaimed')
) AS c;

-- oracle_one_active_per_fingerprint --
-- Oracle 9: no two jobs with one fingerprint were ever active at the same time.
SELECT count(*) AS overlapping
FROM engine_jobs AS a
JOIN engine_jobs AS b ON b.fingerprint = a.fingerprint AND b.id > a.id
WHERE tstzrange(a.created_at, coalesce(a.finished_at, 'infinity'))
   && tstzrange(b.created_at, coalesce(b.finished_at, 'infinity'));
