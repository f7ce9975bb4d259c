-- worker_upsert_seen --
-- A worker's row, by its id: written when it starts (starting: a new started_at) and renewed at every beat by the database clock (invariant 3), re-created should it have gone; what it runs and where come from the worker itself.
INSERT INTO engine_workers AS w (id, host, pid, transport, concurrency, runnable)
VALUES (%(id)s, %(host)s, %(pid)s, %(transport)s, %(concurrency)s, %(runnable)s::text[])
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, transport = excluded.transport,
    concurrency = excluded.concurrency, runnable = excluded.runnable,
    status = 'running', stopped_at = NULL, last_seen_at = clock_timestamp(),
    started_at = CASE WHEN %(starting)s THEN clock_timestamp() ELSE w.started_at END
RETURNING started_at, last_seen_at;

-- worker_stop_if_running --
-- A clean shutdown marks the worker stopped (last seen now); zero rows: it was not running under this id.
UPDATE engine_workers
SET status = 'stopped', stopped_at = clock_timestamp(), last_seen_at = clock_timestamp()
WHERE id = %(id)s AND status = 'running'
RETURNING id;

-- worker_select_live --
-- Read-only: a worker is live while running and seen within live_s by the database clock; a crashed one simply stops being seen.
SELECT id, host, pid, transport, concurrency, runnable, started_at, last_seen_at,
       extract(epoch FROM clock_timestamp() - last_seen_at)::float8 AS seen_s_ago
FROM engine_workers
WHERE status = 'running'
  AND last_seen_at >= clock_timestamp() - make_interval(secs => %(live_s)s)
ORDER BY id;

-- version_select_in_flight --
-- Read-only: per flow version, the active jobs that need it (a job is pinned to its version) beside the live workers that have it loaded, and when any worker last had it; versions only loaded appear too.
WITH live AS (
    SELECT id, runnable
    FROM engine_workers
    WHERE status = 'running'
      AND last_seen_at >= clock_timestamp() - make_interval(secs => %(live_s)s)
), needed AS (
    SELECT flow, flow_version AS version, count(*)::int AS active_jobs,
           min(created_at) AS oldest_created_at
    FROM engine_jobs
    WHERE status IN ('pending', 'running') AND (%(flow)s::text IS NULL OR flow = %(flow)s)
    GROUP BY flow, flow_version
), loaded AS (
    SELECT split_part(v, ':', 1) AS flow, split_part(v, ':', 2)::int AS version,
           array_agg(l.id ORDER BY l.id) AS workers
    FROM live AS l, unnest(l.runnable) AS v
    WHERE %(flow)s::text IS NULL OR split_part(v, ':', 1) = %(flow)s
    GROUP BY 1, 2
), versions AS (
    SELECT coalesce(n.flow, l.flow) AS flow, coalesce(n.version, l.version) AS version,
           coalesce(n.active_jobs, 0) AS active_jobs, n.oldest_created_at,
           coalesce(l.workers, '{}'::text[]) AS workers
    FROM needed AS n
    FULL JOIN loaded AS l ON l.flow = n.flow AND l.version = n.version
)
SELECT v.flow, v.version, v.active_jobs, v.workers,
       extract(epoch FROM clock_timestamp() - v.oldest_created_at)::float8 AS oldest_age_s,
       seen.at AS last_loaded_at,
       extract(epoch FROM clock_timestamp() - seen.at)::float8 AS last_loaded_s_ago
FROM versions AS v
CROSS JOIN LATERAL (
    SELECT max(w.last_seen_at) AS at FROM engine_workers AS w
    WHERE (v.flow || ':' || v.version) = ANY (w.runnable)
) AS seen
ORDER BY v.flow, v.version;

-- worker_select_recent --
-- Read-only, for the console: workers running or seen within since_s, each live (running, seen within live_s), dead (running but not seen: crashed or cut off; its leases lapse and are reclaimed) or stopped, with the step runs its slots hold now (a lease's owner is the slot, mapped to its worker by engine_worker_of; one pass over the running step runs, through the partial index of running leases).
WITH held AS (
    SELECT engine_worker_of(lease_owner) AS worker, count(*)::int AS running
    FROM engine_step_runs
    WHERE status = 'running' AND lease_expires_at IS NOT NULL
    GROUP BY 1
)
SELECT w.id, w.host, w.pid, w.transport, w.concurrency, w.runnable, w.started_at, w.last_seen_at,
       extract(epoch FROM clock_timestamp() - w.last_seen_at)::float8 AS seen_s_ago,
       CASE WHEN w.status <> 'running' THEN 'stopped'
            WHEN w.last_seen_at >= clock_timestamp() - make_interval(secs => %(live_s)s) THEN 'live'
            ELSE 'dead' END AS state,
       coalesce(h.running, 0) AS running
FROM engine_workers AS w
LEFT JOIN held AS h ON h.worker = w.id
WHERE w.status = 'running' OR w.last_seen_at >= clock_timestamp() - make_interval(secs => %(since_s)s)
ORDER BY (w.status = 'running') DESC, w.last_seen_at DESC, w.id
LIMIT 200;
