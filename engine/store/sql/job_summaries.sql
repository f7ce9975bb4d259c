-- job_retire_select_roots --
-- Read only: top-level ended, unpinned jobs past their flow's horizon for their end state at as_of (horizon_s per flow and state, the defaults for a flow not named; NULL keeps forever), oldest end first after the keyset cursor (after_at, after_id), walking engine_jobs_finished_roots; engine_retire_jobs re-checks all of it under the row lock.
WITH policy AS (
    SELECT p.key AS flow,
           (p.value ->> 'done')::float8 AS done,
           (p.value ->> 'failed')::float8 AS failed,
           (p.value ->> 'cancelled')::float8 AS cancelled
    FROM jsonb_each(%(policy)s::jsonb) AS p
)
SELECT j.id, j.flow, j.status, j.finished_at,
       %(as_of)s::timestamptz - make_interval(secs => k.keep_s) AS horizon
FROM engine_jobs AS j
LEFT JOIN policy AS p ON p.flow = j.flow
CROSS JOIN LATERAL (
    SELECT CASE j.status
               WHEN 'done' THEN coalesce(p.done, %(done_s)s)
               WHEN 'failed' THEN coalesce(p.failed, %(failed_s)s)
               ELSE coalesce(p.cancelled, %(cancelled_s)s)
           END AS keep_s
) AS k
WHERE j.finished_at IS NOT NULL
  AND j.parent_job_id IS NULL
  AND j.finished_at < %(as_of)s::timestamptz - make_interval(secs => %(min_keep_s)s)
  AND (j.finished_at, j.id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
  AND j.finished_at < %(as_of)s::timestamptz - make_interval(secs => k.keep_s)
  AND (j.pinned_until IS NULL OR j.pinned_until <= %(as_of)s::timestamptz)
ORDER BY j.finished_at, j.id
LIMIT %(limit)s;

-- job_retire_count_many --
-- Read only: what engine_retire_jobs would remove for these top-level jobs now (the same family rule: every descendant ended and unpinned, else the whole family stays), counted per job's flow and end state: jobs, step runs, events, tags.
WITH RECURSIVE fam AS (
    SELECT j.id AS root, j.id FROM engine_jobs AS j WHERE j.id = ANY (%(roots)s::uuid[])
    UNION ALL
    SELECT fam.root, c.id FROM engine_jobs AS c JOIN fam ON c.parent_job_id = fam.id
), bad AS (
    SELECT DISTINCT fam.root FROM fam JOIN engine_jobs AS j ON j.id = fam.id
    WHERE j.status NOT IN ('done', 'failed', 'cancelled')
       OR (j.pinned_until IS NOT NULL AND j.pinned_until > %(as_of)s::timestamptz)
)
SELECT j.flow, j.status, count(*)::integer AS jobs,
       coalesce(sum((SELECT count(*) FROM engine_step_runs AS r WHERE r.job_id = j.id)), 0)::integer AS step_runs,
       coalesce(sum((SELECT count(*) FROM engine_events AS e WHERE e.job_id = j.id)), 0)::integer AS events,
       coalesce(sum((SELECT count(*) FROM engine_job_tags AS t WHERE t.job_id = j.id)), 0)::integer AS tags
FROM fam JOIN engine_jobs AS j ON j.id = fam.id
WHERE fam.root NOT IN (SELECT root FROM bad)
GROUP BY j.flow, j.status
ORDER BY j.flow, j.status;

-- job_select_family_many --
-- Read only: these jobs and all their descendants (whose reports are stored before a retirement).
WITH RECURSIVE fam AS (
    SELECT j.id FROM engine_jobs AS j WHERE j.id = ANY (%(roots)s::uuid[])
    UNION ALL
    SELECT c.id FROM engine_jobs AS c JOIN fam ON c.parent_job_id = fam.id
)
SELECT id FROM fam;

-- job_retire_many --
-- Summaries first, then every live row of these families, in the caller's short transaction; engine_retire_jobs (0031) takes the job rows FOR UPDATE SKIP LOCKED and re-checks ended, horizon and pins, so a job another session holds or changed is skipped, never waited for.
SELECT job_id, flow, status, step_runs, events, tags
FROM engine_retire_jobs(%(roots)s::uuid[], %(horizons)s::timestamptz[], %(reports)s::jsonb);

-- job_summary_select --
-- Read only: a pruned job's summary (none while it is live).
SELECT id, flow, flow_version, status, params, tags, submitted_by, parent_job_id, error,
       created_at, started_at, finished_at, step_runs, step_runs_done, step_runs_dead,
       attempts, events, report, pruned_at
FROM engine_job_summaries
WHERE id = %(job_id)s;

-- job_retired_tables_vacuumable --
-- Read only: whether the current role may VACUUM every live table a retirement deletes from (it owns them, or is a superuser); the worker's role may not, and relies on their autovacuum settings (0031).
SELECT bool_and(pg_has_role(current_user, c.relowner, 'USAGE')) AS vacuumable
FROM pg_class AS c
WHERE c.oid IN ('engine_jobs'::regclass, 'engine_step_runs'::regclass,
                'engine_events'::regclass, 'engine_job_tags'::regclass);

-- job_vacuum_delay_set --
-- Session setting: the cost-based delay of this session's VACUUMs (vacuum_cost_delay: a pause each time a VACUUM has done vacuum_cost_limit's work), set for the closing VACUUM and given back after it; returns the value it replaced.
WITH s AS MATERIALIZED (SELECT current_setting('vacuum_cost_delay') AS was)
SELECT s.was, set_config('vacuum_cost_delay', %(delay)s, false) AS now FROM s;

-- job_retired_tables_vacuum --
-- Outside any transaction (autocommit): the dead tuples a retirement left in the live tables it deletes from. VACUUM (not FULL) takes SHARE UPDATE EXCLUSIVE, which no claim, insert, update or delete waits for. No ANALYZE: a day's retirement moves about 1% of the rows, and sampling every table again (3.6 s of reads at 10M step runs) would refresh statistics it did not move; autovacuum's analyze thresholds see to the drift.
VACUUM engine_jobs, engine_step_runs, engine_events, engine_job_tags;
