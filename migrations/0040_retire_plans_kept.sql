-- Retention at the issue's size (issue 38): a retirement's transaction no
-- longer plans again, for every row it deletes, the checks of the foreign keys
-- that point at that row.
--
-- engine_retire_jobs (0031, 0039) ran with plan_cache_mode = force_custom_plan
-- so that its own statements were planned for each batch's arrays. The
-- setting holds for everything the function runs, and so for the checks
-- PostgreSQL runs for each deleted job and step run (dead letters, outbox,
-- child jobs, signals, schedule fires: about a dozen a job), which it plans
-- once a session and keeps, unless custom plans are forced. At 1M step runs a
-- batch of 100 jobs took 59 ms of CPU, 17 ms with the checks' plans kept:
-- CPU the claims wait for on a small server (BENCH_ONLY=retention).
--
-- Its own statements may now be planned generically after five batches of a
-- session: each reads by key. The family walk, which could hash a join over
-- every job when the planner has no statistics, looks each job's children and
-- each descendant's state up by key; JIT is off for the function (the walk's
-- estimate would compile it: 200 ms for a batch that runs in 20). Same signature, rows and rules
-- (tests/integration/test_retire_plans.py, test_retention.py).

CREATE OR REPLACE FUNCTION engine_retire_jobs(
    roots uuid[], horizons timestamptz[], reports jsonb
) RETURNS TABLE (job_id uuid, flow text, status text,
                 step_runs integer, events integer, tags integer)
LANGUAGE plpgsql SECURITY DEFINER
-- a batch is small: compiling a statement (its recursive walk estimated at the
-- planner's default of thousands of rows a level) would cost far more than it runs
SET search_path = public, pg_temp SET jit = off AS $$
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
    -- each job's children and each descendant's state looked up by key (subplans
    -- run per row): never a join the planner may hash over every job
    WITH RECURSIVE fam AS (
        SELECT r.id AS root, r.id FROM unnest(tree) AS r (id)
        UNION ALL
        SELECT fam.root, kid.id
        FROM fam CROSS JOIN LATERAL unnest(ARRAY(
            SELECT c.id FROM engine_jobs AS c WHERE c.parent_job_id = fam.id)) AS kid (id)
    ), bad AS (
        SELECT DISTINCT fam.root FROM fam
        WHERE (SELECT j.status NOT IN ('done', 'failed', 'cancelled')
                     OR (j.pinned_until IS NOT NULL AND j.pinned_until > clock_timestamp())
               FROM engine_jobs AS j WHERE j.id = fam.id)
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
    -- each deleted set counted once, grouped by job (not scanned again for each job)
    SELECT g.id, g.flow, g.status,
           coalesce(r.n, 0)::integer, coalesce(e.n, 0)::integer, coalesce(t.n, 0)::integer
    FROM gone_jobs AS g
    LEFT JOIN (SELECT x.job_id, count(*) AS n FROM gone_runs AS x GROUP BY x.job_id) AS r
        ON r.job_id = g.id
    LEFT JOIN (SELECT x.job_id, count(*) AS n FROM gone_events AS x GROUP BY x.job_id) AS e
        ON e.job_id = g.id
    LEFT JOIN (SELECT x.job_id, count(*) AS n FROM gone_tags AS x GROUP BY x.job_id) AS t
        ON t.job_id = g.id;
END
$$;
