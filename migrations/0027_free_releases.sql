-- A step body runs again only for a reason that is counted (issue 34, item 5;
-- invariant 20): an attempt, or a bounded free release that says why.
--
-- 1. The engine does not make its own step runs wait on each other. Every
--    statement locks a job row FOR NO KEY UPDATE (engine/store/sql), never
--    FOR UPDATE, which would also wait on each uncommitted row referencing
--    the job: a child job that a running step submitted (parent_job_id) and
--    keeps working. engine_concurrency_hold, which a keyed checkpoint or park
--    calls, locks the job row the same way.
--
-- 2. A step run given back at no charge after its body ran (its checkpoint
--    lost a lock wait, a deadlock, a pooler's prepared statement; its group
--    was rolled back by a neighbour) counts it in free_releases. Past
--    ENGINE_FREE_RELEASES_MAX the next one is charged an attempt, with an
--    alert (source 'release') that says why; a park (a new phase of the
--    step) and an operator's retry start the count again.

CREATE OR REPLACE FUNCTION engine_concurrency_hold(key text, job uuid, run uuid, token uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF key IS NULL THEN
        RETURN true;
    END IF;
    IF job IS NOT NULL THEN
        PERFORM 1 FROM engine_jobs WHERE id = job FOR NO KEY UPDATE;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('engine.concurrency:' || key, 0));
    RETURN EXISTS (
        SELECT 1 FROM engine_step_runs
        WHERE id = run AND lease_token = token AND status = 'running'
          AND lease_expires_at > clock_timestamp());
END
$$;

ALTER TABLE engine_step_runs
    ADD COLUMN free_releases integer NOT NULL DEFAULT 0 CHECK (free_releases >= 0);
GRANT UPDATE (free_releases) ON engine_step_runs TO engine_worker;
-- an operator's retry (the console's too, as engine_console: 0026) starts the count again
GRANT UPDATE (free_releases) ON engine_step_runs TO engine_console;

ALTER TABLE engine_alerts DROP CONSTRAINT engine_alerts_source_check;
ALTER TABLE engine_alerts
    ADD CONSTRAINT engine_alerts_source_check
    CHECK (source IN ('step', 'message', 'version', 'schedule', 'release'));
-- one alert per charged attempt of a step run, however often its charge is retried
CREATE UNIQUE INDEX engine_alerts_release_attempt
    ON engine_alerts (step_run_id, attempts) WHERE source = 'release';
