-- Retention at the issue's size (issue 38): the events' guard checks a
-- statement's deleted rows together, not each deleted row in turn.
--
-- engine_events is append-only, with one exception (0031): the events of a job
-- whose summary exists may be deleted (engine_retire_jobs writes the summary,
-- then deletes). The guard was a row trigger, so a retirement called it, and
-- looked the summary up, once per deleted event: about eight a job, 6 ms of a
-- 25 ms batch of 100 jobs with its pages in memory (10M step runs; 8.8 ms for
-- the batch with no trigger at all). CPU the claims wait for on a small server
-- (BENCH_ONLY=retention).
--
-- Now a DELETE is checked once, after the statement, over its deleted rows (a
-- transition table): each distinct job looked up by key in the summaries. The
-- rule is the one it was: a statement that deleted any event of a job with no
-- summary (or of no job) is refused whole, with the same error. UPDATE stays
-- refused row by row, TRUNCATE by statement (0001), by engine_events_append_only
-- (its exception for a DELETE, 0031, is no longer reached: no DELETE fires it).

CREATE FUNCTION engine_events_delete_guard() RETURNS trigger
-- the deleted rows have no statistics: never JIT-compile the check of a batch
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    -- each job once, its summary looked up by key (a subplan per job: never a
    -- join the planner could hash over every summary)
    IF EXISTS (
        SELECT 1 FROM (SELECT DISTINCT g.job_id FROM gone AS g) AS d
        WHERE d.job_id IS NULL
           OR (SELECT s.id FROM engine_job_summaries AS s WHERE s.id = d.job_id) IS NULL
    ) THEN
        RAISE EXCEPTION 'engine_events is append-only (% refused)', TG_OP
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER engine_events_no_update_delete ON engine_events;
CREATE TRIGGER engine_events_no_update
    BEFORE UPDATE ON engine_events
    FOR EACH ROW EXECUTE FUNCTION engine_events_append_only();
CREATE TRIGGER engine_events_delete_summarised_only
    AFTER DELETE ON engine_events
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION engine_events_delete_guard();
