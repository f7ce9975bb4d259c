-- dead_letter_insert_step --
-- A step run is dead-lettered once until replayed (partial unique index); zero rows: it already was, so no second alert.
INSERT INTO engine_dead_letters (source, job_id, step_run_id, reason, error)
VALUES ('step', %(job_id)s, %(step_run_id)s, %(reason)s, %(error)s)
ON CONFLICT (step_run_id) WHERE source = 'step' AND replayed_at IS NULL DO NOTHING
RETURNING id;

-- dead_letter_insert_message_if_new --
-- A message that can never be handled is kept with its reason (the body is data, never executed), once per message id (partial unique index); zero rows: it was recorded already, so no second alert.
INSERT INTO engine_dead_letters (source, message_id, message_body, reason)
VALUES ('message', %(message_id)s, %(body)s, %(reason)s)
ON CONFLICT (message_id) WHERE source = 'message' AND message_id IS NOT NULL AND replayed_at IS NULL
DO NOTHING
RETURNING id;

-- dead_letter_select_open --
-- Open dead letters: not replayed yet, newest first.
SELECT d.id, d.source, d.job_id, d.step_run_id, d.reason, d.created_at, d.message_body,
       j.flow, s.step, s.fanout_key
FROM engine_dead_letters AS d
LEFT JOIN engine_jobs AS j ON j.id = d.job_id
LEFT JOIN engine_step_runs AS s ON s.id = d.step_run_id
WHERE d.replayed_at IS NULL
ORDER BY d.id DESC
LIMIT %(limit)s;

-- dead_letter_select_one --
-- One dead letter by id, for replay.
SELECT id, source, job_id, step_run_id, message_body, replayed_at
FROM engine_dead_letters WHERE id = %(id)s;

-- dead_letter_mark_replayed_if_open --
-- A dead letter is replayed once.
UPDATE engine_dead_letters SET replayed_at = clock_timestamp()
WHERE id = %(id)s AND replayed_at IS NULL
RETURNING id;

-- dead_letter_mark_replayed_by_job --
-- Replaying closes the open dead letters of those step runs, so a later failure alerts again.
UPDATE engine_dead_letters SET replayed_at = clock_timestamp()
WHERE job_id = %(job_id)s AND source = 'step' AND replayed_at IS NULL;

-- dead_letter_delete_closed --
-- Purge drops what needs no action: poison messages and replayed entries; open step dead letters stay with their failed jobs.
DELETE FROM engine_dead_letters
WHERE source = 'message' OR replayed_at IS NOT NULL
RETURNING id;

-- dead_letter_count_open --
-- Read-only, for `engine status --json`: open dead letters (not replayed), by source.
SELECT source, count(*)::int AS n FROM engine_dead_letters WHERE replayed_at IS NULL GROUP BY source;

-- dead_letter_select_for_preview --
-- Read only, for a bulk dry run: the dead letters a filter finds, oldest first, with their job's flow and status (a message has neither); each filter applies when given (NULL: any); tags: every (name, value) pair given must be one of the job's tags.
SELECT d.id, d.source, d.job_id, coalesce(j.flow, '') AS flow, j.status AS job_status,
       CASE WHEN d.replayed_at IS NULL THEN 'open' ELSE 'replayed' END AS state
FROM engine_dead_letters AS d
LEFT JOIN engine_jobs AS j ON j.id = d.job_id
WHERE (%(flow)s::text IS NULL OR j.flow = %(flow)s::text)
  AND (%(replayed)s::boolean IS NULL OR (d.replayed_at IS NOT NULL) = %(replayed)s::boolean)
  AND (NOT %(purgeable)s::boolean OR d.source = 'message' OR d.replayed_at IS NOT NULL)
  AND (%(error_text)s::text IS NULL
       OR strpos(lower(d.reason || ' ' || coalesce(d.error::text, '')),
                 lower(%(error_text)s::text)) > 0)
  AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR d.created_at < %(until)s::timestamptz)
  AND (cardinality(%(tag_names)s::text[]) = 0
       OR (SELECT count(DISTINCT (t.name, t.value)) FROM engine_job_tags AS t
           WHERE t.job_id = d.job_id
             AND (t.name, t.value) IN (SELECT * FROM unnest(%(tag_names)s::text[],
                                                            %(tag_values)s::text[])))
          = cardinality(%(tag_names)s::text[]))
ORDER BY d.id
LIMIT %(limit)s;

-- dead_letter_select_locked --
-- A bulk action re-checks a dead letter under its row lock (taken after its job's row: the lock order), so a replay or purge acts on it only as it was previewed.
SELECT id, source, job_id, message_body, replayed_at FROM engine_dead_letters
WHERE id = %(id)s FOR UPDATE;

-- dead_letter_delete_if_closed --
-- A bulk purge deletes one previewed dead letter, only while it needs no action (a message, or replayed); an open step dead letter stays with its failed job.
DELETE FROM engine_dead_letters
WHERE id = %(id)s AND (source = 'message' OR replayed_at IS NOT NULL)
RETURNING id;

-- dead_letter_mark_replayed_by_jobs --
-- dead_letter_mark_replayed_by_job for a bulk retry's chunk of jobs, one statement (by the open-by-job index).
UPDATE engine_dead_letters SET replayed_at = clock_timestamp()
WHERE job_id = ANY(%(ids)s::uuid[]) AND source = 'step' AND replayed_at IS NULL;

-- dead_letter_select_many_locked --
-- A bulk action's chunk of dead letters under their row locks in one statement (after their jobs' rows: job_select_many_locked, the lock order), so a replay acts on each only as it was previewed.
SELECT id, source, job_id, replayed_at FROM engine_dead_letters
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id
FOR UPDATE;

-- dead_letter_select_jobs_of --
-- Read only, before a bulk action's chunk locks them: the jobs of these dead letters (their rows are locked first, the lock order).
SELECT DISTINCT job_id FROM engine_dead_letters
WHERE id = ANY(%(ids)s::bigint[]) AND job_id IS NOT NULL;
