"""Watching a job until it ends: what ``engine submit ... --wait`` shows.

One cheap query per poll (``job_progress`` in ``engine/store/sql/jobs.sql``)
gives the job's status, whether it is *waiting* (derived, never stored:
active, with every unfinished step run parked for a signal, a time or its
children) and its step runs done over known, its descendants' included: a
parent whose children do the work (a close) moves as they do.

A caller gets a :class:`Progress` at each poll and decides how to show it: a
progress bar on a terminal, one line per change of state off one.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine import store
from engine.config import Settings
from engine.errors import NoSuchJob
from engine.store import db
from engine.store.status import JobStatus, wait_text

__all__ = ["Progress", "watch_job"]

_ENDED = {JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED}


@dataclass(frozen=True)
class Progress:
    """A job at one moment: its state (``waiting`` derived), counts and, once failed, why."""

    job_id: uuid.UUID
    status: JobStatus
    waiting_for: tuple[str, ...]  # empty unless the job waits
    done: int  # step runs done, the descendants' included
    total: int  # step runs known so far, the descendants' included
    error: str | None

    @property
    def state(self) -> str:
        """``waiting`` for a running job whose unfinished step runs all wait; else the status."""
        return "waiting" if self.waiting_for else str(self.status)

    @property
    def ended(self) -> bool:
        return self.status in _ENDED

    def line(self) -> str:
        """One line for people: ``job 1a2b3c4d waiting for signal approve: 3/7 steps done``."""
        state = self.state
        if self.waiting_for:
            state += f" for {', '.join(self.waiting_for)}"
        text = f"job {str(self.job_id)[:8]} {state}: {self.done}/{self.total} steps done"
        if self.error and self.status != JobStatus.DONE:
            text += f": {self.error}"
        return text

    @classmethod
    def of(cls, job_id: uuid.UUID, row: Mapping[str, Any]) -> Progress:
        waits: tuple[str, ...] = ()
        if row["waiting"]:
            texts = [
                wait_text(
                    w["signal"],
                    None if w["until"] is None else datetime.fromisoformat(w["until"]),
                    bool(w["children"]),
                )
                for w in row["waits"]
            ]
            waits = tuple(dict.fromkeys(texts))
        return cls(job_id, JobStatus(row["status"]), waits, row["done"], row["total"], row["error"])


def watch_job(
    settings: Settings,
    job_id: uuid.UUID,
    on_poll: Callable[[Progress], None],
    *,
    poll_s: float = 0.5,
    stop: threading.Event | None = None,
) -> Progress:
    """Poll the job until it ends (or ``stop`` is set), calling ``on_poll`` each time; the last."""
    stop = stop or threading.Event()
    with db.connect(settings, autocommit=True) as conn:
        while True:
            row = store.job_progress(conn, job_id)
            if row is None:
                raise NoSuchJob(job_id)
            progress = Progress.of(job_id, row)
            on_poll(progress)
            if progress.ended or stop.wait(poll_s):
                return progress
