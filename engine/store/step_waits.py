"""Step runs that wait: parked under their lease, woken by a signal, a deadline or a child.

A step run parks only while its lease token is current (invariants 14, 16
and 17): its attempt comes back, its lease goes, its concurrency key's slot
is kept by status until it is claimed again, ends or is cancelled. It is
woken (made pending) by the signal it waits for, by its deadline (the
sweeper), or by the end of one of its child jobs; the operator's views count
and list the step runs waiting for a signal. The statements are
``sql/step_waits.sql``; the step runs' other statements are
:mod:`engine.store.step_runs`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from engine.store.batch import Batch, Reply
from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import Claimed, column
from engine.store.wait_rows import Parked, WaitingForSignal, WaitState

__all__ = [
    "step_count_awaiting_signal",
    "step_select_awaiting_signal",
    "step_select_children_timed_out",
    "step_wait_children_if_leased",
    "step_wait_children_if_reopened",
    "step_wait_if_leased",
    "step_wake_by_signal",
    "step_wake_if_due_many",
    "step_wake_parent",
    "step_wake_parent_batched",
]

_q = load("step_waits")


@wrap_errors
def step_wait_children_if_reopened(conn: psycopg.Connection[Any], step_run_id: uuid.UUID) -> bool:
    """A reopened step run waits for its reopened children; ``False``: it stays pending.

    It keeps its concurrency key's slot if one is free now (its children then
    run inside it); it stays pending when none of its children is active.
    """
    row = conn.execute(_q["step_wait_children_if_reopened"], {"id": step_run_id}).fetchone()
    return row is not None


@wrap_errors
def step_wait_if_leased(
    conn: psycopg.Connection[Any],
    claimed: Claimed,
    *,
    signal: str | None,
    timeout_s: float | None,
    until: datetime | None,
    past: tuple[datetime | None, ...] = (),
    summary: dict[str, Any] | None = None,
) -> Parked | None:
    """Park the step run (lease gone, attempt back) until ``signal`` or ``until``/``timeout_s``.

    Run after :func:`engine.store.job_lock_if_active` in the same transaction.
    ``summary`` (JSON, checked by the caller) is stored with the wait, by the
    same fenced statement. ``Parked.status`` is ``pending`` when the signal
    had been recorded already (announce it); ``None``: the lease was lost
    (invariant 16), and nothing is written.
    """
    return _park(
        conn,
        claimed,
        children=False,
        signal=signal,
        timeout_s=timeout_s,
        until=until,
        past=past,
        summary=None if summary is None else Jsonb(summary),
    )


@wrap_errors
def step_wake_by_signal(
    conn: psycopg.Connection[Any], job_id: uuid.UUID, name: str
) -> list[uuid.UUID]:
    """Make the job's step runs waiting for ``name`` pending (job row locked before): their ids."""
    rows = conn.execute(_q["step_wake_by_signal"], {"job_id": job_id, "name": name}).fetchall()
    return [column(r, "id") for r in rows]


@wrap_errors
def step_wake_if_due_many(
    conn: psycopg.Connection[Any], worker: str, limit: int = 100
) -> list[uuid.UUID]:
    """Make waiting step runs past their deadline pending (up to ``limit`` jobs): their ids."""
    rows = conn.execute(_q["step_wake_if_due_many"], {"worker": worker, "limit": limit}).fetchall()
    return [column(r, "id") for r in rows]


@wrap_errors
def step_wait_children_if_leased(
    conn: psycopg.Connection[Any],
    claimed: Claimed,
    *,
    timeout_s: float | None,
    past: tuple[datetime | None, ...] = (),
) -> Parked | None:
    """Park the step run (lease gone, attempt back) until its children end or ``timeout_s``.

    Run after :func:`engine.store.job_lock_if_active` and
    :func:`engine.store.job_lock_children` in the same transaction.
    ``Parked.status`` is ``pending`` when no child is active any more
    (announce it); ``None``: the lease was lost (invariant 16).
    """
    return _park(
        conn, claimed, children=True, signal=None, timeout_s=timeout_s, until=None, past=past
    )


def _park(
    conn: psycopg.Connection[Any],
    claimed: Claimed,
    *,
    children: bool,
    signal: str | None,
    timeout_s: float | None,
    until: datetime | None,
    past: tuple[datetime | None, ...],
    summary: Jsonb | None = None,
) -> Parked | None:
    """Both parks, one fenced statement: a signal's (or a deadline's) wait, or the children's."""
    params = {
        "id": claimed.id,
        "job_id": claimed.job_id,
        "token": claimed.token,
        "children": children,
        "signal": signal,
        "timeout_s": timeout_s,
        "until": until,
        "past": list(past),
        "summary": summary,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_q["step_park_if_leased"], params).fetchone()
    return None if row is None else Parked(row["status"], row["wait_signal"], row["wait_until"])


@wrap_errors
def step_wake_parent(conn: psycopg.Connection[Any], child_job_id: uuid.UUID) -> list[uuid.UUID]:
    """Make the step run waiting for the children of ``child_job_id``'s parent pending: its id."""
    rows = conn.execute(_q["step_wake_parent"], {"child_job_id": child_job_id}).fetchall()
    return [column(r, "id") for r in rows]


def step_wake_parent_batched(batch: Batch, child_job_id: uuid.UUID) -> Reply:
    """:func:`step_wake_parent` in ``batch`` (with the batch's other ended jobs, as one
    statement): the woken id (if any) in its reply once sent."""
    return batch.add_row(_q["step_wake_parent_many"], {"child_job_id": child_job_id})


@wrap_errors
def step_select_children_timed_out(
    conn: psycopg.Connection[Any], step_run_id: uuid.UUID
) -> WaitState:
    """Whether the step run's last wait for its children ran out, its deadline, the waits before."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_select_children_timed_out"], {"id": step_run_id})
        row = cur.fetchone()
    if row is None:
        return WaitState(None, False, None)
    return WaitState(None, bool(row["timed_out"]), row["wait_until"], tuple(row["wait_past"]))


@wrap_errors
def step_count_awaiting_signal(conn: psycopg.Connection[Any]) -> int:
    """How many step runs of active jobs wait for a signal now."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_count_awaiting_signal"])
        row = cur.fetchone()
    return int(row["n"]) if row else 0


@wrap_errors
def step_select_awaiting_signal(
    conn: psycopg.Connection[Any], limit: int = 100, job_id: uuid.UUID | None = None
) -> list[WaitingForSignal]:
    """Step runs of active jobs waiting for a signal now, oldest park first (at most ``limit``).

    ``job_id``: only that job's and its child jobs'.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["step_select_awaiting_signal"], {"limit": limit, "job_id": job_id})
        return [WaitingForSignal(**row) for row in cur.fetchall()]
