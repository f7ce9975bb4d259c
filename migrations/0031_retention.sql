-- Retention that keeps the evidence (issue 38, item 1).
--
-- Finished jobs leave the live tables (jobs, step runs, events, tags,
-- outbox, dead letters, signals) by a policy per flow and end state
-- (engine/retention/policy.py); before its rows go, each job keeps one row
-- here, its summary, and its HTML report in report storage. `engine status`,
-- `engine report` and the console show a pruned job from these two.
--
-- How rows go: by primary key, a small batch of jobs per short transaction
-- (engine_retire_jobs below), the job rows taken FOR UPDATE SKIP LOCKED, so
-- that a retirement never waits for a worker and no worker waits for more
-- than one batch's few rows; no table-wide DELETE, no partition to attach.
-- Why not partitions: engine_step_runs is the claim's hot table (FKs into it
-- from the outbox, dead letters and child jobs), and a job's rows span its
-- whole life, not one day; see the commit message for the figures.

-- A job kept past its policy until a date (engine pin JOB --until D --reason R).
ALTER TABLE engine_jobs
    ADD COLUMN pinned_until  timestamptz,
    ADD COLUMN pinned_reason text,
    ADD CONSTRAINT engine_jobs_pin_has_reason
        CHECK (pinned_until IS NULL OR (pinned_reason IS NOT NULL AND pinned_reason <> ''));

-- Dead tuples stay few on the live tables a retirement deletes from. By
-- default autovacuum waits for 20% of a table to be dead: a year's
-- engine_events (tens of millions of rows) would carry millions of dead
-- rows after each retired day, and the claim's engine_step_runs would bloat
-- between rounds. At 1% (plus 1000 rows for small tables) autovacuum comes
-- once about one day of 90 is retired. The prune also VACUUMs these tables
-- after a walk that retired rows, when its role owns them (VACUUM takes no
-- lock a claim or a write waits for); the sweeper in the worker's role does
-- not own them and relies on these settings. Figures: bench/retention.py.
ALTER TABLE engine_jobs SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE engine_step_runs SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02);
-- append-only but for retirement: inserts also bring a vacuum (the visibility
-- map current for index-only scans) at 5% new rows instead of 20%
ALTER TABLE engine_events SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE engine_job_tags SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);

-- The prune's walk: top-level finished jobs, oldest end first.
CREATE INDEX engine_jobs_finished_roots
    ON engine_jobs (finished_at, id)
    WHERE finished_at IS NOT NULL AND parent_job_id IS NULL;

