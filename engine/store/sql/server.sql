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

-- lock_select_holders --
-- Read only to name, in an operator's "busy" message, the other sessions holding rows of a table (locked or written) oldest transaction first; never used to decide anything, and no query text (it may quote values).
SELECT a.pid, coalesce(nullif(a.application_name, ''), '-') AS application,
       coalesce(host(a.client_addr), 'local') AS client, a.state,
       round(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric, 1)::float AS xact_s
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.relation = to_regclass(%(table)s) AND l.granted
  AND l.mode IN ('RowShareLock', 'RowExclusiveLock') AND l.pid <> pg_backend_pid()
ORDER BY a.xact_start NULLS LAST
LIMIT 3;

-- server_select_address --
-- Where the server saw this connection arrive (NULL address: a local socket) and the port it listens on; compared with where the client dialed, a difference means something sits between them (a pooler, a proxy).
SELECT host(inet_server_addr()) AS addr, inet_server_port() AS port, current_setting('port')::int AS listen_port;

-- session_set_local --
-- Behind a transaction pooler the session's settings (bounds, role) cannot travel in the startup packet: each transaction sets them for itself (SET LOCAL), on whichever server session it runs.
SELECT set_config(s.name, s.value, true) FROM unnest(%(names)s::text[], %(values)s::text[]) AS s(name, value);
