-- console_session_insert --
-- One row per session, keyed by the SHA-256 of its id (the id itself is only in the person's cookie); its absolute expiry is fixed at sign-in by the database clock.
INSERT INTO engine_console_sessions
    (id_hash, user_name, role, via, expires_at, token_expires_at)
VALUES (%(id_hash)s, %(user_name)s, %(role)s, %(via)s,
        clock_timestamp() + make_interval(secs => %(lifetime_s)s), %(token_expires_at)s);

-- console_session_touch_if_live --
-- Only a live session matches, seen now unless the request is a page's own polling (seen within idle_s, before its absolute expiry and lifetime_s, before its token's expiry, its user still of the role it was made with and, signed in with a password, not changed since the session began): an ended one answers no row, so it is refused at this request.
UPDATE engine_console_sessions AS s
SET last_seen_at = CASE WHEN %(seen)s THEN clock_timestamp() ELSE s.last_seen_at END
WHERE s.id_hash = %(id_hash)s
  AND s.last_seen_at > clock_timestamp() - make_interval(secs => %(idle_s)s)
  AND s.expires_at > clock_timestamp()
  AND s.created_at > clock_timestamp() - make_interval(secs => %(lifetime_s)s)
  AND (s.token_expires_at IS NULL OR s.token_expires_at > clock_timestamp())
  AND CASE s.via
        WHEN 'password' THEN EXISTS (
            SELECT 1 FROM engine_console_users AS u
            WHERE u.name = s.user_name AND u.role = s.role
              AND u.password_hash IS NOT NULL
              AND u.password_changed_at <= s.created_at)
        ELSE COALESCE(
            (SELECT u.role FROM engine_console_users AS u WHERE u.name = s.user_name),
            %(oidc_role)s::text) IS NOT DISTINCT FROM s.role
      END
RETURNING s.user_name, s.role, s.via, s.token_expires_at;

-- console_session_extend_token --
-- A newer token of the same person from the load balancer moves the session's token expiry forward, never back; the absolute expiry stays.
UPDATE engine_console_sessions
SET token_expires_at = %(token_expires_at)s
WHERE id_hash = %(id_hash)s AND via = 'oidc' AND user_name = %(user_name)s
  AND token_expires_at < %(token_expires_at)s;

-- console_session_delete --
-- Ends one session (sign-out, or one found ended); deleting a row that is gone is a no-op.
DELETE FROM engine_console_sessions WHERE id_hash = %(id_hash)s;

-- console_session_delete_user --
-- Ends every session of one user (a password or role change, removal), in the change's transaction.
DELETE FROM engine_console_sessions WHERE user_name = %(user_name)s;

-- console_session_delete_ended --
-- Removes the rows no request would accept any more (the same limits as console_session_touch_if_live's, but the user check), so the table holds about the live sessions.
DELETE FROM engine_console_sessions
WHERE last_seen_at <= clock_timestamp() - make_interval(secs => %(idle_s)s)
   OR expires_at <= clock_timestamp()
   OR created_at <= clock_timestamp() - make_interval(secs => %(lifetime_s)s)
   OR token_expires_at <= clock_timestamp();
