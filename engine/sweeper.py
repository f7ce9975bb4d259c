"""The sweeper: liveness never depends on a message surviving (invariant 9).

Runs inside every worker, every ``sweep_interval_s``; safe with several at
once (an advisory lock lets one of them do the republishing per round, and
the relay hands each outbox row on once via SKIP LOCKED). Each round:

1. step runs whose worker died during their last allowed attempt are dead:
   dead-lettered, their job failed (its other step runs cancelled), an alert
   raised; step runs still active under a job that ended are cancelled, so
   nothing rests in a state no worker will ever leave (invariant 13);
2. claimable step runs (due, or running with an expired lease) that were not
   announced since they became claimable get a new outbox row;
3. the outbox is relayed: rows never published (a crash between commit and
   publish) and due retries reach the transport.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from engine import store
from engine.alerts import Alert, AlertSink
from engine.announce import announce
from engine.config import Settings
from engine.outbox import relay
from engine.store.status import EventKind, JobStatus
from engine.transports.base import Received, Transport

log = logging.getLogger(__name__)

_RELAY_BATCH = 500
_RELAY_ROUNDS = 20  # bound one sweep; the next sweep continues


@dataclass(frozen=True)
class SweepReport:
    dead: int = 0
    announced: int = 0
    published: int = 0
    cancelled: int = 0  # step runs left active under ended jobs


class Sweeper:
    def __init__(
        self, settings: Settings, transport: Transport, worker: str, alert: AlertSink
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.worker = worker
        self.alert = alert

    def sweep(self, conn: psycopg.Connection[Any]) -> SweepReport:
        alerts: list[Alert] = []
        announced: list[int] = []
        dead = []
        orphans = 0
        with conn.transaction():
            if store.sweep_lock_try(conn):
                dead = store.step_dead_if_expired_exhausted_many(conn)
                for d in dead:
                    reason = f"lease expired during the last allowed attempt ({d.attempts})"
                    if store.dead_letter_insert_step(
                        conn, job_id=d.job_id, step_run_id=d.id, reason=reason, error=None
                    ):
                        alerts.append(Alert(reason, d.job_id, d.id, None, d.step))
                    store.event_insert(
                        conn,
                        EventKind.DEAD_LETTERED,
                        job_id=d.job_id,
                        step_run_id=d.id,
                        worker=self.worker,
                        attempt=d.attempts,
                        detail={"reason": reason, "by": "sweeper"},
                    )
                    if store.job_finish_if_active(
                        conn, d.job_id, JobStatus.FAILED, f"step {d.step}: {reason}"
                    ):
                        store.event_insert(
                            conn, EventKind.JOB_FAILED, job_id=d.job_id, worker=self.worker
                        )
                        store.step_cancel_by_job(conn, d.job_id)
                for c in store.step_cancel_if_job_ended_many(conn):
                    orphans += 1
                    store.event_insert(
                        conn,
                        EventKind.CANCELLED,
                        job_id=c.job_id,
                        step_run_id=c.id,
                        worker=self.worker,
                        attempt=c.attempts,
                        detail={"reason": "its job had ended", "by": "sweeper"},
                    )
                announced = store.outbox_insert_for_claimable(
                    conn, republish_after_s=self.settings.republish_after_s, limit=1000
                )
                # an external queue's rows are sent by the relay below, after the commit
                announce(conn, self.transport, outbox_ids=announced)
        for alert in alerts:
            self.alert(alert)
        self._drain_transport_dead_letters(conn)
        published = 0
        for _ in range(_RELAY_ROUNDS):
            n = relay(conn, self.transport, limit=_RELAY_BATCH)
            published += n
            if n < _RELAY_BATCH:
                break
        if dead or announced or orphans:
            log.info(
                "sweep: %d dead, %d re-announced, %d published, %d left under ended jobs cancelled",
                len(dead),
                len(announced),
                published,
                orphans,
            )
        return SweepReport(len(dead), len(announced), published, orphans)

    def _drain_transport_dead_letters(self, conn: psycopg.Connection[Any]) -> None:
        """Record what the queue itself dead-lettered (SQS redrive), once each, with an alert."""
        drain = getattr(self.transport, "drain_dead_letters", None)
        if not callable(drain):
            return

        def record(received: Received, reason: str) -> None:
            store.dead_letter_insert_message_logged(conn, self.worker, received, reason)
            self.alert(Alert(reason=f"message {received.message_id}: {reason}"))

        drain(record)
