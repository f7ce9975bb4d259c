"""The statuses and event kinds of the engine's tables, as enums.

Plain enums with no database library: the write side (submit, the runner)
and the read side (:mod:`engine.store.models`, SQLModel) share them, and a
submit from the ERP's API install needs no ORM. Each enum's values are the
CHECK constraint of its column (``tests/integration/test_schema.py``).
"""

from __future__ import annotations

import enum
from datetime import datetime


class JobStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        """Active jobs hold their fingerprint (one active job per fingerprint)."""
        return self in (JobStatus.PENDING, JobStatus.RUNNING)


class StepStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"  # for a signal or a time: no lease, no attempt held, woken later
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"


def wait_text(signal: str | None, until: datetime | None, children: bool) -> str:
    """What a waiting step run waits for, as people read it: ``signal NAME``,
    ``children`` (either with `` until TIME``), or ``until TIME`` (a sleep)."""
    deadline = f"until {until:%Y-%m-%d %H:%M:%S}" if until else ""
    if children and not signal:
        what = "children"
    elif signal:
        what = f"signal {signal}"
    else:
        return deadline
    return f"{what} {deadline}" if deadline else what


class EventKind(enum.StrEnum):
    SUBMITTED = "submitted"
    PUBLISHED = "published"
    CLAIMED = "claimed"
    CLAIM_REFUSED = "claim_refused"
    RENEWED = "renewed"
    LEASE_LOST = "lease_lost"
    RECLAIMED = "reclaimed"
    RELEASED = "released"
    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    REJECTED = "rejected"  # the step refused its input data (Reject): no dead letter
    CANCELLED = "cancelled"
    FENCED = "fenced"
    MESSAGE_DROPPED = "message_dropped"
    JOB_DONE = "job_done"
    JOB_FAILED = "job_failed"
    REPLAYED = "replayed"
    WAITING = "waiting"  # a step run began to wait (its attempt ended, given back)
    SIGNALLED = "signalled"  # a signal was recorded for the job
    WOKEN = "woken"  # a waiting step run became pending (by its signal or its deadline)


class DeadLetterSource(enum.StrEnum):
    STEP = "step"
    MESSAGE = "message"


class CatchUp(enum.StrEnum):
    """What a schedule fires for times missed while no worker was up."""

    LATEST = "latest"  # the latest missed time, once
    ALL = (
        "all"  # each missed time, up to engine.schedules.calendar.CATCH_UP_LIMIT (the latest ones)
    )


class AlertSource(enum.StrEnum):
    """What an alert is about: a dead step run, a dead message, an orphaned flow version,
    a schedule's time that submitted no job."""

    STEP = "step"
    MESSAGE = "message"
    VERSION = "version"
    SCHEDULE = "schedule"
    RELEASE = "release"  # a step run released at no charge past its bound, then charged


class FireOutcome(enum.StrEnum):
    """What a scheduled time's fire did: submitted its job, or why it has none."""

    JOB = "job"
    REFUSED = "refused"  # the flow said no (its admission check, its parameters)
    ERROR = "error"  # the submit raised


class AuditSource(enum.StrEnum):
    """Where an audited action was taken: the command line, the web console, Python code."""

    CLI = "cli"
    CONSOLE = "console"
    API = "api"


class WorkerStatus(enum.StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
