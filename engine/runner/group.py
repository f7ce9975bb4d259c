"""Group commit: the checkpoints of several step runs on one slot share one COMMIT.

A slot that holds several claimed step runs at once (a batch of deliveries
claimed in one statement, or the eager successors their checkpoints claimed)
runs them one after another inside one transaction, each in a savepoint of its
own: a step that raises, is fenced or waits rolls back its own writes and
nothing of a neighbour's, and each checkpoint is still guarded by its own
lease token (invariant 5). The transaction commits once the group is done,
or earlier:

- before a step this worker has not yet seen finish within the window
  (``ENGINE_GROUP_COMMIT_MS``, by its median of recent runs), or once the
  group has been open that long, so a long step (a store's costing) never
  keeps its neighbours' checkpoints, and their jobs' row locks, uncommitted;
- before any outcome other than a checkpoint (a retry, a dead letter, a
  cancel, a wait, a fence), which then runs exactly as it would alone.

What a checkpoint does after its commit (relaying the outbox to an external
queue, deleting its delivery there, rendering a finished job's report) waits
for the group's commit; the deliveries of a group are deleted in one call.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import psycopg

from engine.transports.announce import Announced
from engine.transports.base import Transport

log = logging.getLogger(__name__)

_SAMPLES = 16  # recent durations kept per step


class StepTimes:
    """How long each step took on this worker lately (its median decides grouping)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], deque[float]] = {}

    def record(self, flow: str, step: str, seconds: float) -> None:
        self._seen.setdefault((flow, step), deque(maxlen=_SAMPLES)).append(seconds)

    def typical(self, flow: str, step: str) -> float | None:
        """The median of the recent runs; ``None``: never seen finishing here."""
        samples = self._seen.get((flow, step))
        return statistics.median(samples) if samples else None


class GroupCommit:
    """One slot's open transaction, shared by the checkpoints of quick steps."""

    def __init__(
        self, conn: psycopg.Connection[Any], transport: Transport, window_s: float
    ) -> None:
        self.conn = conn
        self.transport = transport
        self.window_s = window_s
        self.times = StepTimes()
        self._transaction: ExitStack | None = None
        self._opened_at = 0.0
        self._announced = Announced(transport)
        self._receipts: list[str] = []
        self._deferred: list[Callable[[], None]] = []

    @property
    def open(self) -> bool:
        return self._transaction is not None

    def quick(self, flow: str, step: str) -> bool:
        """May this step join a group: seen finishing within the window here lately?"""
        if self.window_s <= 0:
            return False
        typical = self.times.typical(flow, step)
        return typical is not None and typical <= self.window_s

    def begin(self) -> None:
        """Open the group's transaction; one open for the whole window commits first."""
        if self._transaction is not None:
            if time.monotonic() - self._opened_at < self.window_s:
                return
            self.commit()
        transaction = ExitStack()
        transaction.enter_context(self.conn.transaction())
        self._transaction = transaction
        self._opened_at = time.monotonic()

    def after_commit(
        self,
        announced: Announced | None = None,
        receipt: str | None = None,
        then: Callable[[], None] | None = None,
    ) -> None:
        """What a member's checkpoint leaves for after the group's commit."""
        if announced is not None:
            self._announced += announced
        if receipt is not None and not self.transport.transactional:
            self._receipts.append(receipt)
        if then is not None:
            self._deferred.append(then)

    def commit(self) -> None:
        """COMMIT the group (if open), then relay, delete and run what it deferred."""
        transaction, self._transaction = self._transaction, None
        if transaction is None:
            return
        announced, self._announced = self._announced, Announced(self.transport)
        receipts, self._receipts = self._receipts, []
        deferred, self._deferred = self._deferred, []
        if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            # a statement failed outside every step's savepoint (reading a step's
            # inputs): nothing of the group can commit; its step runs are run
            # again once their leases lapse, as after a crash
            transaction.__exit__(psycopg.Rollback, psycopg.Rollback(), None)
            log.warning(
                "a group commit was rolled back (a statement failed outside the steps' "
                "savepoints); its step runs run again once their leases lapse"
            )
            return
        transaction.close()  # COMMIT
        announced.publish_after_commit(self.conn)
        if receipts:
            try:
                self.transport.delete(receipts)
            except Exception:
                # committed: a copy left behind is refused as finished when it returns
                log.warning("delete after the group's commit failed", exc_info=True)
        for action in deferred:
            action()

    def rollback(self) -> None:
        """Roll the group back: nothing of it commits, and what it deferred is dropped."""
        transaction, self._transaction = self._transaction, None
        self._announced = Announced(self.transport)
        self._receipts = []
        self._deferred = []
        if transaction is not None:
            transaction.__exit__(psycopg.Rollback, psycopg.Rollback(), None)

    def abandon(self) -> None:
        """Forget the group after its connection broke: nothing of it committed."""
        self._transaction = None
        self._announced = Announced(self.transport)
        self._receipts = []
        self._deferred = []
