-- The audit trail is tamper-evident and written by the right roles (issue 34).
--
-- 1. A hash chain. Each entry gets a gapless position `seq`, the hash of the
--    entry before it (`prev_hash`; 64 zeros for the first) and its own `hash`:
--    sha256(prev_hash || engine_audit_canonical(entry)), hex. The canonical
--    text is a JSON array of every column but the hashes, in a fixed order,
--    rendered by PostgreSQL whatever the session's settings: the time as UTC
--    microseconds (to_char, never the session's TimeZone or DateStyle), the
--    detail as jsonb's own text form (keys sorted, whitespace normalised),
--    strings JSON-escaped (no two entries render alike). `engine audit verify`
--    (engine.jobs.audit.verify_chain) reads the same canonical text and
--    recomputes each hash in Python, so a changed entry, a missing `seq` (a
--    deleted entry), a broken link (reordered entries) or an entry the chain
--    never saw (written with the trigger disabled) is named by its position.
--    `engine_audit_head` holds the last position and hash: a deleted LAST
--    entry shows as a head beyond the table.
--
--    The chain is computed in the database, by a constraint trigger DEFERRED
--    to commit, so every writer (CLI, console, worker, a flow) chains the same
--    way and none can skip it. At commit it locks the head row, so concurrent
--    writers serialise on it and the chain stays linear. Deferred on purpose:
--    the head is then the LAST lock any transaction takes, held only for its
--    commit, so it cannot deadlock with the action's own locks (a step's
--    checkpoint after record_action, a cancel locking the job); a BEFORE
--    INSERT trigger would take it mid-transaction and hold it while the
--    action takes more locks. The chain's UPDATE of the new row (its seq and
--    hashes, once) is the one update the append-only trigger lets through.
--
--    Limit: the table's owner can still rewrite the whole chain consistently
--    (recompute every hash and the head). Only a head hash kept outside the
--    database catches that: `engine audit verify` prints the head hash for the
--    operator to keep and checks a kept one with `--expect-head HASH`.
--
-- 2. The console's role. `engine console` takes ENGINE_CONSOLE_ROLE (default
--    engine_console) on every connection, as `engine worker` takes
--    engine_worker (0006): it reads what the console shows and writes only
--    what its actions write (cancel, retry, replay, purge, signal, a
--    schedule's pause, resume and run now, sign-in counters, audit entries);
--    it owns nothing, so it cannot disable a trigger or delete an entry. The
--    flows grant it their own tables for their pages (flows/migrations).
--
-- 3. Who may write what. A BEFORE INSERT trigger checks the writing role
--    (current_user, not the function's owner): the console's role writes only
--    source 'console'; the worker's role writes only source 'api', for a job
--    that has not ended, in the name of that job's submitter or of the job
--    itself ('job <id>'): a step records an action on behalf of whoever
--    submitted its job, never in anyone else's name. And since the worker may
--    insert jobs (a schedule's fire, a step's child), a job it inserts names
--    as its submitter its parent ('job <parent id>') or an existing schedule
--    ('schedule <name>'), never a person, so it cannot make up a submitter to
--    write entries in that name. The owner (migrations, the CLI) and
--    superusers are not restricted (their entries are chained all the same).

-- Roles are cluster-wide (see 0006 for why each case is handled).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'engine_console') THEN
        CREATE ROLE engine_console NOLOGIN;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
        NULL;
    WHEN insufficient_privilege THEN
        RAISE EXCEPTION 'role engine_console does not exist and % may not create it', current_user
            USING HINT = 'a superuser runs CREATE ROLE engine_console NOLOGIN, then engine migrate again';
END
$$;

ALTER TABLE engine_audit
    ADD COLUMN seq       bigint,
    ADD COLUMN prev_hash text CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
    ADD COLUMN hash      text CHECK (hash ~ '^[0-9a-f]{64}$');
CREATE UNIQUE INDEX engine_audit_seq ON engine_audit (seq);

CREATE TABLE engine_audit_head (
    one      boolean     PRIMARY KEY DEFAULT true CHECK (one),
    seq      bigint      NOT NULL CHECK (seq >= 0),
    hash     text        NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    last_id  bigint,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO engine_audit_head (seq, hash) VALUES (0, repeat('0', 64));

-- What the hash covers, rendered the same in every session (see above).
CREATE FUNCTION engine_audit_canonical(e engine_audit) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT json_build_array(
        e.seq, e.id,
        to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        e.actor, e.source, e.action, e.target_kind, e.target_id, e.job_id::text, e.reason,
        e.detail)::text
$$;

CREATE FUNCTION engine_audit_chain() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    head  engine_audit_head;
    entry engine_audit;
BEGIN
    -- the head's row lock serialises the committers; READ COMMITTED re-reads it after the wait
    SELECT * INTO head FROM engine_audit_head WHERE one FOR UPDATE;
    entry := NEW;
    entry.seq := head.seq + 1;
    entry.prev_hash := head.hash;
    entry.hash := encode(sha256(convert_to(entry.prev_hash || engine_audit_canonical(entry),
                                           'UTF8')), 'hex');
    UPDATE engine_audit SET seq = entry.seq, prev_hash = entry.prev_hash, hash = entry.hash
    WHERE id = NEW.id;
    UPDATE engine_audit_head
    SET seq = entry.seq, hash = entry.hash, last_id = NEW.id, at = clock_timestamp()
    WHERE one;
    RETURN NULL;
END
$$;

-- Existing entries join the chain in id order (the only order they had).
ALTER TABLE engine_audit DISABLE TRIGGER engine_audit_no_update_delete;
DO $$
DECLARE
    entry engine_audit;
    prev  text := repeat('0', 64);
    n     bigint := 0;
BEGIN
    FOR entry IN SELECT * FROM engine_audit ORDER BY id LOOP
        n := n + 1;
        entry.seq := n;
        entry.prev_hash := prev;
        entry.hash := encode(sha256(convert_to(prev || engine_audit_canonical(entry), 'UTF8')),
                             'hex');
        UPDATE engine_audit SET seq = entry.seq, prev_hash = entry.prev_hash, hash = entry.hash
        WHERE id = entry.id;
        UPDATE engine_audit_head SET seq = n, hash = entry.hash, last_id = entry.id WHERE one;
        prev := entry.hash;
    END LOOP;
END
$$;
ALTER TABLE engine_audit ENABLE TRIGGER engine_audit_no_update_delete;

CREATE CONSTRAINT TRIGGER engine_audit_chain
    AFTER INSERT ON engine_audit DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION engine_audit_chain();

-- Append-only, but for the chain's one update of a new entry: its position
-- and hashes, set once, nothing else changed.
CREATE OR REPLACE FUNCTION engine_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.seq IS NULL AND OLD.hash IS NULL AND NEW.seq IS NOT NULL
       AND (NEW.id, NEW.at, NEW.actor, NEW.source, NEW.action, NEW.target_kind,
            NEW.target_id, NEW.job_id, NEW.reason, NEW.detail)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.at, OLD.actor, OLD.source, OLD.action, OLD.target_kind,
            OLD.target_id, OLD.job_id, OLD.reason, OLD.detail) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'engine_audit is append-only (% refused)', TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;

-- Whether the session's role acts with `role`'s privileges and is not the
-- tables' owner (nor a superuser, who has every role's).
CREATE FUNCTION engine_acts_as(role name) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT pg_has_role(current_user, role, 'USAGE')
       AND NOT pg_has_role(current_user,
                           (SELECT relowner FROM pg_class WHERE oid = 'engine_audit'::regclass),
                           'USAGE')
