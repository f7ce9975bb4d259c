-- console_user_insert --
-- One row per name (the primary key): adding a name twice inserts nothing and returns no row.
INSERT INTO engine_console_users (name, role, password_hash, password_changed_at)
VALUES (%(name)s, %(role)s, %(password_hash)s,
        CASE WHEN %(password_hash)s::text IS NULL THEN NULL ELSE clock_timestamp() END)
ON CONFLICT (name) DO NOTHING
RETURNING name, role, password_hash IS NOT NULL AS has_password, created_at;

-- console_user_select --
-- Read-only; the hash is read only to verify a password, never shown.
SELECT name, role, password_hash, password_changed_at, failed_signins, locked_until,
       locked_until IS NOT NULL AND locked_until > clock_timestamp() AS locked,
       clock_timestamp() AS now
FROM engine_console_users
WHERE name = %(name)s;

-- console_user_select_all --
-- Read-only, by name; no hash leaves this statement, only whether there is one.
SELECT name, role, password_hash IS NOT NULL AS has_password, created_at,
       password_changed_at, last_signin_at,
       locked_until IS NOT NULL AND locked_until > clock_timestamp() AS locked
FROM engine_console_users
ORDER BY name;

-- console_user_delete --
-- Deletes one user; returns its name when there was one.
DELETE FROM engine_console_users WHERE name = %(name)s RETURNING name;

-- console_user_update_password --
-- A new hash clears the failed-sign-in count and any lock.
UPDATE engine_console_users
SET password_hash = %(password_hash)s, password_changed_at = clock_timestamp(),
    failed_signins = 0, locked_until = NULL
WHERE name = %(name)s
RETURNING name;

-- console_user_update_role --
-- Changes one user's role; returns its name when there was one.
UPDATE engine_console_users SET role = %(role)s WHERE name = %(name)s RETURNING name;

-- console_user_signin_failed --
-- Counted on the database so that every console process sees the same count; the lock starts at the limit-th failure and lasts lock_s from now (the database clock).
UPDATE engine_console_users
SET failed_signins = failed_signins + 1,
    locked_until = CASE WHEN failed_signins + 1 >= %(limit)s
                        THEN clock_timestamp() + make_interval(secs => %(lock_s)s)
                        ELSE locked_until END
WHERE name = %(name)s
RETURNING failed_signins, locked_until;

-- console_user_signin_ok --
-- A good sign-in resets the count and the lock.
UPDATE engine_console_users
SET failed_signins = 0, locked_until = NULL, last_signin_at = clock_timestamp()
WHERE name = %(name)s;
