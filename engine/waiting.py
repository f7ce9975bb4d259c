"""Waiting for a job to end, with a progress bar of finished step runs on a terminal."""

from __future__ import annotations

import sys
import threading
import uuid

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from engine import db, store
from engine.config import Settings
from engine.errors import NoSuchJob
from engine.store.models import JobStatus

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
    with db.connect(settings, autocommit=True) as conn:
        bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            disable=not show,
        )
        with bar:
            task = bar.add_task(f"job {str(job_id)[:8]}", total=None)
            while True:
                row = store.job_progress(conn, job_id)
                if row is None:
                    raise NoSuchJob(job_id)
                bar.update(task, total=row["total"], completed=row["done"])
                status = JobStatus(row["status"])
                if status in _ENDED:
                    return status
                if stop.wait(poll_s):
                    return status
