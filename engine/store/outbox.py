"""Outbox rows: "step run X is ready", written in the transaction that made it so.

Rows are inserted with what they announce (a retry, a reopened job, the
sweeper's re-announcement of claimable work), locked for hand-over by a relay
and then marked published (invariants 8 and 9). Step runs inserted together
with their outbox rows are in :mod:`engine.store.step_runs`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries, Params
from engine.store.queries import load
from engine.store.rows import PendingOutbox, SweepSlice

__all__ = [
    "outbox_insert_after",
    "outbox_insert_after_not_runnable",
    "outbox_insert_delayed",
    "outbox_insert_for_claimable",
    "outbox_insert_for_freed_keys",
    "outbox_insert_if_slot_free",
    "outbox_insert_many",
    "outbox_listen",
    "outbox_lock_unpublished_many",
    "outbox_mark_published_many",
    "outbox_notify",
    "outbox_wait_notified",
    "sweep_lock_try",
]

_q = NamedQueries(load("outbox"))


@wrap_errors
def outbox_lock_unpublished_many(
    conn: psycopg.Connection[Any],
    *,
    limit: int,
    ids: Sequence[int] | None = None,
    horizon_s: float = 10 * 365 * 86400.0,
) -> list[PendingOutbox]:
    """Lock up to ``limit`` unpublished rows due within ``horizon_s`` (only ``ids`` if given)."""
    params = {"limit": limit, "ids": None if ids is None else list(ids), "horizon_s": horizon_s}
    return [
        PendingOutbox(r["id"], r["step_run_id"], r["job_id"], r["delay_s"])
        for r in _q.rows(conn, "outbox_lock_unpublished_many", params)
    ]


@wrap_errors
def outbox_mark_published_many(conn: psycopg.Connection[Any], ids: Sequence[int]) -> int:
    return _q.run(conn, "outbox_mark_published_many", {"ids": list(ids)})


@wrap_errors
def outbox_notify(conn: psycopg.Connection[Any]) -> None:
    """Wake the listening relays when the caller's transaction commits."""
    _q.run(conn, "outbox_notify")


@wrap_errors
def outbox_listen(conn: psycopg.Connection[Any]) -> None:
    """Listen on an autocommit connection for :func:`outbox_notify`."""
    _q.run(conn, "outbox_listen")


@wrap_errors
def outbox_wait_notified(conn: psycopg.Connection[Any], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for a notification on a listening connection."""
    return any(True for _ in conn.notifies(timeout=timeout_s, stop_after=1))


@wrap_errors
def outbox_insert_delayed(
    conn: psycopg.Connection[Any], step_run_id: uuid.UUID, deliver_at: datetime
) -> int:
    params = {"step_run_id": step_run_id, "deliver_at": deliver_at}
    return _new_id(conn, "outbox_insert_delayed", params)


@wrap_errors
def outbox_insert_after(
    conn: psycopg.Connection[Any], step_run_id: uuid.UUID, delay_s: float
) -> int:
    """An announcement of ``step_run_id`` due ``delay_s`` from now by the database clock."""
    return _new_id(conn, "outbox_insert_after", {"step_run_id": step_run_id, "delay_s": delay_s})


@wrap_errors
def outbox_insert_after_not_runnable(
    conn: psycopg.Connection[Any],
    step_run_id: uuid.UUID,
    *,
    handoff_s: float,
    delay_s: float,
    live_s: float,
) -> int:
    """An announcement of ``step_run_id``, refused here as not runnable: due after ``handoff_s``
    while a live worker has its flow version loaded, else after ``delay_s`` (database clock)."""
    params = {
        "step_run_id": step_run_id,
        "handoff_s": handoff_s,
        "delay_s": delay_s,
        "live_s": live_s,
    }
    return _new_id(conn, "outbox_insert_after_not_runnable", params)


@wrap_errors
def outbox_insert_many(conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]) -> list[int]:
    if not ids:
        return []
    return _new_ids(conn, "outbox_insert_many", {"ids": list(ids)})


@wrap_errors
def outbox_insert_if_slot_free(
    conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]
) -> list[int]:
    """Announce those of ``ids`` (pending, keyed) whose key has a slot free now."""
    if not ids:
        return []
    return _new_ids(conn, "outbox_insert_if_slot_free", {"ids": list(ids)})


@wrap_errors
def outbox_insert_for_claimable(
    conn: psycopg.Connection[Any],
    queued: SweepSlice,
    woken: Sequence[uuid.UUID],
    *,
    republish_after_s: float,
    limit: int,
) -> list[int]:
    """Announce up to ``limit`` step runs of ``queued`` (a sweep's slice) and ``woken`` (made
    pending by the round, after its slice's bounds were read) claimable and not announced
    since."""
    params = {
        **queued.params(),
        "ids": list(woken),
        "republish_after_s": republish_after_s,
        "limit": limit,
    }
    return _new_ids(conn, "outbox_insert_for_claimable", params)


@wrap_errors
def outbox_insert_for_freed_keys(
    conn: psycopg.Connection[Any],
    job_ids: Sequence[uuid.UUID],
    *,
    expired: bool = False,
    limit: int = 100,
) -> list[int]:
    """Announce the next waiting step runs of the concurrency keys of ``job_ids`` with a slot free.

    With ``expired``, also of the keys whose holders' leases expired (the
    sweeper). The outbox ids; none when no key is concerned or all are full.
    """
    if not job_ids and not expired:
        return []
    params = {"job_ids": list(job_ids), "expired": expired, "limit": limit}
    return _new_ids(conn, "outbox_insert_for_freed_keys", params)


@wrap_errors
def sweep_lock_try(conn: psycopg.Connection[Any]) -> bool:
    row = _q.first(conn, "sweep_lock_try")
    return bool(row is not None and row["locked"])


def _new_id(conn: psycopg.Connection[Any], name: str, params: Params) -> int:
    """The id of the one outbox row ``name`` inserts (its step run exists: it always does)."""
    return int(_q.one(conn, name, params)["id"])


def _new_ids(conn: psycopg.Connection[Any], name: str, params: Params) -> list[int]:
    """The ids of the outbox rows ``name`` inserted (none: nothing to announce)."""
    return [int(r["id"]) for r in _q.rows(conn, name, params)]
