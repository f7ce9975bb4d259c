-- Alerts: one per dead letter, recorded in the transaction that made the dead
-- letter, with one delivery row per sink. Any worker's dispatcher delivers
-- them; a delivery is claimed with a lease like a step run, so of several
-- dispatchers exactly one sends it, a sink that was down is retried with
-- backoff, and a delivered alert is never sent again.

-- A message dead letter keeps its message id, once: a message recorded but not
-- yet deleted from its queue (a crash in between, an SQS duplicate) comes
-- back and is not recorded, nor alerted, a second time.
ALTER TABLE engine_dead_letters ADD COLUMN message_id text;
CREATE UNIQUE INDEX engine_dead_letters_open_message
    ON engine_dead_letters (message_id)
    WHERE source = 'message' AND message_id IS NOT NULL AND replayed_at IS NULL;

CREATE TABLE engine_alerts (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- one alert per dead letter; a purged dead letter keeps its alert's history
    dead_letter_id  bigint      UNIQUE REFERENCES engine_dead_letters (id) ON DELETE SET NULL,
    source          text        NOT NULL CHECK (source IN ('step', 'message')),
    job_id          uuid,
    step_run_id     uuid,
    flow            text,
    step            text,
    attempts        integer,
    -- the last error's first line (never a document's contents: the error
    -- record is the exception's message, capped)
    error_line      text        NOT NULL,
    reason          text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX engine_alerts_job ON engine_alerts (job_id);

CREATE TABLE engine_alert_deliveries (
    alert_id        bigint      NOT NULL REFERENCES engine_alerts (id) ON DELETE CASCADE,
    sink            text        NOT NULL CHECK (sink ~ '^[a-z][a-z0-9_-]*$'),
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'sending', 'delivered', 'abandoned')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- the dispatcher sending it, until when; a token fences its outcome
    claimed_by      text,
    claim_token     uuid,
    claimed_until   timestamptz,
    last_error      text,
    delivered_at    timestamptz,
    PRIMARY KEY (alert_id, sink),
    CHECK (status <> 'sending' OR (claim_token IS NOT NULL AND claimed_until IS NOT NULL)),
    CHECK (status <> 'delivered' OR delivered_at IS NOT NULL)
);
-- what a dispatcher looks for: due deliveries and lapsed claims
CREATE INDEX engine_alert_deliveries_due
    ON engine_alert_deliveries (next_attempt_at) WHERE status IN ('pending', 'sending');

-- The worker records alerts with its dead letters and delivers them; it
-- changes nothing of an alert but its deliveries' state.
REVOKE ALL ON engine_alerts, engine_alert_deliveries FROM engine_worker;
GRANT SELECT, INSERT ON engine_alerts TO engine_worker;
GRANT SELECT, INSERT ON engine_alert_deliveries TO engine_worker;
GRANT UPDATE (status, attempts, next_attempt_at, claimed_by, claim_token, claimed_until,
              last_error, delivered_at)
    ON engine_alert_deliveries TO engine_worker;
