"""Waiting for a job to end, with a progress bar of finished step runs on a terminal.

The bar is drawn by rich, a dependency of the worker extra: on the API install
(no rich) the wait is the same, without the bar.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections.abc import Callable, Iterator

from engine import db, store
from engine.config import Settings
from engine.errors import NoSuchJob
from engine.store.status import JobStatus

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
