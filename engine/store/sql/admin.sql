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

-- dead_letter_delete_closed --
-- Purge drops what needs no action: poison messages and replayed entries; open step dead letters stay with their failed jobs.
DELETE FROM engine_dead_letters
WHERE source = 'message' OR replayed_at IS NOT NULL
RETURNING id;

-- job_select_status --
-- The status of one job, for messages to the user.
SELECT status FROM engine_jobs WHERE id = %(job_id)s;

-- job_progress --
-- Step runs finished over step runs known so far (fan-outs add runs as they expand).
SELECT j.status, j.error,
       count(s.id)::int AS total,
       count(s.id) FILTER (WHERE s.status = 'done')::int AS done
FROM engine_jobs AS j
LEFT JOIN engine_step_runs AS s ON s.job_id = j.id
WHERE j.id = %(job_id)s
GROUP BY j.id;
