"""What the store's statements about waits return: signals, parked step runs, child jobs.

A step run that waits (for a signal, a deadline or its child jobs) and the
rows that wake it are one concept of their own (:mod:`engine.waits`); their
typed rows live here, beside :mod:`engine.store.rows` (claims, checkpoints,
the outbox), and ``tests/integration/test_schema.py`` checks both against the
schema.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.store.status import JobStatus

__all__ = ["ChildOf", "ChildRow", "Parked", "SignalRow", "WaitState", "WaitingForSignal"]


@dataclass(frozen=True)
class SignalRow:
    """A signal as recorded: one per job and name."""

    name: str
    data: Any
    sent_by: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SignalRow:
        return cls(row["name"], row["data"], row["sent_by"], row["created_at"])


@dataclass(frozen=True)
class WaitState:
    """What a step asking for a signal finds: the signal, or whether its wait ran out.

    ``timed_out`` and ``wait_until`` are the wait the step run parked at last;
    ``past`` the deadlines of the waits the step passed before it (``None``:
    that wait returned), in order (see :mod:`engine.waits.wait`).
    """

    signal: SignalRow | None
    timed_out: bool
    wait_until: datetime | None
    past: tuple[datetime | None, ...] = ()


@dataclass(frozen=True)
class Parked:
    """A step run its lease holder parked: ``waiting``, or ``pending`` (its signal had come)."""

    status: str
    wait_signal: str | None
    wait_until: datetime | None


@dataclass(frozen=True)
class WaitingForSignal:
    """A step run of an active job waiting for a signal now, with what its wait published."""

    step_run_id: uuid.UUID
    job_id: uuid.UUID
    flow: str
    params: dict[str, Any]
    submitted_by: str | None
    parent_job_id: uuid.UUID | None
    parent_flow: str | None
    step: str
    fanout_key: str
    signal: str
    since: datetime
    deadline: datetime | None
    summary: dict[str, Any] | None


@dataclass(frozen=True)
class ChildOf:
    """Who submits a child job: the parent job, its step run, the child's key."""

    job_id: uuid.UUID
    step_run_id: uuid.UUID
    key: str


@dataclass(frozen=True)
class ChildRow:
    """A child job as its parent step sees it."""

    id: uuid.UUID
    flow: str
    status: JobStatus
    key: str
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    output: dict[str, Any] | None
    rejected: bool = False  # failed by a step's Reject: the data's decision

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ChildRow:
        return cls(
            row["id"],
            row["flow"],
            JobStatus(row["status"]),
            row["child_key"],
            row["error"],
            row["created_at"],
            row["finished_at"],
            row["output"],
            bool(row.get("rejected", False)),
        )
