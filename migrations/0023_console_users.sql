-- The console's people (issue 28): who may sign in to `engine console`, and
-- with which role.
--
-- A local user has an argon2 hash of a password (`engine users add NAME
-- --role ROLE`, the password read from standard input); a user who signs in
-- through the load balancer's OIDC (AWS ALB) has no hash and is matched by
-- name (the token's email). Roles are cumulative: viewer reads; operator
-- also cancels, retries, replays dead letters and pauses, resumes or runs a
-- schedule; accountant also approves or rejects a waiting posting or close
-- and closes or reopens a period; admin may do everything.
--
-- Failed sign-ins are counted per user (and reset by a good one): past the
-- limit the user is locked for a while, whichever console process answers.
-- Changes of users are audited in engine_audit like every other action.
-- The worker role has no business here: nothing is granted to it.
CREATE TABLE engine_console_users (
    name                text        PRIMARY KEY
                        CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$'),
    role                text        NOT NULL
                        CHECK (role IN ('viewer', 'operator', 'accountant', 'admin')),
    password_hash       text        CHECK (password_hash IS NULL OR password_hash LIKE '$argon2%'),
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    password_changed_at timestamptz,
    failed_signins      integer     NOT NULL DEFAULT 0 CHECK (failed_signins >= 0),
    locked_until        timestamptz,
    last_signin_at      timestamptz
);

REVOKE ALL ON engine_console_users FROM engine_worker;
