"""Schedules and their fires: each scheduled time of a schedule is fired once.

A schedule is claimed like a step run: one conditional UPDATE that moves its
``next_fire_at`` from the value the worker read past the times it fires.
One worker gets the row; a racer gets :class:`SlotTaken`. The fires (one row
per scheduled time, unique) and the jobs they submit are written in the
claim's transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import psycopg
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries
from engine.store.queries import load
from engine.store.status import CatchUp, FireOutcome

__all__ = [
    "DueSchedule",
    "SlotTaken",
    "schedule_claim_if_due",
    "schedule_delete_by_name",
    "schedule_fire_insert_if_new",
    "schedule_fire_select_by_schedule",
    "schedule_fire_set_outcome",
    "schedule_insert_if_absent",
    "schedule_pause_if_active",
    "schedule_record_fired",
    "schedule_resume_if_paused",
    "schedule_select_all",
    "schedule_select_by_name",
    "schedule_select_db_now",
    "schedule_select_due_many",
    "schedule_select_names",
]

_q = load("schedules")
_rows = NamedQueries(_q)  # the reads that return rows as dicts


@dataclass(frozen=True)
class DueSchedule:
    """A schedule read as due (no lock): what a worker needs to try to fire it."""

    id: int
    name: str
    flow: str
    cron: str
    timezone: str
    params: dict[str, Any]
    catch_up: CatchUp
    next_fire_at: datetime
    db_now: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DueSchedule:
        return cls(
            row["id"],
            row["name"],
            row["flow"],
            row["cron"],
            row["timezone"],
            dict(row["params"]),
            CatchUp(row["catch_up"]),
            row["next_fire_at"],
            row["db_now"],
        )


@dataclass(frozen=True)
class SlotTaken:
    """The claim matched no row: another worker fired these times (or the schedule is gone)."""

    schedule: str


@wrap_errors
def schedule_insert_if_absent(
    conn: psycopg.Connection[Any],
    *,
    name: str,
    flow: str,
    cron: str,
    timezone: str,
    params: dict[str, Any],
    catch_up: CatchUp,
    next_fire_at: datetime,
    created_by: str | None,
) -> bool:
    """``False``: a schedule of that name exists already (nothing written)."""
    row = conn.execute(
        _q["schedule_insert_if_absent"],
        {
            "name": name,
            "flow": flow,
            "cron": cron,
            "timezone": timezone,
            "params": Jsonb(params),
            "catch_up": catch_up.value,
            "next_fire_at": next_fire_at,
            "created_by": created_by,
        },
    ).fetchone()
    return row is not None


@wrap_errors
def schedule_delete_by_name(conn: psycopg.Connection[Any], name: str) -> bool:
    """``False``: no schedule has that name."""
    return conn.execute(_q["schedule_delete_by_name"], {"name": name}).fetchone() is not None


@wrap_errors
def schedule_select_all(conn: psycopg.Connection[Any], *, live_s: float) -> list[dict[str, Any]]:
    """Every schedule, its last fire's ``last_outcome``, and ``unloaded`` (due, no live worker)."""
    return _rows.rows(conn, "schedule_select_all", {"live_s": live_s})


@wrap_errors
def schedule_select_by_name(conn: psycopg.Connection[Any], name: str) -> dict[str, Any] | None:
    """One schedule with ``db_now``; ``None``: no schedule has that name."""
    return _rows.first(conn, "schedule_select_by_name", {"name": name})


@wrap_errors
def schedule_pause_if_active(
    conn: psycopg.Connection[Any], name: str, *, by: str, reason: str | None
) -> datetime | None:
    """When it was paused; ``None``: no schedule has that name, or it is paused already."""
    row = _rows.first(conn, "schedule_pause_if_active", {"name": name, "by": by, "reason": reason})
    return None if row is None else _datetime(row["paused_at"])


@wrap_errors
def schedule_resume_if_paused(
    conn: psycopg.Connection[Any], schedule_id: int, *, next_after_now: datetime
) -> datetime | None:
    """Its next time once resumed; ``None``: it was not paused (or a racer resumed it first)."""
    params = {"id": schedule_id, "next_after_now": next_after_now}
    row = _rows.first(conn, "schedule_resume_if_paused", params)
    return None if row is None else _datetime(row["next_fire_at"])


@wrap_errors
def schedule_select_names(conn: psycopg.Connection[Any]) -> list[str]:
    return [r["name"] for r in _rows.rows(conn, "schedule_select_names")]


@wrap_errors
def schedule_select_db_now(conn: psycopg.Connection[Any]) -> datetime:
    return _datetime(_rows.one(conn, "schedule_select_db_now")["db_now"])


@wrap_errors
def schedule_select_due_many(
    conn: psycopg.Connection[Any], *, flows: list[str], limit: int
) -> list[DueSchedule]:
    rows = _rows.rows(conn, "schedule_select_due_many", {"flows": flows, "limit": limit})
    return [DueSchedule.from_row(r) for r in rows]


@wrap_errors
def schedule_claim_if_due(
    conn: psycopg.Connection[Any], due: DueSchedule, next_fire_at: datetime
) -> DueSchedule | SlotTaken:
    """Move ``due`` past the times being fired; :class:`SlotTaken` when another worker did."""
    row = conn.execute(
        _q["schedule_claim_if_due"],
        {"id": due.id, "seen": due.next_fire_at, "next_fire_at": next_fire_at},
    ).fetchone()
    return due if row is not None else SlotTaken(due.name)


@wrap_errors
def schedule_fire_insert_if_new(
    conn: psycopg.Connection[Any], schedule_id: int, scheduled_for: datetime, fired_by: str
) -> bool:
    """``False``: this scheduled time was fired already."""
    row = conn.execute(
        _q["schedule_fire_insert_if_new"],
        {"schedule_id": schedule_id, "scheduled_for": scheduled_for, "fired_by": fired_by},
    ).fetchone()
    return row is not None


@wrap_errors
def schedule_fire_set_outcome(
    conn: psycopg.Connection[Any],
    schedule_id: int,
    scheduled_for: datetime,
    *,
    outcome: FireOutcome,
    job_id: uuid.UUID | None,
    error: str | None,
) -> None:
    """``outcome``: ``job`` (with ``job_id``), ``refused`` or ``error`` (with ``error``)."""
    conn.execute(
        _q["schedule_fire_set_outcome"],
        {
            "schedule_id": schedule_id,
            "scheduled_for": scheduled_for,
            "outcome": outcome.value,
            "job_id": job_id,
            "error": error,
        },
    )


@wrap_errors
def schedule_record_fired(
    conn: psycopg.Connection[Any],
    schedule_id: int,
    scheduled_for: datetime,
    *,
    job_id: uuid.UUID | None,
    error: str | None,
) -> None:
    conn.execute(
        _q["schedule_record_fired"],
        {"id": schedule_id, "scheduled_for": scheduled_for, "job_id": job_id, "error": error},
    )


@wrap_errors
def schedule_fire_select_by_schedule(
    conn: psycopg.Connection[Any], name: str, limit: int = 20
) -> list[dict[str, Any]]:
    return _rows.rows(conn, "schedule_fire_select_by_schedule", {"name": name, "limit": limit})


def _datetime(value: Any) -> datetime:
    """A timestamptz column's value, typed."""
    return cast(datetime, value)
