"""What a slot's collaborators share: one frozen value, built once by the slot.

The step runner, the executor, the failures, the park and the group commit
of one executor slot all use the same settings, registry, transport,
connection, heartbeat and alerts, under the slot's name. They take this
one value (:class:`SlotServices`, as procrastinate's ``JobContext``) instead
of each relaying nine keywords to the next; a slot whose connection broke
builds the next one with :meth:`SlotServices.evolve`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.flow.registry import Registry
from engine.runner.lease import Heartbeat
from engine.tracing import NO_TRACES, Traces
from engine.transports.base import Transport

__all__ = ["SlotServices"]


def _always() -> bool:
    return True


@dataclass(frozen=True)
class SlotServices:
    """The services one executor slot's collaborators share (frozen: nobody pokes them)."""

    settings: Settings
    registry: Registry
    transport: Transport
    worker: str  # the slot's name: its leases' owner and its events' worker
    conn: psycopg.Connection[Any]  # the slot's connection (autocommit; steps begin their own)
    heartbeat: Heartbeat
    alerts: AlertRecorder
    # asked before claiming an eager successor (the worker says no once stopping)
    may_continue: Callable[[], bool] = _always
    # told when the database went away under a step (the worker pauses receiving)
    on_outage: Callable[[BaseException, str], None] | None = None
    # each attempt's span (engine.tracing; the no-op one unless tracing is on)
    traces: Traces = NO_TRACES

    def evolve(self, **changes: Any) -> SlotServices:
        """A copy with ``changes`` (a fresh connection after one broke)."""
        return dataclasses.replace(self, **changes)