-- A retirement deletes dead letters by job and by step run, and each deleted
-- job and step run has its foreign keys from engine_dead_letters checked:
-- without these, each check is a scan of the dead letters (thousands after
-- an outage) per row.
CREATE INDEX engine_dead_letters_job ON engine_dead_letters (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX engine_dead_letters_step_run
    ON engine_dead_letters (step_run_id) WHERE step_run_id IS NOT NULL;

-- One row per pruned job: what a search, a status and an auditor still need.
CREATE TABLE engine_job_summaries (
    id             uuid        PRIMARY KEY,
    flow           text        NOT NULL,
    flow_version   integer     NOT NULL,
    status         text        NOT NULL CHECK (status IN ('done', 'failed', 'cancelled')),
    params         jsonb       NOT NULL,
    -- every tag the job had, as {"name": ["value", ...]} (param.* tags included)
    tags           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    submitted_by   text,
    parent_job_id  uuid,       -- no FK: the parent may be pruned in the same batch
    error          text,
    created_at     timestamptz NOT NULL,
    started_at     timestamptz,
    finished_at    timestamptz NOT NULL,
    step_runs      integer     NOT NULL,
    step_runs_done integer     NOT NULL,
    step_runs_dead integer     NOT NULL,
    attempts       integer     NOT NULL,
    events         integer     NOT NULL,
    report         text,       -- where its HTML report was stored (a path or s3:// URI)
    pruned_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX engine_job_summaries_flow_finished
    ON engine_job_summaries (flow, finished_at DESC, id DESC);

-- Events stay append-only, with one exception: the events of a job whose
-- summary exists (written by engine_retire_jobs in the same transaction,
-- before its deletes) may be deleted. Nobody else can delete one.
CREATE OR REPLACE FUNCTION engine_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.job_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM engine_job_summaries WHERE id = OLD.job_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'engine_events is append-only (% refused)', TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;

-- Retire the given top-level jobs (and their descendants): summary rows,
-- then every live row of theirs, in one transaction (the caller's). A job is
-- retired only if, now, it and all its descendants are ended, it ended before
-- its horizon, and none of them is pinned; a job another session holds (a
-- retry, a cancel, a late checkpoint) is skipped, never waited for. Returns
-- one row per job retired, with what went.
--
-- SECURITY DEFINER: the sweeper runs in the worker's role, which may delete
-- none of these rows; through this function it can retire only ended,
-- unpinned jobs, and never without their summary.
CREATE FUNCTION engine_retire_jobs(
    roots uuid[], horizons timestamptz[], reports jsonb
) RETURNS TABLE (job_id uuid, flow text, status text,
                 step_runs integer, events integer, tags integer)
LANGUAGE plpgsql SECURITY DEFINER
-- each statement planned for its arrays' real sizes (a batch's ids: index lookups), never
-- a generic plan that scans engine_jobs whole
SET search_path = public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    tree uuid[];
BEGIN
    WITH wanted AS (
        SELECT r.id, r.horizon FROM unnest(roots, horizons) AS r (id, horizon)
    ), locked AS (
        SELECT j.id FROM engine_jobs AS j JOIN wanted AS w ON w.id = j.id
        WHERE j.parent_job_id IS NULL
          AND j.status IN ('done', 'failed', 'cancelled')
          AND j.finished_at < w.horizon
          AND (j.pinned_until IS NULL OR j.pinned_until <= clock_timestamp())
        ORDER BY j.id
        FOR UPDATE OF j SKIP LOCKED
    )
    SELECT array_agg(id) INTO tree FROM locked;
    IF tree IS NULL THEN
        RETURN;
    END IF;
    -- the families: a root stays if any descendant is active or pinned
    WITH RECURSIVE fam AS (
        SELECT j.id AS root, j.id FROM engine_jobs AS j WHERE j.id = ANY (tree)
        UNION ALL
        SELECT fam.root, c.id FROM engine_jobs AS c JOIN fam ON c.parent_job_id = fam.id
    ), bad AS (
        SELECT DISTINCT fam.root FROM fam JOIN engine_jobs AS j ON j.id = fam.id
        WHERE j.status NOT IN ('done', 'failed', 'cancelled')
           OR (j.pinned_until IS NOT NULL AND j.pinned_until > clock_timestamp())
    )
    SELECT array_agg(fam.id) INTO tree FROM fam WHERE fam.root NOT IN (SELECT root FROM bad);
    IF tree IS NULL THEN
        RETURN;
    END IF;

    INSERT INTO engine_job_summaries (
        id, flow, flow_version, status, params, tags, submitted_by, parent_job_id, error,
        created_at, started_at, finished_at, step_runs, step_runs_done, step_runs_dead,
        attempts, events, report)
    SELECT j.id, j.flow, j.flow_version, j.status, j.params,
           coalesce((SELECT jsonb_object_agg(t.name, t.vals) FROM (
                        SELECT g.name, jsonb_agg(g.value ORDER BY g.value) AS vals
                        FROM engine_job_tags AS g WHERE g.job_id = j.id GROUP BY g.name) AS t),
                    '{}'::jsonb),
           j.submitted_by, j.parent_job_id, j.error, j.created_at, j.started_at, j.finished_at,
           coalesce(s.n, 0), coalesce(s.done, 0), coalesce(s.dead, 0), coalesce(s.attempts, 0),
           (SELECT count(*) FROM engine_events AS e WHERE e.job_id = j.id),
           reports ->> j.id::text
    FROM engine_jobs AS j
    LEFT JOIN LATERAL (
        SELECT count(*) AS n, count(*) FILTER (WHERE r.status = 'done') AS done,
               count(*) FILTER (WHERE r.status = 'dead') AS dead, sum(r.attempts) AS attempts
        FROM engine_step_runs AS r WHERE r.job_id = j.id
    ) AS s ON true
    WHERE j.id = ANY (tree);

    RETURN QUERY
    WITH gone_events AS (
        DELETE FROM engine_events AS e WHERE e.job_id = ANY (tree) RETURNING e.job_id
    ), gone_tags AS (
        DELETE FROM engine_job_tags AS t WHERE t.job_id = ANY (tree) RETURNING t.job_id
    ), runs AS (
        SELECT r.id, r.job_id FROM engine_step_runs AS r WHERE r.job_id = ANY (tree)
    ), gone_outbox AS (
        DELETE FROM engine_outbox AS o WHERE o.step_run_id IN (SELECT id FROM runs)
        RETURNING o.id
    ), gone_dead AS (
        DELETE FROM engine_dead_letters AS d
        WHERE d.job_id = ANY (tree) OR d.step_run_id IN (SELECT id FROM runs)
        RETURNING d.id
    ), gone_signals AS (
        DELETE FROM engine_signals AS g WHERE g.job_id = ANY (tree) RETURNING g.id
    ), fires AS (
        -- a schedule's history keeps the time it fired; its job is now a summary
        UPDATE engine_schedule_fires AS f SET job_id = NULL
        WHERE f.job_id = ANY (tree) RETURNING f.schedule_id
    ), gone_runs AS (
        DELETE FROM engine_step_runs AS r WHERE r.job_id = ANY (tree) RETURNING r.job_id
    ), gone_jobs AS (
        -- one statement with the deletes above (each runs to completion, read
        -- or not): the foreign keys among them (child job -> parent's step
        -- run, outbox -> step run) are checked at its end
        DELETE FROM engine_jobs AS j WHERE j.id = ANY (tree)
        RETURNING j.id, j.flow, j.status
    )
    SELECT g.id, g.flow, g.status,
           (SELECT count(*) FROM gone_runs AS r WHERE r.job_id = g.id)::integer,
           (SELECT count(*) FROM gone_events AS e WHERE e.job_id = g.id)::integer,
           (SELECT count(*) FROM gone_tags AS t WHERE t.job_id = g.id)::integer
    FROM gone_jobs AS g;
END
$$;
REVOKE ALL ON FUNCTION engine_retire_jobs(uuid[], timestamptz[], jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engine_retire_jobs(uuid[], timestamptz[], jsonb) TO engine_worker;

-- A summary is read by whoever reads jobs (the worker, the console); the
-- worker writes one only through engine_retire_jobs.
REVOKE ALL ON engine_job_summaries FROM engine_worker;
GRANT SELECT ON engine_job_summaries TO engine_worker;

-- The console shows a pruned job from its summary (read only).
REVOKE ALL ON engine_job_summaries FROM engine_console;
GRANT SELECT ON engine_job_summaries TO engine_console;
