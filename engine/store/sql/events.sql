-- event_insert --
-- engine_events is append-only: the trigger refuses UPDATE, DELETE and TRUNCATE.
INSERT INTO engine_events (kind, job_id, step_run_id, worker, attempt, detail)
VALUES (%(kind)s, %(job_id)s, %(step_run_id)s, %(worker)s, %(attempt)s, %(detail)s);
