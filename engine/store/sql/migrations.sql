-- migration_lock --
-- Serialises migrators: two processes migrating at once apply each file once.
SELECT pg_advisory_lock(hashtextextended('engine.migrations', 0));

-- migration_unlock --
-- Releases the session lock taken by migration_lock.
SELECT pg_advisory_unlock(hashtextextended('engine.migrations', 0));

-- migration_table_create --
-- The record of applied migrations; version is the file's number, unique.
CREATE TABLE IF NOT EXISTS engine_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- migration_select_all --
-- What has been applied, with the checksum of the file as it was then.
SELECT version, name, checksum, applied_at FROM engine_migrations ORDER BY version;

-- migration_insert --
-- Recorded in the same transaction as the migration itself.
INSERT INTO engine_migrations (version, name, checksum) VALUES (%(version)s, %(name)s, %(checksum)s);

-- migration_table_exists --
-- Whether any migration was ever applied here (the table is created by the first `engine migrate`); asked by health checks, which never create it.
SELECT to_regclass('engine_migrations') IS NOT NULL AS present;
