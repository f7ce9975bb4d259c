"""What handling a delivery came to, and the eager successor it may leave behind.

Both are values returned up the runner: the slot's runner reads the
continuation off the outcome, and whoever commits last renders the report
of the job an outcome ended; no module writes another's fields.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from engine.jobs.plan import Outputs
from engine.store.rows import Claimed


@dataclass(frozen=True)
class Outcome:
    """What handling one delivery came to (for logs, tests and metrics)."""

    # done, retried, dead, rejected, fenced, cancelled, waiting, refused, released
    # (not done: a lock wait or deadlock, at no attempt, counted), charged (its free
    # releases spent at its last attempt, its lease left to lapse: the sweeper
    # dead-letters it), dropped, malformed
    kind: str
    detail: str = ""
    step_run_id: uuid.UUID | None = None
    # the eager successor its checkpoint claimed for this slot, to run next
    continuation: Continuation | None = field(default=None, compare=False, repr=False)
    # the job it ended (its report is rendered once that end has committed)
    ended_job: uuid.UUID | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Continuation:
    """An eager successor this slot claimed in its last checkpoint's commit."""

    claimed: Claimed
    known: Outputs  # checkpoints in hand, which spare the successor a read
    # the lease is checked (and renewed) before the successor starts when work
    # outside the commit (an external transport's publish and delete) came between
    check_lease: bool = False
