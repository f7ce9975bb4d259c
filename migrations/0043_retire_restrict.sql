-- Retention at the issue's size (issue 38): the foreign keys that point at a
-- job or a step run refuse its delete (RESTRICT) instead of taking no action.
--
-- Both refuse to delete a row that another still references, and neither is
-- deferrable here, so both check at the end of the deleting statement. NO
-- ACTION, the default, first looks up whether another row now holds the
-- deleted key (a replacement inserted in the same statement would satisfy its
-- references): one more query per deleted key and referencing table. A
-- retirement deletes every referencing row of a family with it, so those
-- lookups found nothing, 1,400 times a batch of 100 jobs: about a quarter of
-- its time at 10M step runs (a batch's median 23.4 ms against 17.3 ms as
-- RESTRICT; test_retire_plans.py). Nothing
-- replaces a job's or a step run's key, and only engine_retire_jobs deletes
-- either.
--
-- Each key, named as PostgreSQL named it, is dropped and added again NOT VALID
-- in this file (a brief lock of both tables, no scan); 0044 validates them in a
-- transaction of its own, with a lock no write waits for.

DO $$
DECLARE
    k record;
BEGIN
    FOR k IN
        SELECT * FROM (VALUES
            ('engine_jobs', 'parent_job_id', 'engine_jobs'),
            ('engine_jobs', 'parent_step_run_id', 'engine_step_runs'),
            ('engine_step_runs', 'job_id', 'engine_jobs'),
            ('engine_outbox', 'step_run_id', 'engine_step_runs'),
            ('engine_dead_letters', 'job_id', 'engine_jobs'),
            ('engine_dead_letters', 'step_run_id', 'engine_step_runs'),
            ('engine_schedule_fires', 'job_id', 'engine_jobs'),
            ('engine_signals', 'job_id', 'engine_jobs')
        ) AS v (tab, col, referenced)
    LOOP
        EXECUTE format(
            'ALTER TABLE %1$I DROP CONSTRAINT %2$I, ADD CONSTRAINT %2$I FOREIGN KEY (%3$I) '
            'REFERENCES %4$I (id) ON DELETE RESTRICT NOT VALID',
            k.tab, k.tab || '_' || k.col || '_fkey', k.col, k.referenced);
    END LOOP;
END
$$;
