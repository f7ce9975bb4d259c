"""The console's sessions: a hash of each random session id, whose, and until when.

Making ids, hashing them and deciding what a request may do are
:mod:`engine.console.sessions`'; this module only stores what it is given.
The session id itself never reaches the database: only its SHA-256 (hex).
The database clock decides every expiry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine.store.errors import wrap_errors
from engine.store.queries import load

__all__ = [
    "console_session_delete",
    "console_session_delete_ended",
    "console_session_delete_user",
    "console_session_extend_token",
    "console_session_insert",
    "console_session_touch_if_live",
]

_q = load("console_sessions")


@wrap_errors
def console_session_insert(
    conn: psycopg.Connection[Any],
    id_hash: str,
    *,
    user_name: str,
    role: str,
    via: str,
    lifetime_s: float,
    token_expires_at: datetime | None,
) -> None:
    """A new session, ending ``lifetime_s`` from now at the latest."""
    with conn.cursor() as cur:
        cur.execute(
            _q["console_session_insert"],
            {
                "id_hash": id_hash,
                "user_name": user_name,
                "role": role,
                "via": via,
                "lifetime_s": lifetime_s,
                "token_expires_at": token_expires_at,
            },
        )


@wrap_errors
def console_session_touch_if_live(
    conn: psycopg.Connection[Any],
    id_hash: str,
    *,
    idle_s: float,
    lifetime_s: float,
    oidc_role: str | None,
    seen: bool = True,
) -> dict[str, Any] | None:
    """The live session's user, role, way in and token expiry (``seen``: now); ``None``: ended."""
    params = {
        "id_hash": id_hash,
        "seen": seen,
        "idle_s": idle_s,
        "lifetime_s": lifetime_s,
        "oidc_role": oidc_role,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["console_session_touch_if_live"], params)
        return cur.fetchone()


@wrap_errors
def console_session_extend_token(
    conn: psycopg.Connection[Any], id_hash: str, *, user_name: str, token_expires_at: datetime
) -> None:
    params = {"id_hash": id_hash, "user_name": user_name, "token_expires_at": token_expires_at}
    with conn.cursor() as cur:
        cur.execute(_q["console_session_extend_token"], params)


@wrap_errors
def console_session_delete(conn: psycopg.Connection[Any], id_hash: str) -> None:
    with conn.cursor() as cur:
        cur.execute(_q["console_session_delete"], {"id_hash": id_hash})


@wrap_errors
def console_session_delete_user(conn: psycopg.Connection[Any], user_name: str) -> int:
    """Ends every session of ``user_name``; how many there were."""
    with conn.cursor() as cur:
        cur.execute(_q["console_session_delete_user"], {"user_name": user_name})
        return cur.rowcount


@wrap_errors
def console_session_delete_ended(
    conn: psycopg.Connection[Any], *, idle_s: float, lifetime_s: float
) -> int:
    """Deletes the sessions no request would accept any more; how many."""
    with conn.cursor() as cur:
        cur.execute(
            _q["console_session_delete_ended"], {"idle_s": idle_s, "lifetime_s": lifetime_s}
        )
        return cur.rowcount
