-- console_signin_locked --
-- Read-only: whether this user is locked from this address now; a lock from another address never counts.
SELECT EXISTS (
    SELECT FROM engine_console_signin_failures
    WHERE name = %(name)s AND address = %(address)s AND locked_until > clock_timestamp()
) AS locked;

-- console_signin_failed --
-- One more wrong password for a known user from an address (an unknown name inserts nothing); the pair is locked at the limit-th failure within lock_s, a lock is never extended while it holds, and this user's stale rows (no failure and no lock for lock_s) are deleted.
WITH stale AS (
    DELETE FROM engine_console_signin_failures
    WHERE name = %(name)s AND address <> %(address)s
      AND last_failed_at < clock_timestamp() - make_interval(secs => %(lock_s)s)
      AND (locked_until IS NULL OR locked_until <= clock_timestamp())
)
INSERT INTO engine_console_signin_failures AS f
       (name, address, failures, last_failed_at, locked_until)
SELECT u.name, %(address)s, 1, clock_timestamp(),
       CASE WHEN %(limit)s <= 1 THEN clock_timestamp() + make_interval(secs => %(lock_s)s) END
FROM engine_console_users u
WHERE u.name = %(name)s
ON CONFLICT (name, address) DO UPDATE
SET failures = CASE WHEN f.last_failed_at < clock_timestamp() - make_interval(secs => %(lock_s)s)
                    THEN 1 ELSE f.failures + 1 END,
    last_failed_at = clock_timestamp(),
    locked_until = CASE WHEN (CASE WHEN f.last_failed_at
                                        < clock_timestamp() - make_interval(secs => %(lock_s)s)
                                   THEN 1 ELSE f.failures + 1 END) >= %(limit)s
                        THEN clock_timestamp() + make_interval(secs => %(lock_s)s) END
WHERE f.locked_until IS NULL OR f.locked_until <= clock_timestamp()
RETURNING failures, locked_until;

-- console_signin_succeeded --
-- A good sign-in from an address forgets that address's failures for the user, and the user's stale ones; a lock from another address stays.
DELETE FROM engine_console_signin_failures
WHERE name = %(name)s
  AND (address = %(address)s
       OR (last_failed_at < clock_timestamp() - make_interval(secs => %(lock_s)s)
           AND (locked_until IS NULL OR locked_until <= clock_timestamp())));
