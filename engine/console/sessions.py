"""The console's sessions, kept on the server: made at sign-in, checked at each request, ended.

The cookie (Starlette's, signed with ``ENGINE_CONSOLE_SECRET``) carries a
random session id of 256 bits and the CSRF token; the database
(``engine_console_sessions``) holds the SHA-256 of the id with whose session
it is, its role, how they signed in and until when. Each request finds and
touches its row in one statement, which answers nothing once the session has
ended, and the request is then treated as signed out:

- sign-out deletes the row, so a cookie copied before it is refused after;
- a password change, a role change or the user's removal deletes the user's
  rows (:mod:`engine.console.users`); besides, a row whose user no longer has
  the role it was made with, or changed their password after it began, is
  refused;
- ``ENGINE_CONSOLE_SESSION_IDLE_MINUTES`` without a request of the person
  (a live job page's polling does not count), or
  ``ENGINE_CONSOLE_SESSION_HOURS`` after sign-in, end it;
- a session made from the load balancer's token ends when the token expires
  (a later token of the same person moves that forward).

The database clock decides every expiry. Ended rows are deleted at each
sign-in (one bounded ``DELETE``).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine import store
from engine.config import Settings
from engine.console.roles import Role
from engine.console.settings import ConsoleSettings
from engine.console.users import User
from engine.store import db

__all__ = ["SESSION_KEY", "Session", "end", "extend_token", "resume", "start"]

SESSION_KEY = "sid"  # the key of the session id in the signed cookie


@dataclass(frozen=True)
class Session:
    """A live session: who, and (made from the load balancer's token) until when at most."""

    user: User
    token_expires_at: datetime | None


def _hash(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def _limits(console: ConsoleSettings) -> dict[str, float]:
    return {"idle_s": console.session_idle_minutes * 60, "lifetime_s": console.session_hours * 3600}


def start(
    settings: Settings,
    console: ConsoleSettings,
    cookie: dict[str, Any],
    user: User,
    *,
    token_expires_at: datetime | None = None,
) -> None:
    """A new session for ``user``; the cookie is cleared first (a new id, a new CSRF token)."""
    sid = secrets.token_urlsafe(32)
    with db.connect(settings) as conn, conn.transaction():
        store.console_session_delete_ended(conn, **_limits(console))
        store.console_session_insert(
            conn,
            _hash(sid),
            user_name=user.name,
            role=Role(user.role).value,
            via=user.via,
            lifetime_s=console.session_hours * 3600,
            token_expires_at=token_expires_at,
        )
    cookie.clear()
    cookie[SESSION_KEY] = sid


def resume(
    settings: Settings, console: ConsoleSettings, cookie: dict[str, Any], *, seen: bool = True
) -> Session | None:
    """The cookie's live session; ``None`` (and the cookie cleared): none, or ended.

    ``seen``: the request is the person's, so the idle clock starts again; a page's own
    polling (a live job page asking for changes) is not, so an open tab still idles out.
    """
    sid = cookie.get(SESSION_KEY)
    if not isinstance(sid, str) or not sid:
        if cookie.get("user") is not None:
            cookie.clear()  # a cookie of before server-side sessions: sign in again
        return None
    id_hash = _hash(sid)
    oidc_role = console.oidc_role.value if console.oidc_role is not None else None
    with db.connect(settings, autocommit=True) as conn:
        row = store.console_session_touch_if_live(
            conn, id_hash, oidc_role=oidc_role, seen=seen, **_limits(console)
        )
        if row is None:
            store.console_session_delete(conn, id_hash)
    if row is None:
        cookie.clear()
        return None
    user = User(name=row["user_name"], role=Role(row["role"]), via=row["via"])
    return Session(user=user, token_expires_at=row["token_expires_at"])


def extend_token(
    settings: Settings, cookie: dict[str, Any], user_name: str, token_expires_at: datetime
) -> None:
    """A newer token of the session's person: its session lasts until that token's expiry."""
    sid = cookie.get(SESSION_KEY)
    if not isinstance(sid, str):
        return
    with db.connect(settings, autocommit=True) as conn:
        store.console_session_extend_token(
            conn, _hash(sid), user_name=user_name, token_expires_at=token_expires_at
        )


def end(settings: Settings, cookie: dict[str, Any]) -> None:
    """Sign-out: the session's row deleted (a copy of the cookie is refused), the cookie cleared."""
    sid = cookie.get(SESSION_KEY)
    cookie.clear()
    if isinstance(sid, str) and sid:
        with db.connect(settings, autocommit=True) as conn:
            store.console_session_delete(conn, _hash(sid))
