"""What a running step gets from the engine: annotate a parameter with ``StepContext``.

``ctx.conn`` is the step's fenced transaction: whatever the step writes through
it commits together with its checkpoint, and only if the lease token is still
current (invariant 5). A costing step's rows therefore commit if and only if
its checkpoint does. ``ctx.check()`` raises when the lease was lost or the job
cancelled; long steps call it between chunks of work. ``ctx.wait_for_signal``
and ``ctx.sleep_until`` wait durably, holding no lease (:mod:`engine.waits`).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from engine.errors import JobCancelled, LeaseLost
from engine.flow import register_injectable
from engine.waits import Signal, sleep_until, wait_for_signal


@dataclass
class StopSignal:
    """Set by the heartbeat (lease lost), by cancellation or by shutdown."""

    event: threading.Event = field(default_factory=threading.Event)
    reason: str = ""
    cancelled: bool = False

    def set(self, reason: str, *, cancelled: bool = False) -> None:
        self.reason = reason
        self.cancelled = cancelled
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


@dataclass(frozen=True)
class StepContext:
    """The engine's side of a running step run."""

    conn: psycopg.Connection[Any]
    job_id: uuid.UUID
    step_run_id: uuid.UUID
    step: str
    fanout_key: str
    attempt: int
    max_attempts: int
    fingerprint: str
    worker: str
    stop: StopSignal = field(default_factory=StopSignal, compare=False)

    @property
    def stopping(self) -> bool:
        """True once the step should stop (lease lost, job cancelled, worker shutting down)."""
        return self.stop.is_set()

    def check(self) -> None:
        """Raise :class:`LeaseLost` or :class:`JobCancelled` if the step must stop."""
        if self.stop.is_set():
            if self.stop.cancelled:
                raise JobCancelled(self.stop.reason)
            raise LeaseLost(self.stop.reason)

    def wait_for_signal(self, name: str, timeout: timedelta | None = None) -> Signal:
        """The job's signal ``name`` (its data, sender, time), waiting durably for it.

        If it has not come, the step stops here (nothing it wrote commits), its
        step run waits holding no lease and no attempt, and the step runs again
        from its start when the signal comes. After ``timeout`` (``None``:
        never) that rerun's call raises :class:`~engine.waits.SignalTimeout`.
        """
        return wait_for_signal(self.conn, self.job_id, self.step_run_id, name, timeout)

    def sleep_until(self, until: datetime) -> None:
        """Return once the database clock passed ``until``; wait durably until then.

        Like :meth:`wait_for_signal`: the step stops here and runs again from
        its start once ``until`` has passed (woken by the sweeper).
        """
        sleep_until(self.conn, until)


register_injectable(StepContext)
