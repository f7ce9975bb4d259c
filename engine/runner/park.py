"""A step that waits: its step run parked, fenced, holding no lease or attempt.

The step raised :class:`~engine.waits.wait.Wait` (its transaction rolled back:
nothing it wrote commits). One transaction then locks the job row (the one
lock order; a signal sent at the same moment serialises on it), moves the
step run from running to ``waiting`` under our lease token (a stale attempt
parks nothing and stores nothing: invariant 16), stores the summary the
step published for its approver (``wait_summary``, also in the ``waiting``
event's detail), gives its attempt back (invariant 14), keeps
its concurrency key's slot (by status: a waiting run has no lease) until it
is claimed again, ends or is cancelled, records the ``waiting`` event and,
on the PostgreSQL transport, deletes the delivery.
Should the awaited signal have been recorded already, the step run goes back
to pending instead and is announced at once.

A wait for child jobs (:mod:`engine.waits.children`) parks in the step's own
transaction instead, which commits: the children the step submitted commit
with the park, or neither does (a lost lease rolls both back).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from engine import store
from engine.errors import LeaseLost
from engine.runner.attempt import Attempt
from engine.runner.failures import Failures
from engine.runner.outcome import Outcome
from engine.store.status import EventKind
from engine.transports.announce import Announced, announce
from engine.waits.wait import Wait

log = logging.getLogger(__name__)


class Park:
    """Parks this slot's step runs that wait; beside the executor, sharing its connection."""

    def __init__(self, failures: Failures) -> None:
        self.failures = failures
        self.conn = failures.conn
        self.transport = failures.transport
        self.worker = failures.worker

    def _parked(self, attempt: Attempt, parked: store.Parked, detail: dict[str, Any]) -> Announced:
        """What follows a park, in its transaction: what it resumes or frees, its event, the ack.

        ``parked`` came back ``pending`` when what it waits for arrived meanwhile:
        it is announced at once. A parked step run keeps its concurrency slot
        (by status, until it is claimed again, ends or is cancelled): the work
        it holds the key for is not finished, so no waiter of the key is
        announced here; whatever ends the wait without a claim (a cancel, its
        job failing, the sweeper) announces them.
        """
        claimed = attempt.claimed
        conn = self.conn
        resumed = parked.status == "pending"
        if resumed:
            announced = announce(
                conn, self.transport, outbox_ids=store.outbox_insert_many(conn, [claimed.id])
            )
        else:
            announced = Announced(self.transport)
        until = parked.wait_until.isoformat() if parked.wait_until else None
        attempt.record(conn, EventKind.WAITING, **detail, until=until, resumed=resumed)
        self.failures.ack_in_commit(attempt, conn)
        return announced

    def wait(self, attempt: Attempt, wait: Wait) -> Outcome:
        claimed = attempt.claimed
        conn = self.conn
        announced = Announced(self.transport)
        with conn.transaction():
            parked = None
            if store.job_lock_if_active(conn, claimed.job_id):
                parked = store.step_wait_if_leased(
                    conn,
                    claimed,
                    signal=wait.signal,
                    timeout_s=wait.timeout_s,
                    until=wait.until,
                    past=wait.past,
                    summary=wait.summary,
                )
            if parked is not None:  # the signal may have come between the step's look and now
                detail: dict[str, Any] = {"signal": parked.wait_signal}
                if wait.summary is not None:
                    # the history keeps what was shown to the approver, whatever comes after
                    detail["summary"] = wait.summary
                announced = self._parked(attempt, parked, detail)
        if parked is None:
            return self.failures.fenced(attempt, f"lease lost before the step could wait: {wait}")
        announced.publish_after_commit(conn)
        self.failures.ack_after_commit(attempt)
        log.info("step run %s (%s) %s", claimed.id, claimed.step, wait)
        return Outcome("waiting", str(wait), claimed.id)

    def wait_children(self, attempt: Attempt, wait: Wait, commit: Callable[[], None]) -> Outcome:
        """Park for the children in the step's open transaction, then ``commit`` it.

        Raises :class:`LeaseLost` (the caller rolls back) when the job is no
        longer active or the lease token changed: the children go too.
        """
        claimed = attempt.claimed
        conn = self.conn
        # the one lock order: the job row, the children rows, then the step run
        if not store.job_lock_if_active(conn, claimed.job_id):
            raise LeaseLost(f"job {claimed.job_id} ended before step run {claimed.id} could wait")
        store.job_lock_children(conn, claimed.id)
        parked = store.step_wait_children_if_leased(
            conn, claimed, timeout_s=wait.timeout_s, past=wait.past
        )
        if parked is None:
            raise LeaseLost(f"lease lost before the step could wait: {wait}")
        # the last child may have ended between the step's look and now
        announced = self._parked(attempt, parked, {"children": True})
        commit()
        announced.publish_after_commit(conn)
        self.failures.ack_after_commit(attempt)
        log.info("step run %s (%s) %s", claimed.id, claimed.step, wait)
        return Outcome("waiting", str(wait), claimed.id)