$$;

-- SECURITY INVOKER: current_user is the writer.
CREATE FUNCTION engine_audit_writer_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    job engine_jobs;
BEGIN
    -- only the chain sets these (at commit)
    NEW.seq := NULL;
    NEW.prev_hash := NULL;
    NEW.hash := NULL;
    IF engine_acts_as('engine_console') AND NEW.source <> 'console' THEN
        RAISE EXCEPTION 'role % writes audit entries with source console only, not %',
            current_user, NEW.source USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF engine_acts_as('engine_worker') THEN
        IF NEW.source <> 'api' THEN
            RAISE EXCEPTION 'role % writes audit entries with source api only, not %',
                current_user, NEW.source USING ERRCODE = 'insufficient_privilege';
        END IF;
        SELECT * INTO job FROM engine_jobs WHERE id = NEW.job_id;
        IF NOT FOUND OR job.status NOT IN ('pending', 'running', 'waiting') THEN
            RAISE EXCEPTION 'role % writes audit entries only for a job it runs (job %)',
                current_user, coalesce(NEW.job_id::text, 'none')
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.actor IS DISTINCT FROM job.submitted_by AND NEW.actor <> 'job ' || job.id THEN
            RAISE EXCEPTION 'role % may not write an audit entry as %: only as the submitter of job % (%) or as job %',
                current_user, NEW.actor, job.id, coalesce(job.submitted_by, 'none'), job.id
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER engine_audit_writer
    BEFORE INSERT ON engine_audit
    FOR EACH ROW EXECUTE FUNCTION engine_audit_writer_check();

