-- console_user_insert --
-- One row per name (the primary key): adding a name twice inserts nothing and returns no row.
INSERT INTO engine_console_users (name, role, password_hash, password_changed_at)
VALUES (%(name)s, %(role)s, %(password_hash)s,
        CASE WHEN %(password_hash)s::text IS NULL THEN NULL ELSE clock_timestamp() END)
ON CONFLICT (name) DO NOTHING
RETURNING name, role, password_hash IS NOT NULL AS has_password, created_at;

-- console_user_select --
-- Read-only; the hash is read only to verify a password, never shown.
SELECT name, role, password_hash, password_changed_at, clock_timestamp() AS now
FROM engine_console_users
WHERE name = %(name)s;

-- console_user_select_all --
-- Read-only, by name; no hash leaves this statement, only whether there is one; locked: from some address now.
SELECT u.name, u.role, u.password_hash IS NOT NULL AS has_password, u.created_at,
       u.password_changed_at, u.last_signin_at,
       EXISTS (SELECT FROM engine_console_signin_failures f
               WHERE f.name = u.name AND f.locked_until > clock_timestamp()) AS locked
FROM engine_console_users u
ORDER BY u.name;

-- console_user_delete --
-- Deletes one user; returns its name when there was one.
DELETE FROM engine_console_users WHERE name = %(name)s RETURNING name;

-- console_user_update_password --
-- A new hash forgets the user's failed sign-ins and locks from every address.
WITH unlocked AS (
    DELETE FROM engine_console_signin_failures WHERE name = %(name)s
)
UPDATE engine_console_users
SET password_hash = %(password_hash)s, password_changed_at = clock_timestamp()
WHERE name = %(name)s
RETURNING name;

-- console_user_update_role --
-- Changes one user's role; returns its name when there was one.
UPDATE engine_console_users SET role = %(role)s WHERE name = %(name)s RETURNING name;

-- console_user_signin_ok --
-- A good sign-in is remembered (its failures are engine_console_signin_failures').
UPDATE engine_console_users SET last_signin_at = clock_timestamp() WHERE name = %(name)s;
