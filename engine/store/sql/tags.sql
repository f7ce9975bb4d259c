-- tag_insert_many --
-- A step's tags commit with its checkpoint in its fenced transaction (invariant 5), once: one set-based statement per call, and a value the job already carries (a rerun, a repeat in the list) is ignored by the primary key.
INSERT INTO engine_job_tags (job_id, name, value)
SELECT %(job_id)s, %(name)s, v.value
FROM unnest(%(values)s::text[]) AS v (value)
ON CONFLICT (job_id, name, value) DO NOTHING;

-- tag_select_by_job --
-- Read only: a job's tags, by name then value.
SELECT name, value FROM engine_job_tags WHERE job_id = %(job_id)s ORDER BY name, value;
