-- Bulk actions on a frozen preview (issue 38, item 2): `engine retry|cancel|dlq replay|dlq purge
-- FILTER --dry-run` writes what the filter found now, and `--apply PREVIEW` acts on exactly
-- that set, each item re-checked under its lock against the state it was previewed in.
--
-- One row per preview. `items` is the frozen set: a JSON array of [id, state, version, flow]
-- (a job's id, its stored status and finished_at; a dead letter's id, open or replayed, and
-- its job's status), `counts` the same set by flow and state as the dry run printed them.
-- An apply records each item's outcome (engine_bulk_preview_outcomes) in the transaction that
-- acts on it, so an apply that stops half way (a crash, an outage) is finished by running it
-- again: it acts on the items with no outcome yet, never twice on one. The preview is applied
-- (applied_at) once every item has an outcome; an apply begins before expires_at (database
-- clock), and one begun may be finished after it (each item is re-checked all the same).
CREATE TABLE engine_bulk_previews (
    id          uuid        PRIMARY KEY,
    action      text        NOT NULL CHECK (action IN ('retry', 'cancel', 'replay', 'purge')),
    filter      jsonb       NOT NULL,
    items       jsonb       NOT NULL CHECK (jsonb_typeof(items) = 'array'),
    counts      jsonb       NOT NULL,
    total       integer     NOT NULL CHECK (total >= 0),
    created_by  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at  timestamptz NOT NULL,
    applied_at  timestamptz,
    applied_by  text,
    CHECK (expires_at > created_at),
    CHECK ((applied_at IS NULL) = (applied_by IS NULL))
);
CREATE INDEX engine_bulk_previews_created ON engine_bulk_previews (created_at DESC);

-- One row per item acted on, skipped (changed since the preview) or refused (the single
-- action's rule), written with the action; an item locked by someone else gets none (a
-- re-run tries it again). Never updated: the primary key is what makes an item acted on once.
CREATE TABLE engine_bulk_preview_outcomes (
    preview_id  uuid        NOT NULL REFERENCES engine_bulk_previews (id) ON DELETE CASCADE,
    item        text        NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('done', 'skipped', 'refused')),
    why         text,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (preview_id, item),
    CHECK ((outcome = 'done') = (why IS NULL))
);

-- the console previews and applies as its own role (0026)
GRANT SELECT, INSERT ON engine_bulk_previews TO engine_console;
GRANT UPDATE (applied_at, applied_by) ON engine_bulk_previews TO engine_console;
GRANT SELECT, INSERT ON engine_bulk_preview_outcomes TO engine_console;

-- A replay closes its job's open step dead letters (dead_letter_mark_replayed_by_job): by this
-- index, not a scan of every dead letter, so replaying 10,000 of them is not quadratic.
CREATE INDEX engine_dead_letters_open_by_job
    ON engine_dead_letters (job_id) WHERE source = 'step' AND replayed_at IS NULL;
