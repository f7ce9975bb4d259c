-- The ERP's flows declare their searchable parameters (issue 37): costing,
-- posting and close by `period`, costing by `store` too; the example flow by
-- `period`. Submit tags each as `param.NAME` (engine migration 0030, which
-- dropped the engine's indexes on these two parameters); the jobs submitted
-- before carry no such tags, so they are given here, as submit would have:
-- the value as text, none for an absent or null parameter.
INSERT INTO engine_job_tags (job_id, name, value)
SELECT j.id, 'param.period', j.params ->> 'period'
FROM engine_jobs AS j
WHERE j.flow IN ('costing', 'posting', 'close', 'example')
  AND j.params ->> 'period' <> '' AND length(j.params ->> 'period') <= 200
UNION ALL
SELECT j.id, 'param.store', j.params ->> 'store'
FROM engine_jobs AS j
WHERE j.flow = 'costing'
  AND j.params ->> 'store' <> '' AND length(j.params ->> 'store') <= 200
ON CONFLICT (job_id, name, value) DO NOTHING;
