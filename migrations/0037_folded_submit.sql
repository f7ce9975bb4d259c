-- Fewer rows per step (issue 38, item 5), after 0035: a job's submit is no
-- longer a row of engine_events but what its own row says, written by the
-- INSERT that makes it true. A no-op job wrote that event beside its row
-- (a copy of its flow and parameters); engine_history now reads it back from
-- the job: at created_at, no worker, no attempt, the detail as the event had
-- it (flow, params, by; parent_job and child_key for a child job) with what
-- the row does not hold in submitted_detail (scheduled_for, for a schedule's
-- run; '{}' otherwise).
--
-- submitted_detail is the marker: NULL on rows submitted before this
-- migration, whose submit is an event row already (nothing is derived
-- twice). Once set it is history, written once like the other folded events
-- (0036).
ALTER TABLE engine_jobs ADD COLUMN submitted_detail jsonb;

-- every role that submits (workers fire schedules and submit children; the console)
GRANT INSERT (submitted_detail) ON engine_jobs TO engine_worker, engine_console;

CREATE TRIGGER engine_jobs_submit_write_once
BEFORE UPDATE OF submitted_detail ON engine_jobs
FOR EACH ROW
WHEN (OLD.submitted_detail IS NOT NULL
      AND NEW.submitted_detail IS DISTINCT FROM OLD.submitted_detail)
EXECUTE FUNCTION engine_folded_write_once();

CREATE OR REPLACE VIEW engine_history AS
SELECT e.id, e.at, e.kind, e.job_id, e.step_run_id, e.worker, e.attempt, e.detail
FROM engine_events AS e
UNION ALL
SELECT NULL::bigint, j.created_at, 'submitted', j.id, NULL::uuid, NULL::text, NULL::integer,
       jsonb_build_object('flow', j.flow, 'params', j.params, 'by', j.submitted_by)
       || CASE WHEN j.parent_job_id IS NULL THEN '{}'::jsonb
               ELSE jsonb_build_object('parent_job', j.parent_job_id::text,
                                       'child_key', j.child_key) END
       || j.submitted_detail
FROM engine_jobs AS j
WHERE j.submitted_detail IS NOT NULL
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
