-- runs_seed_jobs --
-- Set-based: N jobs, three at each minute (equal created_at across a page's edge), a mix of flows, periods over three years, some costing jobs for one store; the newest fiftieth active, one in 33 failed, one in 97 cancelled, the rest done.
INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status, submitted_by,
                         error, created_at, started_at, finished_at)
SELECT md5('job' || g)::uuid,
       f.flow,
       1,
       CASE WHEN f.flow = 'costing' AND g %% 5 = 0
            THEN jsonb_build_object('period', p.period, 'store',
                                    'ST' || lpad((1 + (g / 7) %% 50)::text, 3, '0'))
            WHEN f.flow = 'migration' THEN jsonb_build_object('file', 'items-' || g || '.csv')
            ELSE jsonb_build_object('period', p.period) END,
       md5('fp' || g) || md5('fp2' || g),
       s.status,
       'user' || (g %% 20) || '@erp',
       CASE WHEN s.status IN ('failed', 'cancelled') THEN 'failed on purpose ' || g END,
       t.created_at,
       CASE WHEN s.status <> 'pending' THEN t.created_at + interval '1 second' END,
       CASE WHEN s.status IN ('done', 'failed', 'cancelled')
            THEN t.created_at + (1 + g %% 300) * interval '1 second' END
FROM generate_series(1, %(jobs)s) AS g
CROSS JOIN LATERAL (SELECT timestamptz '2026-12-01 00:00+00'
                           - ((%(jobs)s - g) / 3) * interval '1 minute' AS created_at) AS t
CROSS JOIN LATERAL (SELECT (ARRAY['posting', 'posting', 'posting', 'posting', 'costing',
                                  'costing', 'costing', 'close', 'migration', 'migration'])
                               [1 + g %% 10] AS flow) AS f
CROSS JOIN LATERAL (SELECT to_char(date '2024-01-01' + ((g * 37) %% 36) * interval '1 month',
                                   'YYYY-MM') AS period) AS p
CROSS JOIN LATERAL (SELECT CASE
    WHEN g > %(jobs)s * 0.98 AND g %% 3 = 0 THEN 'pending'
    WHEN g > %(jobs)s * 0.98 THEN 'running'
    WHEN g %% 33 = 0 THEN 'failed'
    WHEN g %% 97 = 0 THEN 'cancelled'
    ELSE 'done' END AS status) AS s;

-- runs_seed_step_runs --
-- Set-based: M step runs spread evenly over the jobs (run r of job g): a first step, a fan-out (a costing's keyed by store code, the others by position), a last step; ended jobs' runs ended, a running job's last run running (leased) or, one in three, waiting for the signal approve with the others done, a pending job's runs pending.
INSERT INTO engine_step_runs (id, job_id, step, fanout_key, fingerprint, status, attempts,
                              max_attempts, lease_owner, lease_token, lease_expires_at,
                              output, created_at, started_at, finished_at, wait_signal)
SELECT md5('run' || x.s)::uuid,
       j.id,
       x.step,
       x.fanout_key,
       md5('srfp' || x.s) || md5('srfp2' || x.s),
       x.status,
       CASE WHEN x.status = 'pending' THEN 0 ELSE 1 END,
       3,
       CASE WHEN x.status = 'running' THEN 'bench-worker' END,
       CASE WHEN x.status = 'running' THEN md5('lease' || x.s)::uuid END,
       CASE WHEN x.status = 'running' THEN timestamptz '2030-01-01 00:00+00' END,
       CASE WHEN x.status = 'done' THEN '{}'::jsonb END,
       j.created_at,
       j.started_at,
       CASE WHEN x.status IN ('done', 'dead', 'cancelled') THEN j.created_at + interval '1 s' END,
       CASE WHEN x.status = 'waiting' THEN 'approve' END
FROM generate_series(0, %(runs)s - 1) AS r
CROSS JOIN LATERAL (SELECT 1 + r %% %(jobs)s AS g, r / %(jobs)s AS k,
                           greatest(%(runs)s / %(jobs)s, 2) AS per_job) AS gk
JOIN engine_jobs AS j ON j.id = md5('job' || gk.g)::uuid
CROSS JOIN LATERAL (SELECT
    r AS s,
    CASE WHEN gk.k = 0 THEN 'first' WHEN gk.k = gk.per_job - 1 THEN 'last' ELSE 'work' END AS step,
    CASE WHEN gk.k = 0 OR gk.k = gk.per_job - 1 THEN ''
         WHEN j.flow = 'costing' THEN 'ST' || lpad((1 + (gk.g + gk.k * 7) %% 50)::text, 3, '0')
         ELSE (gk.k - 1)::text END AS fanout_key,
    CASE
        WHEN j.status = 'done' THEN 'done'
        WHEN j.status = 'pending' THEN 'pending'
        WHEN j.status IN ('failed', 'cancelled') AND gk.k = gk.per_job - 1
            THEN CASE j.status WHEN 'failed' THEN 'dead' ELSE 'cancelled' END
        WHEN j.status IN ('failed', 'cancelled') THEN 'done'
        WHEN gk.k < gk.per_job - 1 THEN 'done'
        WHEN gk.g %% 3 = 1 THEN 'waiting'
        ELSE 'running' END AS status) AS x
WHERE gk.k < gk.per_job;

-- runs_seed_tags --
-- Set-based: a few thousand document numbers tagged on posting jobs (a few per job, as a posting's chunks tag what they posted).
INSERT INTO engine_job_tags (job_id, name, value)
SELECT md5('job' || (1 + ((t * 10) %% %(jobs)s)))::uuid, 'document', 'SI-' || lpad(t::text, 6, '0')
FROM generate_series(1, %(tags)s) AS t
ON CONFLICT DO NOTHING;

-- runs_seed_params --
-- Set-based: the tags submit gives a job of its flow's searchable parameters (the ERP's: period for costing, posting and close, a costing's store), as engine.jobs.submit writes them.
INSERT INTO engine_job_tags (job_id, name, value)
SELECT j.id, 'param.' || p.key, p.value
FROM engine_jobs AS j
CROSS JOIN LATERAL jsonb_each_text(j.params) AS p
WHERE (p.key = 'period' AND j.flow IN ('costing', 'posting', 'close'))
   OR (p.key = 'store' AND j.flow = 'costing')
ON CONFLICT DO NOTHING;

-- runs_sample --
-- Read only: values the searches ask for, drawn from the seeded rows (jobs' ids, rows halfway down for a deep cursor, document tags).
SELECT (SELECT array_agg(id) FROM (SELECT id FROM engine_jobs ORDER BY random() LIMIT 200) AS a) AS ids,
       (SELECT array_agg(value) FROM (SELECT value FROM engine_job_tags WHERE name = 'document' ORDER BY random() LIMIT 200) AS b) AS documents,
       (SELECT array_agg(created_at ORDER BY n) FROM (
            SELECT created_at, row_number() OVER () AS n FROM (
                SELECT created_at FROM engine_jobs ORDER BY created_at DESC, id DESC
                OFFSET (SELECT count(*) / 2 FROM engine_jobs) LIMIT 200) AS c0) AS c) AS deep_at,
       (SELECT array_agg(id ORDER BY n) FROM (
            SELECT id, row_number() OVER () AS n FROM (
                SELECT id FROM engine_jobs ORDER BY created_at DESC, id DESC
                OFFSET (SELECT count(*) / 2 FROM engine_jobs) LIMIT 200) AS d0) AS d) AS deep_id;
