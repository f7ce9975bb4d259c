"""Job summaries: what stays of a job once retention pruned its rows.

A summary row (migration 0031) is written by ``engine_retire_jobs`` in the
transaction that deletes the job's live rows (step runs, events, tags,
outbox, dead letters, signals), after it took the job rows ``FOR UPDATE
SKIP LOCKED`` and checked again that the family ended, passed its horizon
and is not pinned. The candidates are chosen here, read only, by the same
rules; :mod:`engine.retention` drives the batches.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engine.store.errors import wrap_errors
from engine.store.named import NamedQueries
from engine.store.queries import load

__all__ = [
    "job_retire_count_many",
    "job_retire_many",
    "job_retire_select_roots",
    "job_retired_tables_vacuum",
    "job_select_family_many",
    "job_summary_select",
]

_q = load("job_summaries")
_rows = NamedQueries(_q)

_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
_NIL = uuid.UUID(int=0)


@wrap_errors
def job_retire_select_roots(
    conn: psycopg.Connection[Any],
    *,
    as_of: datetime,
    policy: Mapping[str, Mapping[str, float | None]],
    defaults: Mapping[str, float],
    limit: int,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[dict[str, Any]]:
    """Top-level jobs due for retirement at ``as_of`` (id, flow, status, finished_at, horizon).

    ``policy`` maps a flow to horizons in seconds per end state (``None``:
    the default); ``defaults`` has one per end state. Oldest end first,
    after the keyset cursor ``after`` (finished_at, id).
    """
    after_at, after_id = after or (_EPOCH, _NIL)
    return _rows.rows(
        conn,
        "job_retire_select_roots",
        {
            "as_of": as_of,
            "policy": Jsonb({f: dict(h) for f, h in policy.items()}),
            "done_s": defaults["done"],
            "failed_s": defaults["failed"],
            "cancelled_s": defaults["cancelled"],
            "min_keep_s": _min_keep(policy, defaults),
            "after_at": after_at,
            "after_id": after_id,
            "limit": limit,
        },
    )


def _min_keep(
    policy: Mapping[str, Mapping[str, float | None]], defaults: Mapping[str, float]
) -> float:
    """The shortest horizon of all: no job that ended later can be due (bounds the index walk)."""
    values = [*defaults.values()]
    values += [v for h in policy.values() for v in h.values() if v is not None]
    return min(values)


@wrap_errors
def job_retire_count_many(
    conn: psycopg.Connection[Any], roots: Sequence[uuid.UUID], as_of: datetime
) -> list[dict[str, Any]]:
    """What retiring ``roots`` would remove now: (flow, status, jobs, step_runs, events, tags)."""
    return _rows.rows(conn, "job_retire_count_many", {"roots": list(roots), "as_of": as_of})


@wrap_errors
def job_select_family_many(
    conn: psycopg.Connection[Any], roots: Sequence[uuid.UUID]
) -> list[uuid.UUID]:
    """``roots`` and all their descendants' ids."""
    return [r["id"] for r in _rows.rows(conn, "job_select_family_many", {"roots": list(roots)})]


@wrap_errors
def job_retire_many(
    conn: psycopg.Connection[Any],
    roots: Sequence[uuid.UUID],
    horizons: Sequence[datetime],
    reports: Mapping[uuid.UUID, str],
) -> list[dict[str, Any]]:
    """Retire these families (in the caller's transaction); one row per job that went.

    Each row: job_id, flow, status, step_runs, events, tags (what was deleted).
    A root another session holds, that changed, or is pinned now is skipped.
    """
    return _rows.rows(
        conn,
        "job_retire_many",
        {
            "roots": list(roots),
            "horizons": list(horizons),
            "reports": Jsonb({str(k): v for k, v in reports.items()}),
        },
    )


@wrap_errors
def job_summary_select(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any] | None:
    """A pruned job's summary row, or ``None`` (a live job, or none)."""
    return _rows.first(conn, "job_summary_select", {"job_id": job_id})


@wrap_errors
def job_retired_tables_vacuum(conn: psycopg.Connection[Any], delay_ms: float) -> bool:
    """VACUUM the live tables a retirement deletes from, if this role may; whether it did.

    ``conn`` must be in autocommit (VACUUM runs outside a transaction).
    ``delay_ms``: its cost-based delay (autovacuum's 2 ms: it yields to the
    claims; 0: at full speed), the session's own given back after it.
    """
    if not _rows.one(conn, "job_retired_tables_vacuumable")["vacuumable"]:
        return False
    was = _rows.one(conn, "job_vacuum_delay_set", {"delay": f"{delay_ms}ms"})["was"]
    try:
        _rows.run(conn, "job_retired_tables_vacuum")
    finally:
        _rows.run(conn, "job_vacuum_delay_set", {"delay": was})
    return True
