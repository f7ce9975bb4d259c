-- event_insert --
-- engine_events is append-only: the trigger refuses UPDATE, DELETE and TRUNCATE.
INSERT INTO engine_events (kind, job_id, step_run_id, worker, attempt, detail)
VALUES (%(kind)s, %(job_id)s, %(step_run_id)s, %(worker)s, %(attempt)s, %(detail)s);

-- event_insert_timed --
-- An event of one attempt (one that ends it: retried, dead_lettered, rejected, fenced, released, cancelled, waiting; or a renewal), append-only, with when its step started running on its worker (timed: on the database clock, as the worker's slot converts its own; started_at null: not started, or never) and how long it ran (null: not stopped).
INSERT INTO engine_events (kind, job_id, step_run_id, worker, attempt, detail)
VALUES (%(kind)s, %(job_id)s, %(step_run_id)s, %(worker)s, %(attempt)s,
        %(detail)s::jsonb || CASE WHEN %(timed)s::boolean THEN jsonb_build_object(
            'started_at', %(started_at)s::timestamptz, 'ran_s', %(ran_s)s::float8) ELSE '{}'::jsonb END);

-- event_count_by_step --
-- Read-only, for `engine status --json`: what attempts came to, per flow and step, from the history, events and the claims and successes folded into step runs alike (engine_history, migration 0035; failed: the step raised, then retried, dead-lettered by its worker or rejected its input; the sweeper's dead letters are not failures of a step).
SELECT j.flow, s.step,
       count(*) FILTER (WHERE e.kind IN ('claimed', 'reclaimed'))::int AS claimed,
       count(*) FILTER (WHERE e.kind = 'reclaimed')::int AS reclaimed,
       count(*) FILTER (WHERE e.kind = 'succeeded')::int AS succeeded,
       count(*) FILTER (WHERE e.kind IN ('retried', 'rejected')
                           OR (e.kind = 'dead_lettered'
                               AND e.detail->>'by' IS DISTINCT FROM 'sweeper'))::int AS failed,
       count(*) FILTER (WHERE e.kind = 'retried')::int AS retried,
       count(*) FILTER (WHERE e.kind = 'dead_lettered')::int AS dead_lettered,
       count(*) FILTER (WHERE e.kind = 'rejected')::int AS rejected,
       count(*) FILTER (WHERE e.kind = 'fenced')::int AS fenced
FROM engine_history AS e
JOIN engine_step_runs AS s ON s.id = e.step_run_id
JOIN engine_jobs AS j ON j.id = s.job_id
WHERE e.kind IN ('claimed', 'reclaimed', 'succeeded', 'retried', 'dead_lettered', 'rejected', 'fenced')
GROUP BY j.flow, s.step
ORDER BY j.flow, s.step;

-- event_insert_many --
-- event_insert for a bulk action's chunk: one event of one kind per job, each with its detail, in one statement (append-only as every event).
INSERT INTO engine_events (kind, job_id, detail)
SELECT %(kind)s, e.job_id, e.detail
FROM unnest(%(job_ids)s::uuid[], %(details)s::jsonb[]) AS e(job_id, detail);

-- event_history_of_job --
-- Read-only, for a run report and the timeline: one job's history in the order it happened, its event rows with the first claims and the successes folded into its step runs (engine_history, migration 0035, whose folded rows have no id).
SELECT id, at, kind, job_id, step_run_id, worker, attempt, detail
FROM engine_history
WHERE job_id = %(job_id)s
ORDER BY at, id NULLS FIRST;

-- event_history_all --
-- Read-only, for the simulator's replay page over its scratch database: every job's history but the publications, in the order it happened (engine_history, migration 0035).
SELECT id, at, kind, job_id, step_run_id, worker, attempt, detail
FROM engine_history
WHERE kind <> 'published'
ORDER BY at, id NULLS FIRST;
