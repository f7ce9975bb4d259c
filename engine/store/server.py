"""The server itself rather than a table: does it answer, and does the engine's database exist."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import column

__all__ = ["clock_select", "database_create_if_absent", "lock_select_holders", "server_ping"]

_q = load("server")


@wrap_errors
def server_ping(conn: psycopg.Connection[Any]) -> None:
    """Raise if ``conn`` cannot run a statement."""
    conn.execute(_q["server_ping"])


@wrap_errors
def database_create_if_absent(conn: psycopg.Connection[Any], name: str) -> None:
    """Create database ``name`` unless it exists (``conn`` in autocommit, on another database)."""
    if conn.execute(_q["database_select_exists"], {"name": name}).fetchone():
        return
    with contextlib.suppress(psycopg.errors.DuplicateDatabase):
        conn.execute(sql.SQL(_q["database_create"]).format(name=sql.Identifier(name)))


@wrap_errors
def clock_select(conn: psycopg.Connection[Any]) -> datetime:
    """The database clock (``clock_timestamp()``), the only clock waits are measured by."""
    row = conn.execute(_q["clock_select"]).fetchone()
    assert row is not None, "SELECT clock_timestamp() returns one row"
    return column(row, "now")  # type: ignore[no-any-return]


@wrap_errors
def lock_select_holders(conn: psycopg.Connection[Any], table: str) -> list[dict[str, Any]]:
    """Other sessions holding rows of ``table`` (at most 3, oldest transaction first).

    Each: ``pid``, ``application``, ``client``, ``state`` and ``xact_s`` (age of
    its transaction). Only for a message; a lock may be gone by the time it is read.
    """
    return conn.execute(_q["lock_select_holders"], {"table": table}).fetchall()
