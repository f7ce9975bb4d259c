-- signal_insert_if_absent --
-- One signal per job and name (unique constraint): a second send inserts nothing (zero rows), and the caller compares it with the one recorded; written after the job row was locked (job_lock_if_active).
INSERT INTO engine_signals (job_id, name, data, sent_by)
VALUES (%(job_id)s, %(name)s, %(data)s, %(sent_by)s)
ON CONFLICT ON CONSTRAINT engine_signals_job_name DO NOTHING
RETURNING name, data, sent_by, created_at;

-- signal_select --
-- At most one row (unique per job and name): the signal as it was recorded.
SELECT name, data, sent_by, created_at
FROM engine_signals
WHERE job_id = %(job_id)s AND name = %(name)s;

-- signal_select_for_wait --
-- Read by a running step in its fenced transaction: the signal if it was sent (before or after the step began to wait), and whether this step run's last wait for it ran out (its deadline, by the database clock); writes nothing.
SELECT sig.name, sig.data, sig.sent_by, sig.created_at,
       coalesce(s.wait_signal = %(name)s AND s.wait_until <= clock_timestamp(), false)
           AS timed_out,
       s.wait_until, s.wait_past
FROM engine_step_runs AS s
LEFT JOIN engine_signals AS sig ON sig.job_id = s.job_id AND sig.name = %(name)s
WHERE s.id = %(step_run_id)s;

-- signal_select_by_job --
-- Read-only, for status and reports: every signal a job received, in the order they came.
SELECT name, data, sent_by, created_at
FROM engine_signals
WHERE job_id = %(job_id)s
ORDER BY id;
