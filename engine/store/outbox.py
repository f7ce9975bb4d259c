"""Outbox rows: locked for hand-over, then marked published."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import PendingOutbox

_q = load("outbox")


@wrap_errors
def outbox_lock_unpublished_many(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    ids: Sequence[int] | None = None,
    horizon_s: float = 10 * 365 * 86400.0,
) -> list[PendingOutbox]:
    """Lock up to ``limit`` unpublished rows due within ``horizon_s`` (only ``ids`` if given)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            _q["outbox_lock_unpublished_many"],
            {"limit": limit, "ids": None if ids is None else list(ids), "horizon_s": horizon_s},
        )
        return [
            PendingOutbox(r["id"], r["step_run_id"], r["job_id"], r["delay_s"])
            for r in cur.fetchall()
        ]


@wrap_errors
def outbox_mark_published_many(conn: psycopg.Connection[Any], ids: Sequence[int]) -> int:
    with conn.cursor() as cur:
        cur.execute(_q["outbox_mark_published_many"], {"ids": list(ids)})
        return cur.rowcount


@wrap_errors
def outbox_notify(conn: psycopg.Connection[Any]) -> None:
    """Wake the listening relays when the caller's transaction commits."""
    conn.execute(_q["outbox_notify"])


@wrap_errors
def outbox_listen(conn: psycopg.Connection[Any]) -> None:
    """Listen on an autocommit connection for :func:`outbox_notify`."""
    conn.execute(_q["outbox_listen"])


@wrap_errors
def outbox_wait_notified(conn: psycopg.Connection[Any], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for a notification on a listening connection."""
    return any(True for _ in conn.notifies(timeout=timeout_s, stop_after=1))
