"""Group commit: the checkpoints of several step runs on one slot share one COMMIT.

A slot that holds several claimed step runs at once (a batch of deliveries
claimed in one statement, or the eager successors their checkpoints claimed)
runs them one after another inside one transaction, each in a savepoint of its
own: a step that raises, is fenced or waits rolls back its own writes and
nothing of a neighbour's, and each checkpoint is still guarded by its own
lease token (invariant 5). The transaction commits once the group is done,
or earlier, so that it is bounded by time, not by a typical run:

- a step joins a group only if every one of its recent runs on this worker
  (:class:`StepTimes`, the last 16) finished within the window
  (``ENGINE_GROUP_COMMIT_MS``): its worst, not its median, so a step that is
  quick as a rule but slow now and then commits on its own;
- the group commits before a step whose worst recent run, added to the time
  the group has been open, would pass the window, so a long step (a store's
  costing) never keeps its neighbours' checkpoints, and their jobs' row
  locks, uncommitted;
- a step run holding a concurrency key never joins a group: the group commits
  before it, and its checkpoint commits alone. A keyed checkpoint holds its
  key's lock until its commit (a claim of the key waits for it:
  ``engine_concurrency_hold``), so it must never wait for a neighbour;
- before any outcome other than a checkpoint (a retry, a dead letter, a
  cancel, a wait, a fence), which then runs exactly as it would alone.

A step slower this time than every one of its recent runs still delays its
neighbours' commit by its overrun: their leases may lapse meanwhile, and a
worker reclaiming them waits for their job rows (locked by their
checkpoints) and finds them done once the group commits; a key's claim
never waits for one, since no keyed checkpoint is in a group.

What a checkpoint does after its commit (relaying the outbox to an external
queue, deleting its delivery there, rendering a finished job's report) waits
for the group's commit; the deliveries of a group are deleted in one call.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import psycopg

from engine.transports.announce import Announced
from engine.transports.base import Transport

if TYPE_CHECKING:
    from engine.runner.attempt import Attempt

log = logging.getLogger(__name__)

_SAMPLES = 16  # recent durations kept per step


class StepTimes:
    """How long each step took on this worker lately (its worst decides grouping)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], deque[float]] = {}

    def record(self, flow: str, step: str, seconds: float) -> None:
        self._seen.setdefault((flow, step), deque(maxlen=_SAMPLES)).append(seconds)

    def worst(self, flow: str, step: str) -> float | None:
        """The longest of the recent runs; ``None``: never seen finishing here."""
        samples = self._seen.get((flow, step))
        return max(samples) if samples else None


class GroupCommit:
    """One slot's open transaction, shared by the checkpoints of quick steps."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        transport: Transport,
        window_s: float,
        give_back: Callable[[list[Attempt]], None] | None = None,
    ) -> None:
        self.conn = conn
        self.transport = transport
        self.window_s = window_s
        self.times = StepTimes()
        # what releases, at no charge, the step runs a lost group had checkpointed
        self._give_back = give_back
        self._checkpointed: list[Attempt] = []
        # step runs of a group that was rolled back (their eager successors too):
        # none of them exists as the group left it, so none is to be run now
        self.lost: set[uuid.UUID] = set()
        self._successors: list[uuid.UUID] = []
        self._transaction: ExitStack | None = None
        self._opened_at = 0.0
        self._announced = Announced(transport)
        self._receipts: list[str] = []
        self._deferred: list[Callable[[], None]] = []

    @property
    def open(self) -> bool:
        return self._transaction is not None

    def quick(self, flow: str, step: str) -> bool:
        """May this step join a group: every recent run here finished within the window?"""
        if self.window_s <= 0:
            return False
        worst = self.times.worst(flow, step)
        return worst is not None and worst <= self.window_s

    def begin(self, flow: str, step: str) -> None:
        """Open the group's transaction for a run of ``flow.step``, or keep it open.

        A group open so long that this step's worst recent run would take it
        past the window commits first, and a new one opens. (One whose transaction
        a failed statement aborted is rolled back by the executor before a step
        starts in it: :meth:`commit`.)
        """
        if self._transaction is not None:
            worst = self.times.worst(flow, step) or self.window_s
            if time.monotonic() - self._opened_at + worst <= self.window_s:
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
        attempt: Attempt | None = None,
        successor: uuid.UUID | None = None,
    ) -> None:
        """What a member's checkpoint leaves for after the group's commit.

        ``attempt``: the member whose checkpoint waits for this commit, given back
        (at no charge) should the group be rolled back; ``successor``: the eager
        successor its checkpoint claimed, which is then lost with it.
        """
        if attempt is not None:
            self._checkpointed.append(attempt)
        if successor is not None:
            self._successors.append(successor)
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
        checkpointed, self._checkpointed = self._checkpointed, []
        successors, self._successors = self._successors, []
        if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            # a statement failed outside every step's savepoint: nothing of the
            # group can commit. Not its members' fault: each is given back with
            # its attempt and runs again at once (their successors never existed)
            transaction.__exit__(psycopg.Rollback, psycopg.Rollback(), None)
            self.lost.update(successors)
            log.warning(
                "a group commit was rolled back (a statement failed outside the steps' "
                "savepoints); its %d step run(s) go again at no charge",
                len(checkpointed),
            )
            if self._give_back is not None and checkpointed:
                self._give_back(checkpointed)
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
        self._checkpointed = []
        self._successors = []
        if transaction is not None:
            transaction.__exit__(psycopg.Rollback, psycopg.Rollback(), None)

    def abandon(self) -> None:
        """Forget the group after its connection broke: nothing of it committed."""
        self._transaction = None
        self._announced = Announced(self.transport)
        self._receipts = []
        self._deferred = []
        self._checkpointed = []
        self._successors = []
