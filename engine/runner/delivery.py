"""Delivery: a message in, a claim or a refusal, the message acknowledged as it should be.

A message only says "step run X of job J may be ready"; PostgreSQL decides.
The claim is one conditional statement (invariant 2); losing it is normal,
and each refusal reason leaves the message where the next attempt, or
nobody, will find it (a refusal costs no attempt). A won claim is handed to
the slot's :class:`~engine.runner.execution.Executor`; an eager successor the
executor claimed in its last checkpoint's commit comes back through
:meth:`StepRunner.run_continuation`. A lease this slot cannot use is given
back at once with its attempt (:meth:`StepRunner.give_back`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import psycopg

from engine import faults, store
from engine.alerts import AlertRecorder
from engine.announce import Announced, announce, announce_freed
from engine.config import Settings
from engine.errors import Contention, MalformedMessage, UnknownFlow
from engine.heartbeat import Heartbeat, Lease
from engine.inputs import Outputs
from engine.messages import StepMessage
from engine.registry import Registry
from engine.runner.execution import Executor
from engine.runner.outcome import Continuation, Outcome
from engine.store.rows import Claimed, ClaimRefused
from engine.store.status import EventKind
from engine.transports.base import Outgoing, Received, Transport

log = logging.getLogger(__name__)


def claim(
    conn: psycopg.Connection[Any],
    message: StepMessage,
    worker: str,
    lease_s: float,
    runnable: Sequence[str],
) -> Claimed | ClaimRefused:
    """Claim the step run of ``message`` and commit (invariant 2).

    On an autocommit connection (the worker's) the claim, the job start and
    the claim event are one statement, so one round trip; otherwise they run
    in a transaction of their own. Only jobs of a ``flow:version`` in
    ``runnable`` are claimed (a refusal costs no attempt). Losing is normal:
    zero rows, a serialization failure (SQLSTATE 40001), a deadlock or a lock
    wait past ``lock_timeout`` are all "not claimed".
    """
    try:
        with nullcontext() if conn.autocommit else conn.transaction():
            result = store.step_claim_if_available(
                conn,
                step_run_id=message.step_run_id,
                job_id=message.job_id,
                worker=worker,
                lease_s=lease_s,
                runnable=runnable,
            )
            if isinstance(result, ClaimRefused) and result.reason != "unknown":
                store.event_insert(
                    conn,
                    EventKind.CLAIM_REFUSED,
                    job_id=message.job_id,
                    step_run_id=message.step_run_id,
                    worker=worker,
                    detail={"reason": result.reason}
                    | ({"key": result.key} if result.key is not None else {}),
                )
            return result
    except Contention:
        return ClaimRefused("race")


class StepRunner:
    """Handles deliveries on one executor slot (one connection, one heartbeat)."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: Registry,
        transport: Transport,
        worker: str,
        conn: psycopg.Connection[Any],
        heartbeat: Heartbeat,
        alerts: AlertRecorder,
        may_continue: Callable[[], bool] = lambda: True,
        on_outage: Callable[[BaseException, str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.transport = transport
        self.worker = worker
        self.alerts = alerts
        self.runnable = registry.runnable()
        self.executor = Executor(
            settings=settings,
            registry=registry,
            transport=transport,
            worker=worker,
            conn=conn,
            heartbeat=heartbeat,
            alerts=alerts,
            may_continue=may_continue,
            on_outage=on_outage,
        )

    @property
    def conn(self) -> psycopg.Connection[Any]:
        return self.executor.conn

    @property
    def continuation(self) -> Continuation | None:
        """The eager successor the last checkpoint claimed for this slot, not run yet."""
        return self.executor.continuation

    @continuation.setter
    def continuation(self, value: Continuation | None) -> None:
        self.executor.continuation = value

    @property
    def current(self) -> Lease | None:
        """The lease of the step run executing now, if any."""
        return self.executor.current

    def handle(self, received: Received) -> Outcome:
        try:
            message = StepMessage.decode(received.body)
        except MalformedMessage as exc:
            return self._malformed(received, str(exc))
        result = claim(self.conn, message, self.worker, self.settings.lease_s, self.runnable)
        if isinstance(result, ClaimRefused):
            return self._refused(received, message, result)
        faults.hit("after_claim")
        return self._run(result, received.receipt, {})

    def run_continuation(self) -> Outcome | None:
        """Run the eager successor the last step claimed; ``None`` if there is none."""
        continuation, self.continuation = self.continuation, None
        if continuation is None:
            return None
        claimed = continuation.claimed
        if continuation.check_lease:
            # An external transport's publish and delete came between the
            # commit that claimed it and now, and may have outlasted its lease
            # (invariant 9): renew it, or leave it to whoever reclaimed it.
            expires = store.lease_extend_if_owner(
                self.conn, claimed.id, claimed.token, self.settings.lease_s
            )
            if expires is None:
                return self.executor.fenced(
                    claimed, "eager successor's lease lapsed before it started"
                )
        return self._run(claimed, None, continuation.known)

    def _run(self, claimed: Claimed, receipt: str | None, known: Outputs) -> Outcome:
        try:
            flow = self.registry.get(claimed.flow)
            step = flow.steps[claimed.step]
        except (UnknownFlow, KeyError) as exc:
            # a worker deployed without this flow must not hold it: give it back
            log.error("cannot run %s/%s here: %s", claimed.flow, claimed.step, exc)
            self.give_back(claimed, receipt, reason=f"flow or step not registered here: {exc}")
            return Outcome("refused", f"flow or step not registered: {exc}", claimed.id)
        return self.executor.run(flow, step, claimed, receipt, known)

    def give_back(
        self,
        claimed: Claimed,
        receipt: str | None,
        conn: psycopg.Connection[Any] | None = None,
        *,
        reason: str,
    ) -> bool:
        """Release the lease at once and make the step run visible to other workers.

        The release and its ``released`` event (with ``reason``) commit
        together. A delivery is released; an eager successor, which has none,
        is announced with a new message. ``False``: the lease was lost already.
        """
        conn = conn if conn is not None else self.conn
        freed = Announced(self.transport)
        with conn.transaction():
            # the attempt comes back with the lease: giving back is not the step's fault
            if not store.lease_release_if_owner(conn, claimed.id, claimed.token):
                return False
            store.step_event_insert(
                conn, EventKind.RELEASED, claimed, worker=self.worker, detail={"reason": reason}
            )
            if claimed.concurrency_key is not None:
                freed = announce_freed(conn, self.transport, [claimed.job_id])
        freed.publish_after_commit(conn)
        if receipt is not None:
            self.transport.release([receipt])
        else:
            message = StepMessage(job_id=claimed.job_id, step_run_id=claimed.id)
            self.transport.publish(None, [Outgoing(message)])
        return True

    def _send_round_again(self, received: Received, message: StepMessage, delay_s: float) -> None:
        """Replace the delivery by a fresh copy due after ``delay_s`` (a refusal at no attempt).

        Returning the same copy would count receives, and SQS would move it to
        its dead-letter queue. The copy is an outbox row like any announcement,
        which the sweeper reads as "announced": otherwise it would add a copy
        every ``republish_after_s`` while the step run waits, each refused
        and sent round again. On the PostgreSQL transport the copy and the
        delete commit together; on SQS the delete follows the publish.
        """
        conn = self.conn
        inside = self.transport.transactional
        with conn.transaction():
            outbox_id = store.outbox_insert_after(conn, message.step_run_id, delay_s)
            announced = announce(conn, self.transport, outbox_ids=[outbox_id])
            if inside:
                self.transport.delete([received.receipt], conn)
        announced.publish_after_commit(conn)
        if not inside:
            # a failed publish is relayed by the sweeper: the outbox row is committed
            self.transport.delete([received.receipt])

    def _malformed(self, received: Received, reason: str) -> Outcome:
        with self.conn.transaction():  # the dead letter and its alert commit together
            dead_letter = store.dead_letter_insert_message_logged(
                self.conn, self.worker, received, reason
            )
            alerted = self.alerts.record(self.conn, dead_letter)
        if alerted:
            self.alerts.wake()
        self.transport.dead_letter(received, reason)
        log.warning("malformed message %s dead-lettered: %s", received.message_id, reason)
        return Outcome("malformed", reason)

    def _refused(self, received: Received, message: StepMessage, refused: ClaimRefused) -> Outcome:
        if refused.reason == "unknown":
            with self.conn.transaction():
                store.event_insert(
                    self.conn,
                    EventKind.MESSAGE_DROPPED,
                    worker=self.worker,
                    detail={
                        "reason": "unknown step run",
                        "step_run_id": str(message.step_run_id),
                        "job_id": str(message.job_id),
                    },
                )
            log.info("dropped message for unknown step run %s", message.step_run_id)
            self.transport.delete([received.receipt])
            return Outcome("dropped", "unknown step run", message.step_run_id)
        if refused.reason in ("finished", "waiting"):
            # a waiting step run is announced anew when its signal or deadline wakes it
            self.transport.delete([received.receipt])
        elif refused.reason == "not_runnable":
            # a worker of another deploy (a rolling update) can run it
            self._send_round_again(received, message, self.settings.refusal_delay_s)
        elif refused.reason == "over_limit":
            # Waiting for a slot of its key is not a failure. The delayed copy is a
            # backstop only: a holder of the key that finishes announces the next
            # waiting step run in its own commit, so nobody polls in a tight loop.
            self._send_round_again(received, message, self.settings.over_limit_delay_s)
        elif refused.reason == "race":
            # a lock wait or a deadlock lost to another transaction: soon again
            self.transport.extend([received.receipt], 1.0)
        elif refused.reason == "not_due" and refused.retry_in_s > 0:
            # come back when the backoff ends rather than after a full visibility timeout
            self.transport.extend([received.receipt], min(refused.retry_in_s + 0.5, 43_000))
        elif refused.reason == "held":
            # Leave the copy as a backup should the holder die, but hidden for long:
            # each return counts as a receive, and on SQS too many receives move it
            # to the dead-letter queue while the step is still running. Liveness
            # does not rest on it: the sweeper re-announces an expired lease.
            hide = max(refused.retry_in_s, self.settings.republish_after_s) * 2
            self.transport.extend([received.receipt], min(hide, 43_000))
        # exhausted: leave the copy; the sweeper dead-letters the step run
        return Outcome("refused", refused.reason, message.step_run_id)
