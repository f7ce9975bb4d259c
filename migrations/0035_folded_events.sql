-- Fewer rows per step (issue 38, item 5): a step run's first claim and its
-- success are no longer rows of engine_events but columns of the step run
-- they describe, written by the same guarded UPDATE (or the eager INSERT)
-- that makes them true. A no-op step wrote 2.67 events (its claim, its
-- success, and its job's submit and end over three steps); it now writes
-- 0.33, the job's submit.
--
-- What is folded, exactly (everything else is still an event row):
--   claimed   the first claim of a step run (attempts 0 -> 1, started_at was
--             null): at started_at, by started_by, attempt 1, started_detail
--             ({}, {"eager": true} or {"batch": deliveries}). A later claim, a reclaim, a claim after
--             a release or a retry round writes its event as before: the row
--             keeps only the first.
--   job_done  a job ended done by its last checkpoint (done is final: a retry
--             reopens only failed and cancelled jobs): at finished_at, by
--             finished_by of engine_jobs.
--   succeeded the checkpoint (status done, which is final): at finished_at,
--             by finished_by, attempt = attempts, finished_detail (when the
--             step started running and how long it ran, as the event had).
-- Rows written before this migration have no started_by / finished_by: their
-- events are rows already, and nothing is derived twice.
--
-- engine_history is the whole history, events and folded rows alike: every
-- reader of claims or successes reads it (the run report, the timeline,
-- status --json, the simulator's oracles). Its folded rows have no id: order
-- by (at, id).
ALTER TABLE engine_step_runs
    ADD COLUMN started_by text,
    ADD COLUMN started_detail jsonb,
    ADD COLUMN finished_by text,
    ADD COLUMN finished_detail jsonb;

GRANT UPDATE (started_by, started_detail, finished_by, finished_detail)
    ON engine_step_runs TO engine_worker;

ALTER TABLE engine_jobs ADD COLUMN finished_by text;
GRANT UPDATE (finished_by) ON engine_jobs TO engine_worker;

CREATE VIEW engine_history AS
SELECT e.id, e.at, e.kind, e.job_id, e.step_run_id, e.worker, e.attempt, e.detail
FROM engine_events AS e
UNION ALL
SELECT NULL::bigint, s.started_at, 'claimed', s.job_id, s.id, s.started_by, 1,
       coalesce(s.started_detail, '{}'::jsonb)
FROM engine_step_runs AS s
WHERE s.started_by IS NOT NULL
UNION ALL
SELECT NULL::bigint, s.finished_at, 'succeeded', s.job_id, s.id, s.finished_by, s.attempts,
       coalesce(s.finished_detail, '{}'::jsonb)
FROM engine_step_runs AS s
WHERE s.finished_by IS NOT NULL AND s.status = 'done'
UNION ALL
SELECT NULL::bigint, j.finished_at, 'job_done', j.id, NULL::uuid, j.finished_by, NULL::integer,
       '{}'::jsonb
FROM engine_jobs AS j
WHERE j.finished_by IS NOT NULL AND j.status = 'done';

GRANT SELECT ON engine_history TO engine_worker, engine_console;
