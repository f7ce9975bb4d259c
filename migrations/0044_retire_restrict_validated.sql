-- The foreign keys 0043 added NOT VALID, validated: each scans its table for a
-- reference to no row (none can exist: the keys were enforced all along) under
-- SHARE UPDATE EXCLUSIVE, which no claim, checkpoint or submit waits for. A
-- file of its own, so that 0043's brief locks are not held through the scans.

ALTER TABLE engine_jobs VALIDATE CONSTRAINT engine_jobs_parent_job_id_fkey;
ALTER TABLE engine_jobs VALIDATE CONSTRAINT engine_jobs_parent_step_run_id_fkey;
ALTER TABLE engine_step_runs VALIDATE CONSTRAINT engine_step_runs_job_id_fkey;
ALTER TABLE engine_outbox VALIDATE CONSTRAINT engine_outbox_step_run_id_fkey;
ALTER TABLE engine_dead_letters VALIDATE CONSTRAINT engine_dead_letters_job_id_fkey;
ALTER TABLE engine_dead_letters VALIDATE CONSTRAINT engine_dead_letters_step_run_id_fkey;
ALTER TABLE engine_schedule_fires VALIDATE CONSTRAINT engine_schedule_fires_job_id_fkey;
ALTER TABLE engine_signals VALIDATE CONSTRAINT engine_signals_job_id_fkey;
