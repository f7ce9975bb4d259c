-- The worker's least-privilege role (../shared/RELIABILITY.md: "the worker
-- connects with a least-privilege role; migrations use the owner role").
-- `engine worker` takes it on every connection (ENGINE_WORKER_ROLE, libpq
-- -c role=); in production the worker's URL logs in as a member of it. It owns
-- nothing, so it can neither alter nor drop a table; it may create none but
-- temporary ones; it reads and writes what the worker's statements touch and
-- nothing else. The flows' own migrations grant it their tables.

-- Roles are cluster-wide, grants are per database: every database of a cluster
-- (the copies tests make of a template, migrated at the same moment) runs
-- this. An earlier run left duplicate_object; the loser of a race between two
-- sessions creating it at once gets unique_violation.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'engine_worker') THEN
        CREATE ROLE engine_worker NOLOGIN;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
        NULL;
    WHEN insufficient_privilege THEN
        RAISE EXCEPTION 'role engine_worker does not exist and % may not create it', current_user
            USING HINT = 'a superuser runs CREATE ROLE engine_worker NOLOGIN, then engine migrate again';
END
$$;

-- The PostgreSQL 15 default, restated for clusters upgraded from older ones,
-- where every role (the worker's too) may create tables in public.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

REVOKE ALL ON engine_jobs, engine_step_runs, engine_outbox, engine_events,
              engine_dead_letters, engine_queue, engine_migrations
    FROM engine_worker;

-- Jobs are submitted by the ERP (its own role) and retried by an operator;
-- the worker starts, locks (FOR UPDATE needs UPDATE) and ends them. Flow,
-- parameters and fingerprint are never the worker's to change.
GRANT SELECT ON engine_jobs TO engine_worker;
GRANT UPDATE (status, started_at, finished_at, error) ON engine_jobs TO engine_worker;

-- Claims, leases, checkpoints, retries, dead letters and the step runs a
-- checkpoint makes ready. The attempt cap (max_attempts) is the operator's
-- (engine retry); which job, step and item a step run is, nobody changes.
GRANT SELECT, INSERT ON engine_step_runs TO engine_worker;
GRANT UPDATE (status, attempts, available_at, lease_owner, lease_token, lease_expires_at,
              claimed_at, started_at, finished_at, output, error)
    ON engine_step_runs TO engine_worker;

-- The relay marks what it published; rows are kept (the sweeper reads them).
GRANT SELECT, INSERT ON engine_outbox TO engine_worker;
GRANT UPDATE (published_at) ON engine_outbox TO engine_worker;

-- History and dead letters are append-only for the worker (closing a dead
-- letter is `engine dlq replay`, purging it `engine dlq purge`).
GRANT SELECT, INSERT ON engine_events TO engine_worker;
GRANT SELECT, INSERT ON engine_dead_letters TO engine_worker;

-- The PostgreSQL transport: send, receive (visibility, receipt), delete what
-- was handled. The only DELETE the worker has.
GRANT SELECT, INSERT, DELETE ON engine_queue TO engine_worker;
GRANT UPDATE (visible_at, receive_count, receipt) ON engine_queue TO engine_worker;

-- engine_migrations: nothing. Identity columns take their values without a
-- grant on their sequences.

-- Tables the migrating role creates from now on (a new flow's migration, the
-- simulator's and the tests' effect tables) can be read and appended to by the
-- worker; UPDATE and DELETE are only ever granted by name, as above. A flow's
-- migration states its tables' grants in full (REVOKE ALL, then GRANT), so the
-- outcome does not depend on the order its file and this one were applied in.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT ON TABLES TO engine_worker;
