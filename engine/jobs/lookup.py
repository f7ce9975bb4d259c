"""What a flow may ask about jobs: one job, and the active jobs working on the same data.

A flow that changes the state its jobs depend on (closing an accounting
period, say) must know whether such jobs are still running. It asks here,
in its own transaction, rather than reading the engine's tables: which
jobs of these flows, with parameters containing these values, are pending
or running.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import NoSuchJob
from engine.store import db
from engine.store.status import JobStatus

__all__ = ["JobInfo", "active_jobs", "job_info", "wait_for_job"]


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


_ENDED = {JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED}


def wait_for_job(
    settings: Settings,
    job_id: uuid.UUID,
    *,
    progress: bool = True,
    poll_s: float = 0.5,
    stop: threading.Event | None = None,
) -> JobStatus:
    """Block until the job ends; its final status."""
    stop = stop or threading.Event()
    show = progress and sys.stdout.isatty()
    with (
        db.connect(settings, autocommit=True) as conn,
        _progress(f"job {str(job_id)[:8]}", show) as update,
    ):
        while True:
            row = store.job_progress(conn, job_id)
            if row is None:
                raise NoSuchJob(job_id)
            update(row["total"], row["done"])
            status = JobStatus(row["status"])
            if status in _ENDED:
                return status
            if stop.wait(poll_s):
                return status


@contextlib.contextmanager
def _progress(description: str, show: bool) -> Iterator[Callable[[int, int], None]]:
    """``update(total, completed)`` of a progress bar, or of nothing when not ``show``."""
    try:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )
    except ImportError:
        show = False
    if not show:
        yield lambda _total, _done: None
        return

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with bar:
        task = bar.add_task(description, total=None)
        yield lambda total, done: bar.update(task, total=total, completed=done)
