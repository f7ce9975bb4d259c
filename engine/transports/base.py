"""The transport interface: at-least-once delivery of step-run ids.

Semantics follow SQS standard queues, so every implementation passes the same
tests: a received message is hidden for ``visibility_s`` and comes back if it
is not deleted in time; the same message may be delivered more than once,
even to two receivers at once; a receipt is new on every receive and only the
latest receipt can delete or extend (a stale receipt is "lost this copy",
never an error). Safety never rests on delivery: the claim in the database
decides who runs a step run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.store.batch import Executes
from engine.transports.message import StepMessage


@dataclass(frozen=True)
class Outgoing:
    """A message to send, hidden for ``delay_s`` seconds first (retries)."""

    message: StepMessage
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    """One delivery of a message. ``receipt`` is opaque and new on every receive."""

    message_id: str
    body: str
    receipt: str
    receive_count: int


@dataclass(frozen=True)
class QueueProbe:
    """What the queue answered to a health check.

    ``visibility_s`` is the queue's own visibility timeout when it has one
    (SQS), ``messages`` how many it holds (approximate on SQS).
    """

    description: str
    messages: int
    visibility_s: float | None = None


class Transport(Protocol):
    """How "step run X is ready" reaches workers.

    ``transactional`` transports (the PostgreSQL queue table) accept the
    caller's connection (or a batch for it) in ``publish`` and ``delete`` and
    join its transaction: the message then exists, or is gone, exactly when
    that transaction commits. Others ignore ``conn`` and act at once.
    """

    name: str
    transactional: bool
    max_delay_s: float  # longest delivery delay it supports (SQS: 900 s)

    def publish(self, conn: Executes | None, messages: Sequence[Outgoing]) -> None:
        """Send ``messages`` (each after its delay)."""
        ...

    def send_raw(self, body: str) -> None:
        """Send a body as is (tests and replays of dead-lettered messages)."""
        ...

    def receive(self, max_messages: int, visibility_s: float, wait_s: float) -> list[Received]:
        """Up to ``max_messages`` visible messages, each hidden for ``visibility_s``.

        Waits up to ``wait_s`` for the first one (long polling); may return
        fewer, or none.
        """
        ...

    def extend(self, receipts: Sequence[str], visibility_s: float) -> set[str]:
        """Hide these deliveries for ``visibility_s`` more, counted from now.

        Returns the receipts that were extended; a receipt missing from the
        result is stale (the message was received again or deleted).
        """
        ...

    def release(self, receipts: Sequence[str]) -> None:
        """Make these deliveries visible again at once (shutdown, backing off)."""
        ...

    def give_back(self, receipts: Sequence[str], after_s: float) -> None:
        """Return these deliveries, visible again after ``after_s`` (0: at once): a
        delivery not handled now through no fault of its message (a lost race, a step run
        held or not due yet, a lease given back). Its receives must not add up to a dead
        letter (SQS sends a worn copy again fresh)."""
        ...

    def delete(self, receipts: Sequence[str], conn: Executes | None = None) -> None:
        """Delete these deliveries; a stale receipt deletes nothing and raises nothing."""
        ...

    def dead_letter(self, received: Received, reason: str) -> None:
        """Move a delivery that can never be handled out of the queue (to the DLQ)."""
        ...

    def probe(self) -> QueueProbe:
        """Ask the queue to answer (``engine worker --check``); raises if it cannot."""
        ...

    def close(self) -> None: ...
