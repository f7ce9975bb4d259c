-- server_ping --
-- One round trip that needs no table: a worker probing an outage asks only "does the server answer".
SELECT 1;

-- database_select_exists --
-- The embedded server's database is created on first use; looked up first, so an existing one is never touched.
SELECT 1 FROM pg_database WHERE datname = %(name)s;

-- database_create --
-- The name is an identifier composed with psycopg.sql (CREATE DATABASE takes no parameters); two processes racing to create it both succeed (DuplicateDatabase is ignored).
CREATE DATABASE {name};

-- clock_select --
-- Durable sleep compares with the database clock, never a worker's (invariant 3).
SELECT clock_timestamp() AS now;
