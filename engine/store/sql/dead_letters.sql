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
