"""The console's users: name, role, an argon2 hash (or none: OIDC only), the last sign-in.

Hashing and verifying are :mod:`engine.console.users`'; this module only
stores what it is given. The hash leaves the database only through
:func:`console_user_select` (to verify a password); listings say whether a
user has one.
"""

from __future__ import annotations

from typing import Any

import psycopg

from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries
from engine.store.queries import load

__all__ = [
    "console_user_delete",
    "console_user_insert",
    "console_user_select",
    "console_user_select_all",
    "console_user_signin_ok",
    "console_user_update_password",
    "console_user_update_role",
]

_q = NamedQueries(load("console_users"))


@wrap_errors
def console_user_insert(
    conn: psycopg.Connection[Any], name: str, role: str, password_hash: str | None
) -> dict[str, Any] | None:
    """The new user's row, or ``None`` when the name is taken."""
    return _q.first(
        conn,
        "console_user_insert",
        {"name": name, "role": role, "password_hash": password_hash},
    )


@wrap_errors
def console_user_select(conn: psycopg.Connection[Any], name: str) -> dict[str, Any] | None:
    """One user with its hash (to verify a password)."""
    return _q.first(conn, "console_user_select", {"name": name})


@wrap_errors
def console_user_select_all(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every user by name, without hashes."""
    return _q.rows(conn, "console_user_select_all")


@wrap_errors
def console_user_delete(conn: psycopg.Connection[Any], name: str) -> bool:
    return _q.first(conn, "console_user_delete", {"name": name}) is not None


@wrap_errors
def console_user_update_password(
    conn: psycopg.Connection[Any], name: str, password_hash: str | None
) -> bool:
    params = {"name": name, "password_hash": password_hash}
    return _q.first(conn, "console_user_update_password", params) is not None


@wrap_errors
def console_user_update_role(conn: psycopg.Connection[Any], name: str, role: str) -> bool:
    return _q.first(conn, "console_user_update_role", {"name": name, "role": role}) is not None


@wrap_errors
def console_user_signin_ok(conn: psycopg.Connection[Any], name: str) -> None:
    _q.run(conn, "console_user_signin_ok", {"name": name})
