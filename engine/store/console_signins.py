"""Failed sign-ins of the console's users, per user and address (the lock of one pair).

What counts as a failure, the limit and the lock's length are
:mod:`engine.console.users`'; this module only stores them. Counted on the
database so that every console process agrees.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine.store.errors import wrap_errors
from engine.store.queries import load

__all__ = ["console_signin_failed", "console_signin_locked", "console_signin_succeeded"]

_q = load("console_signins")


@wrap_errors
def console_signin_locked(conn: psycopg.Connection[Any], name: str, address: str) -> bool:
    """Whether ``name`` is locked from ``address`` now."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            _q["console_signin_locked"], {"name": name, "address": address}
        ).fetchone()
    return bool(row and row["locked"])


@wrap_errors
def console_signin_failed(
    conn: psycopg.Connection[Any], name: str, address: str, *, limit: int, lock_s: float
) -> dict[str, Any] | None:
    """The pair's count and lock after this failure (``None``: no such user, or locked already)."""
    params = {"name": name, "address": address, "limit": limit, "lock_s": lock_s}
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_q["console_signin_failed"], params).fetchone()


@wrap_errors
def console_signin_succeeded(
    conn: psycopg.Connection[Any], name: str, address: str, *, lock_s: float
) -> None:
    params = {"name": name, "address": address, "lock_s": lock_s}
    with conn.cursor() as cur:
        cur.execute(_q["console_signin_succeeded"], params)
