-- Every claim and checkpoint rewrites a step run's index entries (its status
-- and lease columns are indexed), so each index costs on the hot path.
-- engine_step_runs_job duplicates the leading column of the step key's unique
-- index (job_id, step, fanout_key), which serves every lookup by job.
DROP INDEX engine_step_runs_job;
