-- bulk_seed_jobs --
-- Set-based: N failed posting jobs (the outage's) and N/10 failed migration jobs (not in the filter), each one step run dead at its cap.
INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status, submitted_by, error,
                         created_at, started_at, finished_at)
SELECT md5('bulk' || g)::uuid,
       CASE WHEN g <= %(n)s THEN 'posting' ELSE 'migration' END,
       1,
       jsonb_build_object('period', '2026-11', 'batch', g),
       md5('bfp' || g) || md5('bfp2' || g),
       'failed',
       'bench@erp',
       CASE WHEN g <= %(n)s THEN 'could not connect: db down' ELSE 'bad file' END,
       clock_timestamp() - interval '1 hour',
       clock_timestamp() - interval '1 hour',
       clock_timestamp() - interval '30 minutes'
FROM generate_series(1, %(n)s + %(n)s / 10) AS g;

-- bulk_seed_step_runs --
-- Set-based: each seeded job's one step run, dead after its three attempts.
INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, status, attempts,
                              max_attempts, created_at, started_at, finished_at, error)
SELECT md5('bulkrun' || j.id)::uuid, j.id, 'post', '', md5('bsr' || j.id) || md5('bsr2' || j.id),
       'dead', 3, 3, j.created_at, j.started_at, j.finished_at,
       jsonb_build_object('message', j.error)
FROM engine_jobs AS j WHERE j.submitted_by = 'bench@erp';

-- bulk_seed_dead_letters --
-- Set-based: each dead step run's dead letter, as the worker writes it.
INSERT INTO engine_dead_letters (source, job_id, step_run_id, reason, error, created_at)
SELECT 'step', s.job_id, s.id, 'attempts exhausted', s.error, s.finished_at
FROM engine_step_runs AS s WHERE s.step = 'post' AND s.status = 'dead';

-- bulk_acted_outside --
-- Read only: audit entries of the preview whose dead letter is not one of its items (must be 0).
SELECT count(*)::int AS n FROM engine_audit AS a
WHERE a.detail ->> 'preview' = %(preview)s
  AND a.target_id NOT IN (SELECT item ->> 0 FROM engine_bulk_previews AS p,
                                 jsonb_array_elements(p.items) AS item
                          WHERE p.id = %(preview)s::uuid);

-- bulk_select_some_open --
-- Read only: the newest N open dead letters of the previewed flow (the ones another operator replays by hand during the apply).
SELECT d.id FROM engine_dead_letters AS d JOIN engine_jobs AS j ON j.id = d.job_id
WHERE j.flow = 'posting' AND d.replayed_at IS NULL
ORDER BY d.id DESC LIMIT %(n)s;
