-- alert_insert_for_dead_letter --
-- One alert per dead letter (unique dead_letter_id), written in the dead letter's own transaction with one pending delivery per sink; zero rows: it was alerted already.
WITH d AS (
    SELECT d.id, d.source, d.job_id, d.step_run_id, d.reason, d.error,
           j.flow, s.step, s.attempts
    FROM engine_dead_letters AS d
    LEFT JOIN engine_jobs AS j ON j.id = d.job_id
    LEFT JOIN engine_step_runs AS s ON s.id = d.step_run_id
    WHERE d.id = %(dead_letter_id)s
), a AS (
    INSERT INTO engine_alerts
        (dead_letter_id, source, job_id, step_run_id, flow, step, attempts, error_line, reason)
    SELECT id, source, job_id, step_run_id, flow, step, attempts,
           left(split_part(coalesce((error ->> 'type') || ': ' || (error ->> 'message'), reason),
                           E'\n', 1), 500),
           reason
    FROM d
    ON CONFLICT (dead_letter_id) DO NOTHING
    RETURNING id
), deliveries AS (
    INSERT INTO engine_alert_deliveries (alert_id, sink)
    SELECT a.id, sink FROM a, unnest(%(sinks)s::text[]) AS sink
)
SELECT id FROM a;

-- alert_insert_for_release --
-- Invariant 20: one alert per charged attempt of a step run released at no charge past its bound (unique by step run and attempts), written in the charge's own transaction with one pending delivery per sink; the job row is read, never locked; zero rows: that attempt was alerted already.
WITH s AS (
    SELECT s.id, s.job_id, j.flow, s.step, s.attempts
    FROM engine_step_runs AS s
    JOIN engine_jobs AS j ON j.id = s.job_id
    WHERE s.id = %(step_run_id)s
), a AS (
    INSERT INTO engine_alerts (source, job_id, step_run_id, flow, step, attempts, error_line, reason)
    SELECT 'release', job_id, id, flow, step, attempts, left(%(error_line)s, 500), %(reason)s
    FROM s
    ON CONFLICT (step_run_id, attempts) WHERE source = 'release' DO NOTHING
    RETURNING id
), deliveries AS (
    INSERT INTO engine_alert_deliveries (alert_id, sink)
    SELECT a.id, sink FROM a, unnest(%(sinks)s::text[]) AS sink
)
SELECT id FROM a;

