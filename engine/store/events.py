"""The event log: an append-only history of every job, step run and message.

The events of a claim, a checkpoint and a job's end are written by the
guarded statement itself, in its ``WITH``, so each exists exactly when its
change does; these inserts are for the rest, in the caller's transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.store.rows import UNTIMED, Claimed, Ran
from engine.store.status import EventKind

__all__ = [
    "attempt_event_insert",
    "event_count_by_step",
    "event_insert",
    "event_insert_many",
    "step_event_insert",
]

_q = load("events")


@wrap_errors
def event_insert(
    conn: psycopg.Connection[Any],
    kind: EventKind,
    *,
    job_id: uuid.UUID | None = None,
    step_run_id: uuid.UUID | None = None,
    worker: str | None = None,
    attempt: int | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    conn.execute(
        _q["event_insert"],
        {
            "kind": kind.value,
            "job_id": job_id,
            "step_run_id": step_run_id,
            "worker": worker,
            "attempt": attempt,
            "detail": Jsonb(detail or {}),
        },
    )


def step_event_insert(
    conn: psycopg.Connection[Any],
    kind: EventKind,
    claimed: Claimed,
    *,
    worker: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """An event about one attempt of a claimed step run (job, step run, attempt filled in)."""
    event_insert(
        conn,
        kind,
        job_id=claimed.job_id,
        step_run_id=claimed.id,
        worker=worker,
        attempt=claimed.attempt,
        detail=detail,
    )


@wrap_errors
def attempt_event_insert(
    conn: psycopg.Connection[Any],
    kind: EventKind,
    claimed: Claimed,
    *,
    worker: str,
    ran: Ran | None,
    detail: dict[str, Any] | None = None,
) -> None:
    """An event of an attempt of ``claimed`` (one that ends it, or a renewal), with when its
    step ran (``ran``; ``None``: not known).

    Its ``started_at`` is what the run report's timeline draws the attempt
    from (:mod:`engine.reports.timeline`): the claim is not the start when
    the step run waited its turn on the worker (a claimed batch).
    """
    conn.execute(
        _q["event_insert_timed"],
        {
            "kind": kind.value,
            "job_id": claimed.job_id,
            "step_run_id": claimed.id,
            "worker": worker,
            "attempt": claimed.attempt,
            "detail": Jsonb(detail or {}),
            **(UNTIMED if ran is None else ran.params()),
        },
    )


@wrap_errors
def event_count_by_step(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Per flow and step: attempts claimed, reclaimed, succeeded, failed, retried, dead,
    rejected and fenced."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_q["event_count_by_step"])
        return [dict(r) for r in cur]


@wrap_errors
def event_insert_many(
    conn: psycopg.Connection[Any],
    kind: EventKind,
    job_ids: Sequence[uuid.UUID],
    details: Sequence[dict[str, Any]],
) -> None:
    """One ``kind`` event per job, each with its detail, in one statement."""
    conn.execute(
        _q["event_insert_many"],
        {"kind": kind.value, "job_ids": list(job_ids), "details": [Jsonb(d) for d in details]},
    )
