"""An attempt: one claimed step run, from its claim to its outcome, on one slot.

An :class:`Attempt` is a value made once per claimed step run that is to
run (river's ``jobExecutor``: one per row): the flow and step it runs, its
lease (which the heartbeat alone renews and writes), the outputs it already
knows, and its timing (when its step ran, which it alone writes). The
collaborators of the slot (:mod:`.execution`, :mod:`.failures`, :mod:`.park`,
:mod:`.rounds`) take the attempt rather than ``(flow, step, lease, known)``,
and it records its own events (:meth:`Attempt.record`), each saying when its
step ran. Its ``trace`` (:mod:`engine.tracing`: a no-op unless tracing is on)
is its span: current while its step runs, told each event it records and
how it ended (:meth:`Attempt.ended`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from engine import store
from engine.flow import Flow, Step
from engine.jobs.plan import Outputs
from engine.runner.context import StopSignal
from engine.runner.lease import Lease
from engine.runner.outcome import Outcome
from engine.runner.timing import Timing
from engine.store import Claimed, Ran
from engine.store.status import EventKind
from engine.tracing import NO_TRACE, AttemptTrace

__all__ = ["Attempt"]


@dataclass(frozen=True)
class Attempt:
    """One claimed step run of ``flow.step`` on the slot named ``worker``."""

    flow: Flow
    step: Step
    lease: Lease
    known: Outputs
    worker: str
    trace: AttemptTrace = field(default=NO_TRACE, compare=False)

    @property
    def claimed(self) -> Claimed:
        return self.lease.claimed

    @property
    def timing(self) -> Timing:
        return self.lease.timing

    @property
    def receipt(self) -> str | None:
        """Its delivery; ``None`` for an eager successor (it came with no message)."""
        return self.lease.receipt

    @property
    def stop(self) -> StopSignal:
        return self.lease.stop

    def ran(self) -> Ran | None:
        return self.timing.ran()

    def record(self, conn: psycopg.Connection[Any], kind: EventKind, **detail: Any) -> None:
        """An event of this attempt (``detail`` its detail), with when its step ran."""
        store.attempt_event_insert(
            conn, kind, self.claimed, worker=self.worker, ran=self.ran(), detail=detail
        )
        self.trace.event(kind.value, detail)

    def ended(self, outcome: Outcome) -> None:
        """The attempt came to ``outcome``: its span ends (a lost lease one of its events)."""
        stop = self.stop
        self.trace.ended(
            outcome.kind, outcome.detail, lease_lost=stop.reason if stop.lease_lost else ""
        )
