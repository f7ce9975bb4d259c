-- The events folded into their rows (0035) are history: as engine_events refuses
-- an update, the row refuses to rewrite them once set. A step run's first claim
-- (started_by, started_detail) and its success (finished_by, finished_detail),
-- and a job's end done (finished_by), can be written from NULL once; after that
-- nobody, not the worker's role that updates these rows nor an owner's session,
-- changes who claimed, who succeeded or how. The trigger fires only for an
-- UPDATE naming these columns and only when one of them would change (its WHEN
-- is evaluated without calling the function): the claim and checkpoint paths
-- that write them once pay nothing more.
CREATE FUNCTION engine_folded_write_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%: a claim or success kept on its row is written once (% of % refused)',
        TG_TABLE_NAME, TG_OP, OLD.id;
END;
$$;

CREATE TRIGGER engine_step_runs_folded_write_once
BEFORE UPDATE OF started_by, started_detail, finished_by, finished_detail ON engine_step_runs
FOR EACH ROW
WHEN ((OLD.started_by IS NOT NULL
       AND (NEW.started_by IS DISTINCT FROM OLD.started_by
            OR NEW.started_detail IS DISTINCT FROM OLD.started_detail))
   OR (OLD.finished_by IS NOT NULL
       AND (NEW.finished_by IS DISTINCT FROM OLD.finished_by
            OR NEW.finished_detail IS DISTINCT FROM OLD.finished_detail)))
EXECUTE FUNCTION engine_folded_write_once();

CREATE TRIGGER engine_jobs_folded_write_once
BEFORE UPDATE OF finished_by ON engine_jobs
FOR EACH ROW
WHEN (OLD.finished_by IS NOT NULL AND NEW.finished_by IS DISTINCT FROM OLD.finished_by)
EXECUTE FUNCTION engine_folded_write_once();
