"""Refusals: a delivery that is not claimed, left where the next attempt (or nobody) finds it.

A claim refused (:mod:`engine.runner.claim`: unknown, finished, waiting, not
runnable here, over its key's limit, lost to a race, not due, held, exhausted)
costs no attempt: each reason leaves the message as it should be, hidden,
replaced by a delayed copy, or deleted. A message that cannot be decoded is
dead-lettered with its alert.
"""

from __future__ import annotations

import logging

from engine import store
from engine.runner.outcome import Outcome
from engine.runner.services import SlotServices
from engine.store.rows import ClaimRefused
from engine.store.status import EventKind
from engine.transports.announce import announce
from engine.transports.base import Received
from engine.transports.message import StepMessage

__all__ = ["HANDOFF_S", "Refusals"]

log = logging.getLogger(__name__)

# A step run refused here because its flow version is not loaded, while a live worker
# has it loaded: its fresh copy is due after this long (at most ENGINE_REFUSAL_DELAY_S),
# so the refusal never holds it back from that worker, and never spins here.
HANDOFF_S = 1.0


class Refusals:
    """What one slot does with the deliveries it does not run."""

    def __init__(self, services: SlotServices) -> None:
        self.settings = services.settings
        self.transport = services.transport
        self.worker = services.worker
        self.conn = services.conn
        self.alerts = services.alerts

    def _send_round_again(
        self,
        received: Received,
        message: StepMessage,
        delay_s: float,
        *,
        not_runnable: bool = False,
    ) -> None:
        """Replace the delivery by a fresh copy due after ``delay_s`` (a refusal at no attempt).

        ``not_runnable``: its flow version is not loaded here; while a live
        worker has it loaded the copy is due after :data:`HANDOFF_S` instead
        (at most ``delay_s``), so this refusal never hides it from that worker
        (a step run a reclaim announced would wait the whole refusal delay).

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
            if not_runnable:
                outbox_id = store.outbox_insert_after_not_runnable(
                    conn,
                    message.step_run_id,
                    handoff_s=min(HANDOFF_S, delay_s),
                    delay_s=delay_s,
                    live_s=self.settings.worker_live_s,
                )
            else:
                outbox_id = store.outbox_insert_after(conn, message.step_run_id, delay_s)
            announced = announce(conn, self.transport, outbox_ids=[outbox_id])
            if inside:
                self.transport.delete([received.receipt], conn)
        announced.publish_after_commit(conn)
        if not inside:
            # a failed publish is relayed by the sweeper: the outbox row is committed
            self.transport.delete([received.receipt])

    def malformed(self, received: Received, reason: str) -> Outcome:
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

    def refused(self, received: Received, message: StepMessage, refused: ClaimRefused) -> Outcome:
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
            # a worker of another deploy (a rolling update) can run it: at once if one is live
            self._send_round_again(
                received, message, self.settings.refusal_delay_s, not_runnable=True
            )
        elif refused.reason == "over_limit":
            # Waiting for a slot of its key is not a failure. The delayed copy is a
            # backstop only: a holder of the key that finishes announces the next
            # waiting step run in its own commit, so nobody polls in a tight loop.
            self._send_round_again(received, message, self.settings.over_limit_delay_s)
        elif refused.reason == "race":
            # a lock wait or a deadlock lost to another transaction: soon again
            self.transport.give_back([received.receipt], 1.0)
        elif refused.reason == "not_due" and refused.retry_in_s > 0:
            # come back when the backoff ends rather than after a full visibility timeout
            self.transport.give_back([received.receipt], min(refused.retry_in_s + 0.5, 43_000))
        elif refused.reason == "held":
            # Leave the copy as a backup should the holder die, but hidden for long:
            # each return counts as a receive (a worn copy is sent again fresh, due
            # after at most 900 s on SQS). Liveness does not rest on it: the sweeper
            # re-announces an expired lease.
            hide = max(refused.retry_in_s, self.settings.republish_after_s) * 2
            self.transport.give_back([received.receipt], min(hide, 43_000))
        # exhausted: leave the copy; the sweeper dead-letters the step run
        return Outcome("refused", refused.reason, message.step_run_id)
