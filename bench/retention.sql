-- retention_seed_indexes --
-- Read only: the plain indexes of the seeded tables (none behind a constraint), dropped before the seed and built again after it from their definitions.
SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition
FROM pg_index AS i
WHERE i.indrelid IN ('engine_jobs'::regclass, 'engine_step_runs'::regclass,
                     'engine_events'::regclass, 'engine_job_tags'::regclass)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c WHERE c.conindid = i.indexrelid)
ORDER BY name;

-- retention_seed_constraints --
-- Read only: the seeded tables' primary keys, unique and check constraints, and every foreign key from or to them (dropped first, added last), dropped before the seed and added again after it from their definitions.
SELECT c.conrelid::regclass::text AS "table", c.conname AS name, c.contype AS kind,
       pg_get_constraintdef(c.oid) AS definition
FROM pg_constraint AS c
WHERE (c.contype IN ('p', 'u', 'c')
       AND c.conrelid IN ('engine_jobs'::regclass, 'engine_step_runs'::regclass,
                          'engine_events'::regclass, 'engine_job_tags'::regclass))
   OR (c.contype = 'f'
       AND (c.conrelid IN ('engine_jobs'::regclass, 'engine_step_runs'::regclass,
                           'engine_events'::regclass, 'engine_job_tags'::regclass)
            OR c.confrelid IN ('engine_jobs'::regclass, 'engine_step_runs'::regclass,
                               'engine_events'::regclass, 'engine_job_tags'::regclass)))
ORDER BY c.contype = 'f' DESC, "table", name;

-- retention_seed_jobs --
-- Set-based: N finished jobs of flow bench, their ends spread evenly over D days that end 14 days ago (the default horizon for done), one in 20 failed (kept: 400 days), the rest done.
INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status, submitted_by,
                         error, created_at, started_at, finished_at)
SELECT md5('job' || g)::uuid, 'bench', 1,
       jsonb_build_object('period', to_char(t.at, 'YYYY-MM'), 'n', g),
       md5('fp' || g) || md5('fp2' || g),
       CASE WHEN g %% 20 = 0 THEN 'failed' ELSE 'done' END,
       'bench@host',
       CASE WHEN g %% 20 = 0 THEN 'failed on purpose' END,
       t.at - interval '2 seconds', t.at - interval '1 second', t.at
FROM generate_series(1, %(jobs)s) AS g
CROSS JOIN LATERAL (
    SELECT now() - interval '14 days' - %(days)s * interval '1 day'
           + (g::float8 / %(jobs)s) * %(days)s * interval '1 day' - interval '1 second' AS at
) AS t;

-- retention_seed_step_runs --
-- Set-based: three ended step runs per finished job (a failed job's last one dead).
INSERT INTO engine_step_runs (id, job_id, step, fingerprint, status, attempts, max_attempts,
                              output, created_at, started_at, finished_at)
SELECT md5('run' || j.n || '-' || s)::uuid, j.id, 'step' || s, md5('f' || j.n || s) || md5('g' || s),
       CASE WHEN j.status = 'failed' AND s = 3 THEN 'dead' ELSE 'done' END,
       1, 3,
       CASE WHEN j.status = 'failed' AND s = 3 THEN NULL ELSE '{}'::jsonb END,
       j.created_at, j.started_at, j.finished_at
FROM (SELECT id, status, created_at, started_at, finished_at, (params ->> 'n')::int AS n
      FROM engine_jobs WHERE flow = 'bench' AND status IN ('done', 'failed')) AS j
CROSS JOIN generate_series(1, 3) AS s;

-- retention_seed_events --
-- Set-based: claimed and succeeded per step run, submitted and job_done per job (about 2.67 a step, as a real run writes).
INSERT INTO engine_events (at, kind, job_id, step_run_id, worker, attempt)
SELECT r.finished_at, k.kind, r.job_id, r.id, 'bench', 1
FROM engine_step_runs AS r
CROSS JOIN (VALUES ('claimed'), ('succeeded')) AS k (kind)
UNION ALL
SELECT j.finished_at, k.kind, j.id, NULL, 'bench', NULL
FROM engine_jobs AS j
CROSS JOIN (VALUES ('submitted'), ('job_done')) AS k (kind)
WHERE j.status IN ('done', 'failed');

-- retention_seed_tags --
-- Set-based: the searchable parameter's tag of every finished job, as submit writes it.
INSERT INTO engine_job_tags (job_id, name, value, job_created_at)
SELECT id, 'param.period', params ->> 'period', created_at
FROM engine_jobs WHERE status IN ('done', 'failed');

-- retention_seed_active --
-- Set-based: C pending jobs of flow bench with one due step run each: what the claimer claims during and without a retirement.
WITH jobs AS (
    INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status)
    SELECT md5('active' || g)::uuid, 'bench', 1, jsonb_build_object('n', -g),
           md5('afp' || g) || md5('afp2' || g), 'pending'
    FROM generate_series(1, %(active)s) AS g
    RETURNING id
)
INSERT INTO engine_step_runs (id, job_id, step, fingerprint, status, max_attempts)
SELECT md5('arun' || id::text)::uuid, id, 'step1', md5('a' || id::text) || md5('b'), 'pending', 3
FROM jobs;

-- retention_active_runs --
-- Read only: the pending step runs the claimer takes, with their jobs.
SELECT id, job_id FROM engine_step_runs WHERE status = 'pending' ORDER BY id;

-- retention_dead_tuples --
-- Read only: the dead tuples of each live table, counted exactly from its pages (pgstattuple reads the table whole; the statistics collector's n_dead_tup lags a backend's last deletes).
SELECT t.relname, s.tuple_count AS live, s.dead_tuple_count AS dead, s.dead_tuple_percent
FROM (VALUES ('engine_jobs'), ('engine_step_runs'), ('engine_events'), ('engine_job_tags'))
     AS t (relname)
CROSS JOIN LATERAL pgstattuple(t.relname::regclass) AS s
ORDER BY t.relname;

-- retention_wait_event --
-- Read only: what one backend waits for now (its wait event as type:name; NULL: running on a CPU or ready to).
SELECT CASE WHEN wait_event IS NULL THEN NULL ELSE wait_event_type || ':' || wait_event END AS event
FROM pg_stat_activity
WHERE pid = %(pid)s;
