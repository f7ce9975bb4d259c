-- Retention at the issue's size (issue 38): the foreign keys that point at a
-- job or a step run refuse its delete (RESTRICT) instead of taking no action.
--
-- Both refuse to delete a row that another still references, and neither is
-- deferrable here, so both check at the end of the deleting statement. NO
-- ACTION, the default, first looks up whether another row now holds the
-- deleted key (a replacement inserted in the same statement would satisfy its
-- references): one more query per deleted key and referencing table. A
-- retirement deletes every referencing row of a family with it, so those
-- lookups found nothing, 1,400 times a batch of 100 jobs: 21-32% of its time
-- at 10M step runs (BENCH_ONLY=retention; test_retire_plans.py). Nothing
-- replaces a job's or a step run's key, and only engine_retire_jobs deletes
-- either.
--
-- Each key is dropped and added again NOT VALID in this file (a brief lock of
-- both tables, no scan); 0044 validates them, each in its own transaction, with
-- a lock no write waits for.

ALTER TABLE engine_jobs
    DROP CONSTRAINT engine_jobs_parent_job_id_fkey,
    ADD CONSTRAINT engine_jobs_parent_job_id_fkey FOREIGN KEY (parent_job_id)
        REFERENCES engine_jobs (id) ON DELETE RESTRICT NOT VALID,
    DROP CONSTRAINT engine_jobs_parent_step_run_id_fkey,
    ADD CONSTRAINT engine_jobs_parent_step_run_id_fkey FOREIGN KEY (parent_step_run_id)
        REFERENCES engine_step_runs (id) ON DELETE RESTRICT NOT VALID;

ALTER TABLE engine_step_runs
    DROP CONSTRAINT engine_step_runs_job_id_fkey,
    ADD CONSTRAINT engine_step_runs_job_id_fkey FOREIGN KEY (job_id)
        REFERENCES engine_jobs (id) ON DELETE RESTRICT NOT VALID;

ALTER TABLE engine_outbox
    DROP CONSTRAINT engine_outbox_step_run_id_fkey,
    ADD CONSTRAINT engine_outbox_step_run_id_fkey FOREIGN KEY (step_run_id)
        REFERENCES engine_step_runs (id) ON DELETE RESTRICT NOT VALID;

ALTER TABLE engine_dead_letters
    DROP CONSTRAINT engine_dead_letters_job_id_fkey,
    ADD CONSTRAINT engine_dead_letters_job_id_fkey FOREIGN KEY (job_id)
        REFERENCES engine_jobs (id) ON DELETE RESTRICT NOT VALID,
    DROP CONSTRAINT engine_dead_letters_step_run_id_fkey,
    ADD CONSTRAINT engine_dead_letters_step_run_id_fkey FOREIGN KEY (step_run_id)
        REFERENCES engine_step_runs (id) ON DELETE RESTRICT NOT VALID;

ALTER TABLE engine_schedule_fires
    DROP CONSTRAINT engine_schedule_fires_job_id_fkey,
    ADD CONSTRAINT engine_schedule_fires_job_id_fkey FOREIGN KEY (job_id)
        REFERENCES engine_jobs (id) ON DELETE RESTRICT NOT VALID;

ALTER TABLE engine_signals
    DROP CONSTRAINT engine_signals_job_id_fkey,
    ADD CONSTRAINT engine_signals_job_id_fkey FOREIGN KEY (job_id)
        REFERENCES engine_jobs (id) ON DELETE RESTRICT NOT VALID;
