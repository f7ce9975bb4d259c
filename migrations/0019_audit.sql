-- The audit trail of operator actions (issue 28; DESIGN.md invariant 19).
--
-- One row per action a person took: cancel, retry, replay, purge, signal, a
-- schedule's add or remove, and the ERP's close and reopen of a period (a
-- flow records its own through engine.record_action). Who (`--by`, else
-- user@host), when (the database clock), from where (the CLI now, the
-- console later), what, on what, why. The row is written in the same
-- transaction as the action: an action that is refused or fails rolls back
-- and leaves no row, so every row is an action that happened.
--
-- Append-only for everyone: the worker may read and append (a step may
-- record an action it takes for its submitter), never change or delete; the
-- owner (the migrating role) is refused by the trigger.
CREATE TABLE engine_audit (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor        text        NOT NULL CHECK (actor <> ''),
    source       text        NOT NULL CHECK (source IN ('cli', 'console', 'api')),
    -- open vocabularies (a flow adds its own: close, reopen; period): a word each
    action       text        NOT NULL CHECK (action ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    target_kind  text        NOT NULL CHECK (target_kind ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    target_id    text,       -- NULL: the action has no single target (a purge)
    job_id       uuid,       -- the job the action concerns, if any (no FK: the trail outlives it)
    reason       text,
    detail       jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX engine_audit_job ON engine_audit (job_id, id) WHERE job_id IS NOT NULL;
CREATE INDEX engine_audit_target ON engine_audit (target_kind, target_id, id);

CREATE FUNCTION engine_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'engine_audit is append-only (% refused)', TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER engine_audit_no_update_delete
    BEFORE UPDATE OR DELETE ON engine_audit
    FOR EACH ROW EXECUTE FUNCTION engine_audit_append_only();
CREATE TRIGGER engine_audit_no_truncate
    BEFORE TRUNCATE ON engine_audit
    FOR EACH STATEMENT EXECUTE FUNCTION engine_audit_append_only();

-- Stated in full (the default privileges of 0006 grant the same), so that
-- the outcome does not depend on the order of migrations.
REVOKE ALL ON engine_audit FROM engine_worker;
GRANT SELECT, INSERT ON engine_audit TO engine_worker;
