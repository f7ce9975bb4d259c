-- Durable waits and signals (issue 14, item 3).
--
-- A step run may wait for a named signal of its job (with a deadline) or
-- until a time, holding no lease and no worker slot meanwhile: it rests in
-- the new status 'waiting', its attempt given back (waiting is not running
-- the step, invariant 14). A signal arriving, or the sweeper finding its
-- deadline passed, makes it pending and announces it; the step then runs
-- again from its start and finds the signal (or its timeout).

ALTER TABLE engine_step_runs
    ADD COLUMN wait_signal text,
    ADD COLUMN wait_until  timestamptz;

ALTER TABLE engine_step_runs DROP CONSTRAINT engine_step_runs_status_check;
ALTER TABLE engine_step_runs ADD CONSTRAINT engine_step_runs_status_check
    CHECK (status IN ('pending', 'running', 'waiting', 'done', 'dead', 'cancelled'));
-- A waiting step run waits for something: a signal, a time, or both (a
-- signal with a timeout). Nothing else constrains the two columns: they stay
-- after a wake as the record of the last wait (and of its timeout).
ALTER TABLE engine_step_runs ADD CONSTRAINT engine_step_runs_waits_for_something
    CHECK (status <> 'waiting' OR wait_signal IS NOT NULL OR wait_until IS NOT NULL);
ALTER TABLE engine_step_runs ADD CONSTRAINT engine_step_runs_wait_signal_name
    CHECK (wait_signal ~ '^[a-z][a-z0-9_.-]{0,62}$');

-- The sweeper wakes the waits whose deadline passed; the signal wakes its waiters.
CREATE INDEX engine_step_runs_wait_until
    ON engine_step_runs (wait_until) WHERE status = 'waiting';
CREATE INDEX engine_step_runs_wait_signal
    ON engine_step_runs (job_id, wait_signal) WHERE status = 'waiting';

-- One signal per job and name: a second one with the same name is the same
-- signal (identical data) or refused; a step asking for it finds it whenever
-- it asks, before or after it started waiting.
CREATE TABLE engine_signals (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      uuid        NOT NULL REFERENCES engine_jobs (id),
    name        text        NOT NULL CHECK (name ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    data        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    sent_by     text,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT engine_signals_job_name UNIQUE (job_id, name)
);

ALTER TABLE engine_events DROP CONSTRAINT engine_events_kind_check;
ALTER TABLE engine_events ADD CONSTRAINT engine_events_kind_check CHECK (kind IN (
    'submitted', 'published', 'claimed', 'claim_refused', 'renewed',
    'lease_lost', 'reclaimed', 'released', 'succeeded', 'retried',
    'dead_lettered', 'cancelled', 'fenced', 'message_dropped',
    'job_done', 'job_failed', 'replayed',
    'waiting', 'signalled', 'woken'));

-- The worker moves its step run to waiting (and the sweeper wakes it) and
-- reads signals; signals are sent by the ERP or an operator, never by a worker.
GRANT UPDATE (wait_signal, wait_until) ON engine_step_runs TO engine_worker;
REVOKE ALL ON engine_signals FROM engine_worker;
GRANT SELECT ON engine_signals TO engine_worker;
