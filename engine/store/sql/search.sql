-- job_search --
-- Read only: jobs newest first, by the keyset (created_at, id). The FROM is engine_jobs, or, when a filter names a set of jobs (a match of tags or fan-out keys, free text), the jobs of that set (the INTERSECT of the sets given), each fetched by its primary key (OFFSET 0 keeps it a lookup per candidate, never a hash join over all jobs); the WHERE is the AND of the filter blocks whose parameters are given ("true" when none). A search by one tag alone walks that tag's index in the page's order instead (job_search_from_tag), ordered by the tag's copy of (created_at, id). A filter not given is not in the statement; what a job waits for is read for the page's rows only.
WITH page AS (
    SELECT j.id, j.flow, j.status, j.params, j.submitted_by, j.created_at, j.started_at,
           j.finished_at, j.parent_job_id, j.error
    FROM {jobs}
    WHERE {where}
    ORDER BY {order}
    LIMIT %(limit)s
)
SELECT page.*,
       extract(epoch FROM coalesce(page.finished_at, clock_timestamp()) - page.started_at)::float8
           AS duration_s,
       CASE WHEN page.status IN ('pending', 'running')
                 AND (SELECT 1 FROM engine_step_runs AS b
                      WHERE b.job_id = page.id AND b.status IN ('pending', 'running')
                      LIMIT 1) IS NULL
            THEN (SELECT json_agg(json_build_object('signal', w.wait_signal, 'until', w.wait_until,
                                                    'children', w.wait_children)
                                  ORDER BY w.created_at, w.step, w.fanout_key)
                  FROM engine_step_runs AS w
                  WHERE w.job_id = page.id AND w.status = 'waiting')
       END AS waits
FROM page
ORDER BY page.created_at DESC, page.id DESC;

-- job_search_where_before --
-- Keyset paging: strictly after the previous page's last row in (created_at DESC, id DESC) order, the order of every index a search walks; equal created_at are told apart by id, so no row repeats or goes missing.
(j.created_at, j.id) < (%(before_at)s::timestamptz, %(before_id)s::uuid)

-- job_search_where_job_id --
-- One job by its whole id: the primary key.
j.id = %(job_id)s::uuid

-- job_search_where_id_range --
-- The ids a hex prefix covers are one range in uuid (byte) order: the primary key answers it.
j.id BETWEEN %(id_low)s::uuid AND %(id_high)s::uuid

-- job_search_where_flow --
-- engine_jobs_flow_created (flow, created_at DESC, id DESC).
j.flow = %(flow)s::text

-- job_search_where_statuses --
-- engine_jobs_status_created (status, created_at DESC, id DESC): a rare status is found at once.
j.status = ANY(%(statuses)s::text[])

-- job_search_where_waiting --
-- Waiting is derived, never stored: active, a step run waiting and none pending or running; scalar subqueries (LIMIT 1), not EXISTS, so each stays a probe of the candidate job's own step runs by index, never a hash of every busy step run.
%(waiting)s::boolean = (
    j.status IN ('pending', 'running')
    AND (SELECT 1 FROM engine_step_runs AS w
         WHERE w.job_id = j.id AND w.status = 'waiting' LIMIT 1) IS NOT NULL
    AND (SELECT 1 FROM engine_step_runs AS b
         WHERE b.job_id = j.id AND b.status IN ('pending', 'running') LIMIT 1) IS NULL)

-- job_search_from_candidates --
-- The jobs of a set of candidate ids, each by its primary key: OFFSET 0 keeps the subquery a lookup per candidate, so a set of a few thousand jobs never becomes a scan of all of them.
(SELECT DISTINCT cand.id FROM ({candidates}) AS cand (id)) AS c
CROSS JOIN LATERAL (SELECT * FROM engine_jobs AS one WHERE one.id = c.id OFFSET 0) AS j

-- job_search_from_tag --
-- The jobs carrying one tag, newest first (a search by one parameter, one tag): engine_job_tags_value (name, value, job_created_at DESC, job_id DESC) walked in the page's order, each job by its primary key (OFFSET 0), so a page of a value many jobs carry costs a page; the ORDER BY is the tag's copy of (created_at, id), which is the job's (0030's trigger).
engine_job_tags AS t
CROSS JOIN LATERAL (SELECT * FROM engine_jobs AS one WHERE one.id = t.job_id OFFSET 0) AS j

-- job_search_from_tag_where --
-- The one tag a walk follows (job_search_from_tag).
t.name = %(tag_name)s::text AND t.value = %(tag_value)s::text

-- job_search_from_tag_before --
-- Keyset paging on the tag's copy of the job's (created_at, id), so the walk starts at the cursor.
(t.job_created_at, t.job_id) < (%(before_at)s::timestamptz, %(before_id)s::uuid)

-- job_search_match_tag --
-- One alternative of a match: the jobs carrying this tag (engine_job_tags_value (name, value, ...)); a flow's searchable parameters are tags too, written at submit.
SELECT t.job_id FROM engine_job_tags AS t
WHERE t.name = %(name)s::text AND t.value = %(value)s::text

-- job_search_match_key --
-- One alternative of a match: the jobs with a fan-out run of this key (engine_step_runs_fanout_key, fan-out runs only: a plain step's key is '').
SELECT r.job_id FROM engine_step_runs AS r
WHERE r.fanout_key = %(value)s::text AND r.fanout_key <> ''

-- job_search_source_text --
-- Text that is no job id nor a flow's name (that is the flow filter): any tag's value (engine_job_tags_text) or a fan-out's key; each source an index lookup.
SELECT t.job_id FROM engine_job_tags AS t
WHERE t.value = %(text)s::text
UNION
SELECT r.job_id FROM engine_step_runs AS r
WHERE r.fanout_key = %(text)s::text AND r.fanout_key <> ''

-- job_search_flow_exists --
-- Read only: whether any job is of this flow (one probe of engine_jobs_flow_created); search text naming a flow is a search by flow.
SELECT EXISTS (SELECT 1 FROM engine_jobs WHERE flow = %(flow)s) AS found;

-- job_search_where_error_text --
-- A bulk action's filter (engine/jobs/bulk.py): the job's error contains the text, case aside (strpos, so the text is never a LIKE pattern); read over the candidates other filters found.
strpos(lower(coalesce(j.error, '')), lower(%(error_text)s::text)) > 0

-- job_search_where_since --
-- A bulk action's time window: jobs created at or after this instant.
j.created_at >= %(since)s::timestamptz

-- job_search_where_until --
-- A bulk action's time window: jobs created before this instant.
j.created_at < %(until)s::timestamptz
