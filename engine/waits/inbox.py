"""The approvals inbox: every step run waiting for a signal now, and what it published.

A step that waits for a signal may publish what the person who sends it
needs to decide (``ctx.wait_for_signal("approve", summary=...)``): a
posting's rejected documents and totals. :func:`awaiting_approval` lists
each such wait of an active job, oldest first, with its job (flow,
parameters, who submitted it), its parent job when it is a child (a close
waiting on its posting), the step, the signal, since when and until when it
waits, and the summary. The console's inbox and ``engine`` tools read it;
it writes nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg
from pydantic import BaseModel

from engine import store

__all__ = ["Awaiting", "awaiting_approval", "awaiting_count"]


class Awaiting(BaseModel):
    """A step run waiting for a signal now: what to decide, on which job, since when."""

    job_id: uuid.UUID
    flow: str
    params: dict[str, Any]
    submitted_by: str | None
    parent_job_id: uuid.UUID | None  # a child job's parent (a close, for its posting)
    parent_flow: str | None
    step_run_id: uuid.UUID
    step: str
    fanout_key: str
    signal: str
    since: datetime  # when it parked (the database clock)
    deadline: datetime | None  # ``None``: it waits for ever
    summary: dict[str, Any] | None  # what the wait published; ``None``: nothing

    @property
    def label(self) -> str:
        """The step as reports name it: ``step`` or ``step[key]`` for a fan-out item."""
        return f"{self.step}[{self.fanout_key}]" if self.fanout_key else self.step


def awaiting_approval(
    conn: psycopg.Connection[Any], limit: int = 100, *, job_id: uuid.UUID | None = None
) -> list[Awaiting]:
    """Every step run of an active job waiting for a signal now, oldest park first.

    At most ``limit`` (at least 1); ``job_id``: only that job's and its child
    jobs' (what a job's page decides on). Read-only: run it on any connection.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return [
        Awaiting(
            job_id=w.job_id,
            flow=w.flow,
            params=w.params,
            submitted_by=w.submitted_by,
            parent_job_id=w.parent_job_id,
            parent_flow=w.parent_flow,
            step_run_id=w.step_run_id,
            step=w.step,
            fanout_key=w.fanout_key,
            signal=w.signal,
            since=w.since,
            deadline=w.deadline,
            summary=w.summary,
        )
        for w in store.step_select_awaiting_signal(conn, limit, job_id)
    ]


def awaiting_count(conn: psycopg.Connection[Any]) -> int:
    """How many step runs of active jobs wait for a signal now (the inbox's size)."""
    return store.step_count_awaiting_signal(conn)
