-- Child jobs (issue 14, item 4).
--
-- A step submits child jobs (`ctx.submit_child`) in its own fenced
-- transaction and waits for them (`ctx.wait_for_children`) holding no lease,
-- slot or attempt, like a wait for a signal. A child records its parent job
-- and the parent step run that submitted it, under a key unique for that
-- step run: a rerun of the step (after a crash, a retry or a wake) finds the
-- same child rather than submitting a second one. A child ending wakes its
-- parent step run in the same transaction; cancelling a parent cancels its
-- active children.

ALTER TABLE engine_jobs
    ADD COLUMN parent_job_id      uuid REFERENCES engine_jobs (id),
    ADD COLUMN parent_step_run_id uuid REFERENCES engine_step_runs (id),
    ADD COLUMN child_key          text;
-- A child has all three; a job submitted from outside has none.
ALTER TABLE engine_jobs ADD CONSTRAINT engine_jobs_parent_complete CHECK (
    (parent_job_id IS NULL AND parent_step_run_id IS NULL AND child_key IS NULL)
    OR (parent_job_id IS NOT NULL AND parent_step_run_id IS NOT NULL AND child_key IS NOT NULL));
ALTER TABLE engine_jobs ADD CONSTRAINT engine_jobs_child_key_format
    CHECK (child_key ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$');
-- One child per parent step run and key, whatever its status: a rerun of the
-- step finds it; the index also serves the wait's and the wake's lookups.
CREATE UNIQUE INDEX engine_jobs_parent_step_run_key
    ON engine_jobs (parent_step_run_id, child_key) WHERE parent_step_run_id IS NOT NULL;
CREATE INDEX engine_jobs_parent_job
    ON engine_jobs (parent_job_id) WHERE parent_job_id IS NOT NULL;

-- A step run may wait for its children: the third thing a wait waits for.
ALTER TABLE engine_step_runs ADD COLUMN wait_children boolean NOT NULL DEFAULT false;
ALTER TABLE engine_step_runs DROP CONSTRAINT engine_step_runs_waits_for_something;
ALTER TABLE engine_step_runs ADD CONSTRAINT engine_step_runs_waits_for_something
    CHECK (status <> 'waiting' OR wait_signal IS NOT NULL OR wait_until IS NOT NULL
           OR wait_children);

-- The worker submits children (as it submits the jobs of schedules) and
-- moves its step run to waiting for them.
GRANT INSERT (parent_job_id, parent_step_run_id, child_key) ON engine_jobs TO engine_worker;
GRANT UPDATE (wait_children) ON engine_step_runs TO engine_worker;
