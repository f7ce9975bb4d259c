-- The engine's own tables. The constraints carry the invariants of
-- ../shared/DESIGN.md; the Python enums in engine/models.py mirror the CHECKs
-- (tests/integration/test_schema.py keeps them in sync).

-- One run of a flow with its parameters.
CREATE TABLE engine_jobs (
    id            uuid        PRIMARY KEY,
    flow          text        NOT NULL CHECK (flow ~ '^[a-z][a-z0-9_-]*$'),
    flow_version  integer     NOT NULL CHECK (flow_version >= 1),
    params        jsonb       NOT NULL,
    fingerprint   text        NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    status        text        NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    submitted_by  text,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at    timestamptz,
    finished_at   timestamptz,
    CHECK ((status IN ('done', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);

-- Invariant 7: at most one active job per fingerprint. Submit's
-- ON CONFLICT repeats this WHERE clause as its conflict target.
CREATE UNIQUE INDEX engine_jobs_active_fingerprint
    ON engine_jobs (fingerprint) WHERE status IN ('pending', 'running');
CREATE INDEX engine_jobs_flow_created ON engine_jobs (flow, created_at DESC);

-- One step of one job (one item of a fan-out): the unit claimed and leased.
CREATE TABLE engine_step_runs (
    id               uuid        PRIMARY KEY,
    job_id           uuid        NOT NULL REFERENCES engine_jobs (id),
    step             text        NOT NULL,
    fanout_key       text        NOT NULL DEFAULT '',
    fingerprint      text        NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'done', 'dead', 'cancelled')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    available_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_owner      text,
    lease_token      uuid,
    lease_expires_at timestamptz,
    item             jsonb,
    output           jsonb,
    error            jsonb,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at       timestamptz,
    finished_at      timestamptz,
    -- A step key exists once per job: scheduling inserts are idempotent.
    CONSTRAINT engine_step_runs_step_key UNIQUE (job_id, step, fanout_key),
    -- Attempts go up by one per claim and never pass the cap.
    CHECK (attempts <= max_attempts),
    -- A running step run always has a complete lease; no other status has one.
    CHECK ((status = 'running') = (lease_token IS NOT NULL)),
    CHECK ((lease_token IS NULL) = (lease_owner IS NULL)),
    CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL)),
    -- A finished step run has its checkpoint.
    CHECK (status <> 'done' OR output IS NOT NULL)
);
CREATE INDEX engine_step_runs_job ON engine_step_runs (job_id);
-- The sweeper's scans: expired leases and due retries.
CREATE INDEX engine_step_runs_lease_expiry
    ON engine_step_runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX engine_step_runs_available
    ON engine_step_runs (available_at) WHERE status = 'pending';

-- Invariant 8: "step run X is ready" rows written in the submitting (or
-- scheduling) transaction, handed to the transport only after it commits.
CREATE TABLE engine_outbox (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    step_run_id   uuid        NOT NULL REFERENCES engine_step_runs (id),
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    published_at  timestamptz
);
CREATE INDEX engine_outbox_unpublished ON engine_outbox (id) WHERE published_at IS NULL;

-- Append-only history: every claim, renewal, lease loss, reclaim, retry and
-- dead letter, with the database time and the worker.
CREATE TABLE engine_events (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind         text        NOT NULL CHECK (kind IN (
                     'submitted', 'published', 'claimed', 'claim_refused', 'renewed',
                     'lease_lost', 'reclaimed', 'released', 'succeeded', 'retried',
                     'dead_lettered', 'cancelled', 'fenced', 'message_dropped',
                     'job_done', 'job_failed', 'replayed')),
    job_id       uuid,
    step_run_id  uuid,
    worker       text,
    attempt      integer,
    detail       jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX engine_events_job ON engine_events (job_id, id);
CREATE INDEX engine_events_step_run ON engine_events (step_run_id, id);

CREATE FUNCTION engine_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'engine_events is append-only (% refused)', TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER engine_events_no_update_delete
    BEFORE UPDATE OR DELETE ON engine_events
    FOR EACH ROW EXECUTE FUNCTION engine_events_append_only();
CREATE TRIGGER engine_events_no_truncate
    BEFORE TRUNCATE ON engine_events
    FOR EACH STATEMENT EXECUTE FUNCTION engine_events_append_only();

-- Step runs past their attempt cap and messages that could not be handled.
CREATE TABLE engine_dead_letters (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source        text        NOT NULL CHECK (source IN ('step', 'message')),
    job_id        uuid        REFERENCES engine_jobs (id),
    step_run_id   uuid        REFERENCES engine_step_runs (id),
    message_body  text,
    reason        text        NOT NULL,
    error         jsonb,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    replayed_at   timestamptz,
    CHECK (source <> 'step' OR step_run_id IS NOT NULL),
    CHECK (source <> 'message' OR message_body IS NOT NULL)
);
-- A step run is dead-lettered once until it is replayed.
CREATE UNIQUE INDEX engine_dead_letters_open_step
    ON engine_dead_letters (step_run_id) WHERE source = 'step' AND replayed_at IS NULL;

-- The PostgreSQL transport's queue: the same at-least-once contract as SQS
-- (a received message is hidden until visible_at, then comes back).
CREATE TABLE engine_queue (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    body           text        NOT NULL,
    visible_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    receive_count  integer     NOT NULL DEFAULT 0 CHECK (receive_count >= 0),
    receipt        uuid,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX engine_queue_visible ON engine_queue (visible_at, id);