-- A job the worker inserts is a step's child or a schedule's fire; its
-- submitter says so (engine/waits/children.py, engine/schedules/firer.py).
CREATE FUNCTION engine_jobs_worker_submitter_check() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF engine_acts_as('engine_worker')
       AND NOT coalesce(NEW.submitted_by = 'job ' || NEW.parent_job_id, false)
       AND NOT EXISTS (SELECT 1 FROM engine_schedules
                       WHERE NEW.submitted_by = 'schedule ' || name) THEN
        RAISE EXCEPTION 'role % may not submit a job as %: only as its parent job or a schedule',
            current_user, coalesce(NEW.submitted_by, 'nobody')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER engine_jobs_worker_submitter
    BEFORE INSERT ON engine_jobs
    FOR EACH ROW EXECUTE FUNCTION engine_jobs_worker_submitter_check();

-- The worker: as 0019 (read, append), the head readable for `verify` only.
REVOKE ALL ON engine_audit_head FROM engine_worker, engine_console;
GRANT SELECT ON engine_audit_head TO engine_worker;

-- The console: what its pages read and its actions write, nothing else.
REVOKE ALL ON engine_jobs, engine_step_runs, engine_outbox, engine_events, engine_dead_letters,
              engine_queue, engine_migrations, engine_alerts, engine_alert_deliveries,
              engine_schedules, engine_schedule_fires, engine_signals, engine_workers,
              engine_audit, engine_job_tags, engine_console_users
    FROM engine_console;
GRANT SELECT ON engine_jobs, engine_step_runs, engine_outbox, engine_events, engine_dead_letters,
                engine_schedules, engine_schedule_fires, engine_signals, engine_workers,
                engine_audit, engine_audit_head, engine_job_tags, engine_console_users
    TO engine_console;
-- cancel, retry (job_reopen_*, FOR UPDATE needs UPDATE); a schedule's run now submits a job
GRANT UPDATE (status, finished_at, error) ON engine_jobs TO engine_console;
GRANT INSERT (id, flow, flow_version, params, fingerprint, submitted_by, parent_job_id,
              parent_step_run_id, child_key, signals)
    ON engine_jobs TO engine_console;
-- cancel, retry, replay, a signal's wake; a submitted job's first step runs
GRANT INSERT ON engine_step_runs TO engine_console;
GRANT UPDATE (status, available_at, finished_at, lease_owner, lease_token, lease_expires_at,
              max_attempts, wait_signal, wait_until, wait_children, wait_past, wait_summary,
              concurrency_kept)
    ON engine_step_runs TO engine_console;
-- history, announcements (the outbox or the PostgreSQL queue), signals: appended
GRANT INSERT ON engine_events, engine_outbox, engine_queue, engine_signals TO engine_console;
GRANT SELECT (id) ON engine_queue TO engine_console;  -- a send's RETURNING id; no body read
-- an action's announcements leave after its commit: the outbox rows are marked published
GRANT UPDATE (published_at) ON engine_outbox TO engine_console;
GRANT INSERT ON engine_audit TO engine_console;
-- replay closes a dead letter; purge deletes the closed ones
GRANT UPDATE (replayed_at), DELETE ON engine_dead_letters TO engine_console;
GRANT UPDATE (paused_at, paused_by, paused_reason, next_fire_at) ON engine_schedules
    TO engine_console;
GRANT INSERT ON engine_schedule_fires TO engine_console;
GRANT UPDATE (job_id, error, outcome) ON engine_schedule_fires TO engine_console;
-- sign-in counters; users are added and removed by `engine users` (the owner)
GRANT UPDATE (failed_signins, locked_until, last_signin_at) ON engine_console_users
    TO engine_console;
-- its sessions (0024): made at sign-in, touched on each request, ended at sign-out
REVOKE ALL ON engine_console_sessions FROM engine_console;
GRANT SELECT, INSERT, DELETE ON engine_console_sessions TO engine_console;
GRANT UPDATE (last_seen_at, token_expires_at) ON engine_console_sessions TO engine_console;
-- its sign-in lockouts per user and address (0025); it never writes a password hash
REVOKE ALL ON engine_console_signin_failures FROM engine_console;
GRANT SELECT, INSERT, UPDATE, DELETE ON engine_console_signin_failures TO engine_console;
