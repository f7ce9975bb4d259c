-- Searching runs (issue 28: the console's runs page; `engine runs`): tags,
-- and the indexes a search needs to answer from an index, never a full scan.
--
-- A tag is a searchable key a step gives its job (`ctx.tag("document",
-- "SI-1")`): written through the step's fenced transaction, it commits with
-- the step's checkpoint or not at all, once (a rerun's duplicate is
-- ignored). The engine knows no tag's meaning: a flow names them (posting
-- tags the documents it posted or rejected, costing the stores it costed).
--
-- No foreign key to engine_jobs, on purpose: its check would share-lock the
-- job row in the middle of the step, before the checkpoint takes that row
-- (the one lock order: the job row first), and two steps of one job tagging
-- at once would deadlock each other's checkpoints. The id is the step's own
-- job's, which exists (jobs are never deleted).
CREATE TABLE engine_job_tags (
    job_id  uuid NOT NULL,
    name    text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    value   text NOT NULL CHECK (value <> '' AND length(value) <= 200),
    PRIMARY KEY (job_id, name, value)
);
-- search by tag: the jobs that carry this value
CREATE INDEX engine_job_tags_value ON engine_job_tags (name, value, job_id);

-- Runs newest first with a keyset cursor (created_at, id): every search
-- walks one of these in order, or the few rows an equality names.
CREATE INDEX engine_jobs_created ON engine_jobs (created_at DESC, id DESC);
-- by flow (replaces (flow, created_at DESC): the id completes the keyset)
DROP INDEX engine_jobs_flow_created;
CREATE INDEX engine_jobs_flow_created ON engine_jobs (flow, created_at DESC, id DESC);
-- by status (failed, cancelled, the active ones: rare statuses are found at once)
CREATE INDEX engine_jobs_status_created ON engine_jobs (status, created_at DESC, id DESC);
-- by period and by store, as submitted
CREATE INDEX engine_jobs_period_created
    ON engine_jobs ((params ->> 'period'), created_at DESC, id DESC)
    WHERE params ? 'period';
CREATE INDEX engine_jobs_store_created
    ON engine_jobs ((params ->> 'store'), created_at DESC, id DESC)
    WHERE params ? 'store';
-- by store, as a fan-out's key: only fan-out runs (a plain step's key is '')
CREATE INDEX engine_step_runs_fanout_key
    ON engine_step_runs (fanout_key, job_id) WHERE fanout_key <> '';

-- Stated in full (the default privileges of 0006 grant the same): the
-- worker reads tags and adds them; it never changes or removes one.
REVOKE ALL ON engine_job_tags FROM engine_worker;
GRANT SELECT, INSERT ON engine_job_tags TO engine_worker;
