-- The console's sessions (issue 34), kept on the server so that they can end.
--
-- A person's cookie carries a random session id (256 bits); this table holds
-- only its SHA-256, so reading the table (a backup, a replica) signs nobody
-- in. Every request finds its row by that hash and is refused when the row
-- is gone or has ended:
--   - sign-out deletes the row: a cookie copied before it is refused after;
--   - a password change, a role change or the user's removal deletes the
--     user's rows (engine.console.users), and each request also checks that
--     the user still has the role the session was made with and (signed in
--     with a password) has not changed it since the session began;
--   - idle past ENGINE_CONSOLE_SESSION_IDLE_MINUTES (last_seen_at), past its
--     absolute expiry (expires_at, ENGINE_CONSOLE_SESSION_HOURS from sign-in)
--     or, made from the load balancer's token, past that token's expiry
--     (token_expires_at): the database clock decides.
-- Ended rows are deleted at the next sign-in (a cheap, bounded sweep).
-- No foreign key to engine_console_users: a person the load balancer signed
-- in may have no user row (ENGINE_CONSOLE_OIDC_ROLE).
-- The worker role has no business here: nothing is granted to it.
CREATE TABLE engine_console_sessions (
    id_hash             text        PRIMARY KEY CHECK (id_hash ~ '^[0-9a-f]{64}$'),
    user_name           text        NOT NULL,
    role                text        NOT NULL
                        CHECK (role IN ('viewer', 'operator', 'accountant', 'admin')),
    via                 text        NOT NULL CHECK (via IN ('password', 'oidc')),
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at          timestamptz NOT NULL,
    token_expires_at    timestamptz,
    CHECK ((via = 'oidc') = (token_expires_at IS NOT NULL))
);
CREATE INDEX engine_console_sessions_user ON engine_console_sessions (user_name);

REVOKE ALL ON engine_console_sessions FROM engine_worker;
