"""What one simulation did and found, as the page and the console are given it.

The faults are the simulator's own record: the database cannot know them (a
SIGKILL leaves no event), so they are stamped by the database clock to be
drawn on one time axis with the events.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel

__all__ = ["Fault", "FaultKind", "Oracle", "SimRecord"]

FaultKind = Literal["spawn", "kill", "duplicate", "resubmit", "stop"]


class Fault(BaseModel):
    """Something the simulator did to the system, stamped by the database clock."""

    at: datetime
    kind: FaultKind
    worker: str | None = None  # the worker process (``w3``), for spawn, kill and stop
    step_run_id: uuid.UUID | None = None
    detail: str = ""


class Oracle(BaseModel):
    """One oracle of RELIABILITY.md checked by SQL after the run."""

    name: str
    passed: bool
    detail: str


class SimRecord(BaseModel):
    """What the simulator hands to the page besides the database's rows."""

    seed: int
    workers: int
    concurrency: int
    jobs: int
    kill_rate: float
    dup_rate: float
    lease_s: float
    database: str
    faults: list[Fault]
    oracles: list[Oracle]
    timed_out: bool = False
