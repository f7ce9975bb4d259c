-- Schedules: a flow submitted on a calendar (`engine schedule add NAME --flow F
-- --cron "0 2 * * *" --timezone Europe/Istanbul`). Any worker fires a due
-- schedule: one conditional UPDATE moves next_fire_at past the slots it fires
-- (compare-and-swap on the value it read), and the jobs are submitted in that
-- same transaction, so a crash between the two leaves the slot due. Each
-- scheduled time is fired once whatever the number of workers.
CREATE TABLE engine_schedules (
    -- a removed and re-added name is a new schedule (its fires are its own)
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    flow           text        NOT NULL CHECK (flow ~ '^[a-z][a-z0-9_-]*$'),
    cron           text        NOT NULL,
    timezone       text        NOT NULL,
    -- values as given; '@current_month' and the like are resolved per slot
    params         jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(params) = 'object'),
    catch_up       text        NOT NULL DEFAULT 'latest' CHECK (catch_up IN ('latest', 'all')),
    -- the next scheduled time (UTC); due once now() reaches it
    next_fire_at   timestamptz NOT NULL,
    last_fired_for timestamptz,
    last_fired_at  timestamptz,
    last_job_id    uuid,
    last_error     text,
    created_by     text,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((last_fired_for IS NULL) = (last_fired_at IS NULL))
);
CREATE INDEX engine_schedules_due ON engine_schedules (next_fire_at);

-- One row per scheduled time fired: its job, or why it was refused. The
-- primary key makes "each scheduled time fires once" a constraint as well.
CREATE TABLE engine_schedule_fires (
    schedule_id    bigint      NOT NULL REFERENCES engine_schedules (id) ON DELETE CASCADE,
    scheduled_for  timestamptz NOT NULL,
    job_id         uuid        REFERENCES engine_jobs (id),
    error          text,
    fired_by       text        NOT NULL,
    fired_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (schedule_id, scheduled_for),
    CHECK (job_id IS NULL OR error IS NULL)
);
CREATE INDEX engine_schedule_fires_job ON engine_schedule_fires (job_id);

-- Schedules are added and removed by an operator (the owner's role). A
-- worker reads them, advances the ones it fires and records each fire.
REVOKE ALL ON engine_schedules, engine_schedule_fires FROM engine_worker;
GRANT SELECT ON engine_schedules TO engine_worker;
GRANT UPDATE (next_fire_at, last_fired_for, last_fired_at, last_job_id, last_error)
    ON engine_schedules TO engine_worker;
GRANT SELECT, INSERT ON engine_schedule_fires TO engine_worker;
GRANT UPDATE (job_id, error) ON engine_schedule_fires TO engine_worker;

-- Firing submits the job, so the worker may now insert jobs; only pending
-- ones: the status, outcome and timing columns take their defaults.
GRANT INSERT (id, flow, flow_version, params, fingerprint, submitted_by)
    ON engine_jobs TO engine_worker;