-- alert_delivery_claim_due_many --
-- Claim is one conditional UPDATE: due pending deliveries, or sending ones whose claim lapsed (a dispatcher died mid-send), become sending with a fresh token; SKIP LOCKED and the restated guard give each to one dispatcher.
WITH due AS (
    SELECT alert_id, sink
    FROM engine_alert_deliveries
    WHERE sink = ANY (%(sinks)s::text[])
      AND ((status = 'pending' AND next_attempt_at <= clock_timestamp())
           OR (status = 'sending' AND claimed_until <= clock_timestamp()))
    ORDER BY next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE engine_alert_deliveries AS d
SET status = 'sending',
    attempts = d.attempts + 1,
    claimed_by = %(owner)s,
    claim_token = gen_random_uuid(),
    claimed_until = clock_timestamp() + make_interval(secs => %(claim_s)s)
FROM due
JOIN engine_alerts AS a ON a.id = due.alert_id
WHERE d.alert_id = due.alert_id AND d.sink = due.sink
  AND ((d.status = 'pending' AND d.next_attempt_at <= clock_timestamp())
       OR (d.status = 'sending' AND d.claimed_until <= clock_timestamp()))
RETURNING d.alert_id, d.sink, d.attempts AS delivery_attempts, d.claim_token,
          a.dead_letter_id, a.source, a.job_id, a.step_run_id, a.flow, a.step, a.attempts,
          a.error_line, a.reason, a.created_at, a.flow_version, a.schedule, a.scheduled_for;

-- alert_delivery_mark_delivered_if_claimed --
-- Only the dispatcher holding the claim token records the delivery; zero rows: its claim lapsed and another took it over.
UPDATE engine_alert_deliveries
SET status = 'delivered', delivered_at = clock_timestamp(), last_error = NULL
WHERE alert_id = %(alert_id)s AND sink = %(sink)s
  AND status = 'sending' AND claim_token = %(token)s
RETURNING alert_id;

-- alert_delivery_mark_failed_if_claimed --
-- A failed send is retried after its backoff, or abandoned at the cap; only the claim holder decides (zero rows: its claim lapsed).
UPDATE engine_alert_deliveries
SET status = CASE WHEN attempts >= %(max_attempts)s THEN 'abandoned' ELSE 'pending' END,
    next_attempt_at = clock_timestamp() + make_interval(secs => %(delay_s)s),
    last_error = left(%(error)s, 500)
WHERE alert_id = %(alert_id)s AND sink = %(sink)s
  AND status = 'sending' AND claim_token = %(token)s
RETURNING status;

-- alert_delivery_reset_abandoned --
-- An operator sends abandoned deliveries again (engine alerts retry); delivered ones are never resent.
UPDATE engine_alert_deliveries
SET status = 'pending', attempts = 0, next_attempt_at = clock_timestamp(),
    claimed_by = NULL, claim_token = NULL, claimed_until = NULL
WHERE status = 'abandoned' AND (%(alert_id)s::bigint IS NULL OR alert_id = %(alert_id)s)
RETURNING alert_id, sink;

-- alert_select_recent --
-- Alerts newest first, each with all its deliveries' state, for `engine alerts list` (pending_only: those with a delivery not delivered yet).
SELECT a.id, a.dead_letter_id, a.source, a.job_id, a.step_run_id, a.flow, a.step, a.attempts,
       a.error_line, a.reason, a.created_at, a.flow_version, a.schedule, a.scheduled_for,
       coalesce(jsonb_agg(jsonb_build_object(
                    'sink', d.sink, 'status', d.status, 'attempts', d.attempts,
                    'delivered_at', d.delivered_at, 'next_attempt_at', d.next_attempt_at,
                    'last_error', d.last_error) ORDER BY d.sink)
                FILTER (WHERE d.sink IS NOT NULL), '[]'::jsonb) AS deliveries
FROM engine_alerts AS a
LEFT JOIN engine_alert_deliveries AS d ON d.alert_id = a.id
WHERE %(pending_only)s IS FALSE
   OR EXISTS (SELECT FROM engine_alert_deliveries AS p
              WHERE p.alert_id = a.id AND p.status IN ('pending', 'sending', 'abandoned'))
GROUP BY a.id
ORDER BY a.id DESC
LIMIT %(limit)s;

-- alert_delivery_select_by_alert --
-- One alert's deliveries (none: no such alert, or no sink was configured when it was recorded).
SELECT d.alert_id, d.sink, d.status, d.attempts, d.last_error
FROM engine_alerts AS a
JOIN engine_alert_deliveries AS d ON d.alert_id = a.id
WHERE a.id = %(alert_id)s
ORDER BY d.sink;

-- alert_exists --
-- Whether an alert of that id was recorded (an operator's retry names one).
SELECT 1 FROM engine_alerts WHERE id = %(alert_id)s;

-- alert_insert_for_orphaned_versions --
-- One alert per orphan episode (unique flow, version, episode) of a flow version that active jobs need and no live worker has loaded for alert_after_s; the episode is the last time any worker that had it was seen ('epoch', 1970: none ever did), stable while it stays orphaned, so any number of sweepers make one alert, with one pending delivery per sink. The versions active jobs need are read one index step each (engine_jobs_active_flow_version, a skip scan), and each orphaned one's oldest job by that index too; its jobs are counted only for an alert not made yet: every sweep round ran this, and grouping every active job took 1.6 s at 1.5M.
WITH RECURSIVE versions (flow, flow_version) AS (
    (SELECT j.flow, j.flow_version FROM engine_jobs AS j
     WHERE j.status IN ('pending', 'running')
     ORDER BY j.flow, j.flow_version
     LIMIT 1)
    UNION ALL
    SELECT n.flow, n.flow_version
    FROM versions AS v
    CROSS JOIN LATERAL (
        SELECT j.flow, j.flow_version FROM engine_jobs AS j
        WHERE j.status IN ('pending', 'running')
          AND (j.flow, j.flow_version) > (v.flow, v.flow_version)
        ORDER BY j.flow, j.flow_version
        LIMIT 1) AS n
), live AS (
    SELECT runnable
    FROM engine_workers
    WHERE status = 'running'
      AND last_seen_at >= clock_timestamp() - make_interval(secs => %(live_s)s)
), orphaned AS (
    SELECT v.flow, v.flow_version, o.created_at AS oldest_created_at, o.id AS oldest_job,
           coalesce((SELECT max(w.last_seen_at) FROM engine_workers AS w
                     WHERE (v.flow || ':' || v.flow_version) = ANY (w.runnable)),
                    'epoch') AS episode
    FROM versions AS v
    CROSS JOIN LATERAL (
        SELECT j.id, j.created_at FROM engine_jobs AS j
        WHERE j.status IN ('pending', 'running')
          AND j.flow = v.flow AND j.flow_version = v.flow_version
        -- by the index's order alone (an id beside it sent the planner along every
        -- job's creation time): of jobs made at the same instant, either is the oldest
        ORDER BY j.created_at
        LIMIT 1) AS o
    WHERE NOT EXISTS (SELECT FROM live AS l
                      WHERE (v.flow || ':' || v.flow_version) = ANY (l.runnable))
), counted AS (
    SELECT o.*,
           (SELECT count(*) FROM engine_jobs AS j
            WHERE j.status IN ('pending', 'running')
              AND j.flow = o.flow AND j.flow_version = o.flow_version)::int AS active_jobs
    FROM orphaned AS o
    WHERE greatest(o.episode, o.oldest_created_at)
          <= clock_timestamp() - make_interval(secs => %(alert_after_s)s)
      AND NOT EXISTS (SELECT FROM engine_alerts AS x
                      WHERE x.source = 'version' AND x.flow = o.flow
                        AND x.flow_version = o.flow_version AND x.episode = o.episode)
), due AS (
    SELECT c.*,
           format('flow %%s version %%s is needed by %%s active job(s) and loaded by no live worker %%s',
                  c.flow, c.flow_version, c.active_jobs,
                  CASE WHEN c.episode = 'epoch' THEN 'ever'
                       ELSE 'since ' || to_char(c.episode AT TIME ZONE 'UTC',
                                                'YYYY-MM-DD"T"HH24:MI:SS"Z"') END) AS line
    FROM counted AS c
), a AS (
    INSERT INTO engine_alerts
        (source, job_id, flow, flow_version, episode, error_line, reason)
    SELECT 'version', oldest_job, flow, flow_version, episode, line,
           line || ': start a worker that has it loaded, or cancel its jobs'
    FROM due
    ON CONFLICT (flow, flow_version, episode) WHERE source = 'version' DO NOTHING
    RETURNING id, flow, flow_version
), deliveries AS (
    INSERT INTO engine_alert_deliveries (alert_id, sink)
    SELECT a.id, sink FROM a, unnest(%(sinks)s::text[]) AS sink
)
SELECT id, flow, flow_version FROM a;

-- alert_insert_for_schedule_fire --
-- One alert per schedule and scheduled time (unique schedule_id, scheduled_for), written in the transaction of the fire that was refused or raised, with one pending delivery per sink; zero rows: that time was alerted already.
WITH a AS (
    INSERT INTO engine_alerts
        (source, schedule_id, schedule, scheduled_for, flow, error_line, reason)
    SELECT 'schedule', s.id, s.name, %(scheduled_for)s::timestamptz, s.flow,
           left(%(outcome)s::text || ': ' || split_part(%(error)s::text, E'\n', 1), 500),
           format('schedule %%s: the %%s job for %%s was not submitted (%%s): %%s',
                  s.name, s.flow,
                  to_char(%(scheduled_for)s::timestamptz AT TIME ZONE 'UTC',
                          'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                  %(outcome)s::text, %(error)s::text)
    FROM engine_schedules AS s
    WHERE s.id = %(schedule_id)s
    ON CONFLICT (schedule_id, scheduled_for) WHERE source = 'schedule' DO NOTHING
    RETURNING id
), deliveries AS (
    INSERT INTO engine_alert_deliveries (alert_id, sink)
    SELECT a.id, sink FROM a, unnest(%(sinks)s::text[]) AS sink
)
SELECT id FROM a;

-- alert_insert_for_unloaded_schedules --
-- One alert per schedule and scheduled time (unique schedule_id, scheduled_for) of a schedule due (not paused) while no live worker loads its flow, once both its time and the last sight of any worker that had the flow ('epoch': none ever did) are alert_after_s old; any number of sweepers make one alert, with one pending delivery per sink. The time stays due: a worker with the flow fires it on return.
WITH live AS (
    SELECT runnable
    FROM engine_workers
    WHERE status = 'running'
      AND last_seen_at >= clock_timestamp() - make_interval(secs => %(live_s)s)
), unloaded AS (
    SELECT s.id, s.name, s.flow, s.next_fire_at,
           coalesce((SELECT max(w.last_seen_at)
                     FROM engine_workers AS w, unnest(w.runnable) AS v
                     WHERE split_part(v, ':', 1) = s.flow), 'epoch') AS last_loaded_at
    FROM engine_schedules AS s
    WHERE s.next_fire_at <= clock_timestamp() - make_interval(secs => %(alert_after_s)s)
      AND s.paused_at IS NULL
      AND NOT EXISTS (SELECT FROM live AS l, unnest(l.runnable) AS v
                      WHERE split_part(v, ':', 1) = s.flow)
), due AS (
    SELECT u.*, format('no worker loads flow %%s', u.flow) AS line
    FROM unloaded AS u
    WHERE u.last_loaded_at <= clock_timestamp() - make_interval(secs => %(alert_after_s)s)
), a AS (
    INSERT INTO engine_alerts
        (source, schedule_id, schedule, scheduled_for, flow, error_line, reason)
    SELECT 'schedule', id, name, next_fire_at, flow, line,
           format('schedule %%s is due since %%s and %%s (%%s): start a worker that loads it, '
                  'or remove the schedule',
                  name,
                  to_char(next_fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                  line,
                  CASE WHEN last_loaded_at = 'epoch' THEN 'none ever did'
                       ELSE 'last seen ' || to_char(last_loaded_at AT TIME ZONE 'UTC',
                                                    'YYYY-MM-DD"T"HH24:MI:SS"Z"') END)
    FROM due
    ON CONFLICT (schedule_id, scheduled_for) WHERE source = 'schedule' DO NOTHING
    RETURNING id, schedule, flow
), deliveries AS (
    INSERT INTO engine_alert_deliveries (alert_id, sink)
    SELECT a.id, sink FROM a, unnest(%(sinks)s::text[]) AS sink
)
SELECT id, schedule, flow FROM a;
