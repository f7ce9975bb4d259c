-- schedule_insert_if_absent --
-- One schedule per name (unique): zero rows means the name is taken, never a second row.
INSERT INTO engine_schedules
    (name, flow, cron, timezone, params, catch_up, next_fire_at, created_by)
VALUES (%(name)s, %(flow)s, %(cron)s, %(timezone)s, %(params)s, %(catch_up)s,
        %(next_fire_at)s, %(created_by)s)
ON CONFLICT (name) DO NOTHING
RETURNING id, name, next_fire_at;

-- schedule_delete_by_name --
-- Removing a schedule removes its fire history with it (cascade); the jobs it submitted stay.
DELETE FROM engine_schedules WHERE name = %(name)s RETURNING id;

-- schedule_select_all --
-- Read-only: every schedule with the database's time, its last fire's outcome, who paused it, and whether it is due (not paused) while no live worker (running, seen within live_s) loads its flow, for `engine schedule list`.
SELECT s.id, s.name, s.flow, s.cron, s.timezone, s.params, s.catch_up, s.next_fire_at,
       s.last_fired_for, s.last_fired_at, s.last_job_id, s.last_error, s.created_by,
       s.created_at, s.paused_at, s.paused_by, s.paused_reason, now() AS db_now,
       f.outcome AS last_outcome,
       (s.next_fire_at <= now() AND s.paused_at IS NULL
        AND NOT EXISTS (SELECT FROM engine_workers AS w, unnest(w.runnable) AS v
                        WHERE w.status = 'running'
                          AND w.last_seen_at >= clock_timestamp() - make_interval(secs => %(live_s)s)
                          AND split_part(v, ':', 1) = s.flow)) AS unloaded
FROM engine_schedules AS s
LEFT JOIN engine_schedule_fires AS f
       ON f.schedule_id = s.id AND f.scheduled_for = s.last_fired_for
ORDER BY s.name;

-- schedule_select_names --
-- The names that exist, to say which are valid when one is not.
SELECT name FROM engine_schedules ORDER BY name;

-- schedule_select_db_now --
-- The database clock: schedules are due by it, never by a worker's clock.
SELECT now() AS db_now;

-- schedule_select_due_many --
-- Due by the database clock, not paused, and of a flow this worker has loaded; reading takes no lock: the claim decides who fires.
SELECT id, name, flow, cron, timezone, params, catch_up, next_fire_at, now() AS db_now
FROM engine_schedules
WHERE next_fire_at <= now() AND paused_at IS NULL AND flow = ANY (%(flows)s::text[])
ORDER BY next_fire_at
LIMIT %(limit)s;

-- schedule_claim_if_due --
-- Claim is one conditional UPDATE: still due, not paused and still at the next time this worker read (compare-and-swap), it moves past the times being fired; a racer blocks on the row, then sees the new value and gets zero rows. Rolled back with the submits it guards.
UPDATE engine_schedules
SET next_fire_at = %(next_fire_at)s
WHERE id = %(id)s AND next_fire_at = %(seen)s AND next_fire_at <= now() AND paused_at IS NULL
RETURNING id, next_fire_at;

-- schedule_fire_insert_if_new --
-- A scheduled time fires once (primary key): zero rows means it was fired already.
INSERT INTO engine_schedule_fires (schedule_id, scheduled_for, fired_by)
VALUES (%(schedule_id)s, %(scheduled_for)s, %(fired_by)s)
ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
RETURNING scheduled_for;

-- schedule_fire_set_outcome --
-- The fire's outcome (its job, or why it has none: refused or error), written in the transaction that inserted the fire (the row is this transaction's own).
UPDATE engine_schedule_fires
SET job_id = %(job_id)s, error = %(error)s, outcome = %(outcome)s
WHERE schedule_id = %(schedule_id)s AND scheduled_for = %(scheduled_for)s;

-- schedule_record_fired --
-- The last fire of a schedule, by the transaction holding its claimed row; the claim's own guard already decided this worker fires.
UPDATE engine_schedules
SET last_fired_for = %(scheduled_for)s, last_fired_at = clock_timestamp(),
    last_job_id = coalesce(%(job_id)s, last_job_id), last_error = %(error)s
WHERE id = %(id)s;

-- schedule_fire_select_by_schedule --
-- A schedule's fires, newest first (what it submitted, and what was refused and why).
SELECT f.scheduled_for, f.job_id, f.outcome, f.error, f.fired_by, f.fired_at
FROM engine_schedule_fires AS f
JOIN engine_schedules AS s ON s.id = f.schedule_id
WHERE s.name = %(name)s
ORDER BY f.scheduled_for DESC
LIMIT %(limit)s;

-- schedule_pause_if_active --
-- A pause takes effect once: zero rows means no schedule has that name or it is paused already (an idempotent no-op); the firer's claim restates paused_at IS NULL, so a pause that commits first wins over a worker that read the schedule as due.
UPDATE engine_schedules
SET paused_at = clock_timestamp(), paused_by = %(by)s, paused_reason = %(reason)s
WHERE name = %(name)s AND paused_at IS NULL
RETURNING id, paused_at;

-- schedule_select_by_name --
-- Read-only: one schedule and the database's time (a resume computes its next time from it).
SELECT id, name, flow, cron, timezone, params, catch_up, next_fire_at, paused_at, paused_by,
       now() AS db_now
FROM engine_schedules
WHERE name = %(name)s;

-- schedule_resume_if_paused --
-- A resume takes effect once (zero rows: not paused, or resumed by a racer first); a next time already passed moves to the first scheduled time after now (given), so the times that fell while paused never fire.
UPDATE engine_schedules
SET paused_at = NULL, paused_by = NULL, paused_reason = NULL,
    next_fire_at = greatest(next_fire_at, %(next_after_now)s::timestamptz)
WHERE id = %(id)s AND paused_at IS NOT NULL
RETURNING id, next_fire_at;
