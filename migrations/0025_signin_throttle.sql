-- Failed sign-ins counted per user AND address (issue 34). Counted per user
-- alone, five wrong passwords from anyone locked a known user (the admin
-- too) out from everywhere for 15 minutes, and the lock's own answer told
-- which names exist. Now ENGINE_CONSOLE_SIGNIN_FAILURES wrong passwords
-- within ENGINE_CONSOLE_SIGNIN_LOCK_S lock that user from that address only,
-- for ENGINE_CONSOLE_SIGNIN_LOCK_S; the real user signs in from theirs. A
-- good sign-in from an address forgets its failures; a new password forgets
-- them all; a removed user's go with them. The address is the console's
-- (engine/console/throttle.py: the socket peer's, or the client's behind a
-- trusted proxy; an IPv6 address as its /64). Unknown names are not counted:
-- they are answered as a wrong password is, and flooding with them is the
-- throttle's (in memory, before any hash), not this table's.
-- The worker role has no business here: nothing is granted to it.
CREATE TABLE engine_console_signin_failures (
    name           text        NOT NULL
                   REFERENCES engine_console_users (name) ON DELETE CASCADE,
    address        text        NOT NULL CHECK (length(address) BETWEEN 1 AND 100),
    failures       integer     NOT NULL CHECK (failures > 0),
    last_failed_at timestamptz NOT NULL,
    locked_until   timestamptz,
    PRIMARY KEY (name, address)
);

REVOKE ALL ON engine_console_signin_failures FROM engine_worker;

-- engine_console_users.failed_signins and .locked_until, the per-user count
-- and lock this replaces, are no longer read or written; they are kept (not
-- dropped here) so that grants other migrations name on them still apply.
