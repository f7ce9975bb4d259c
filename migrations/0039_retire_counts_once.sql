-- Retention at the issue's size (issue 38, 10M step runs): a retirement's
-- transaction counts what it deleted per job once, not once per job.
--
-- engine_retire_jobs (0031) returned, for each deleted job, counts taken by
-- scanning the whole batch's deleted step runs, events and tags again: for a
-- batch of n jobs, n scans of ~8n events. At a batch of 100 jobs that was
-- ~120 ms of a ~260 ms DELETE statement (EXPLAIN ANALYZE, 30k step runs: the
-- per-job CTE scans of gone_events alone 0.9 ms x 100), time its row locks
-- were held for nothing. Now each deleted set is grouped by job once and
-- joined: linear in the batch. Same signature, same rows returned, same
-- rules; only the last statement changes.

CREATE OR REPLACE FUNCTION engine_retire_jobs(
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
