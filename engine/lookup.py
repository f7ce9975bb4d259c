"""What a flow may ask about jobs: one job, and the active jobs working on the same data.

A flow that changes the state its jobs depend on (closing an accounting
period, say) must know whether such jobs are still running. It asks here,
in its own transaction, rather than reading the engine's tables: which
jobs of these flows, with parameters containing these values, are pending
or running.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.store.status import JobStatus

__all__ = ["JobInfo", "active_jobs", "job_info"]


@dataclass(frozen=True)
class JobInfo:
    """A job as a flow sees it."""

    id: uuid.UUID
    flow: str
    status: JobStatus
    params: dict[str, Any]
    submitted_by: str | None
    created_at: datetime

    @classmethod
    def _of(cls, row: Mapping[str, Any]) -> JobInfo:
        return cls(
            row["id"],
            row["flow"],
            JobStatus(row["status"]),
            dict(row["params"]),
            row["submitted_by"],
            row["created_at"],
        )


def active_jobs(
    conn: psycopg.Connection[Any],
    *,
    flows: Sequence[str],
    params: Mapping[str, Any] | None = None,
    exclude: uuid.UUID | None = None,
) -> list[JobInfo]:
    """Pending or running jobs of ``flows`` whose parameters contain ``params``, oldest first.

    ``params={"period": "2026-11"}`` matches every job submitted with that
    period, whatever its other parameters; ``exclude`` leaves one job out
    (the caller's own).
    """
    rows = store.job_select_active_matching(
        conn, flows=list(flows), params=dict(params or {}), exclude=exclude
    )
    return [JobInfo._of(r) for r in rows]


def job_info(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> JobInfo | None:
    """The job with this id, or ``None``."""
    row = store.job_select_info(conn, job_id)
    return None if row is None else JobInfo._of(row)
