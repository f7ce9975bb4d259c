"""The alert dispatcher: delivers recorded alerts to the sinks, in every worker.

A thread next to the sweeper. Woken after a commit that recorded an alert,
and otherwise every ``alert_poll_s``, it claims due deliveries of the sinks
this worker has (one conditional UPDATE with a fresh token: of several
dispatchers exactly one gets each), sends each, and records the outcome
under that token: delivered, or failed and due again after a capped
exponential backoff with jitter, or abandoned after ``alert_max_attempts``
sends (logged at ERROR; ``engine alerts retry`` sends it again). A
dispatcher that dies mid-send leaves its claim to lapse; another takes it
over, and the dead one's late outcome is refused.

While PostgreSQL is unreachable it reports the outage to the worker and
waits for the worker's probe to see the database again.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from engine import store
from engine.alerts import Alert, AlertSink
from engine.config import Settings
from engine.flow.retry import RetryPolicy
from engine.infra.background import BackgroundLoop
from engine.infra.outage import Outage
from engine.infra.secrets import mask_secrets
from engine.reports.links import report_link
from engine.store import db
from engine.store.rows import ClaimedDelivery

__all__ = ["AlertDispatcher"]

log = logging.getLogger(__name__)

_BATCH = 20


class AlertDispatcher(BackgroundLoop):
    """Sends due alert deliveries of ``sinks``; see the module docstring."""

    name = "alert dispatcher"

    def __init__(
        self,
        settings: Settings,
        sinks: Sequence[AlertSink],
        *,
        owner: str,
        stop: threading.Event | None = None,
        outage: Outage | None = None,
        connect: Callable[[], psycopg.Connection[Any]] | None = None,
    ) -> None:
        super().__init__(
            settings,
            connect=connect or (lambda: db.connect(settings, autocommit=True)),
            stop=stop,
            outage=outage,
        )
        self.sinks = {sink.name: sink for sink in sinks}
        self.owner = owner
        self._wake = threading.Event()
        self.policy = RetryPolicy(
            max_attempts=settings.alert_max_attempts,
            base_delay_s=settings.alert_retry_base_delay_s,
            max_delay_s=settings.alert_retry_max_delay_s,
        )

    def wake(self) -> None:
        """Look for due deliveries now (an alert was just committed)."""
        self._wake.set()

    # -- one round -----------------------------------------------------------------------

    def dispatch_once(self) -> int:
        """Claim due deliveries, send them, record each outcome; how many were claimed."""
        if not self.sinks:
            return 0
        conn = self._connection()
        claimed = store.alert_delivery_claim_due_many(
            conn,
            owner=self.owner,
            sinks=list(self.sinks),
            limit=_BATCH,
            claim_s=self.settings.alert_claim_s,
        )
        for delivery in claimed:
            if self.stop.is_set():
                break  # the rest lapse and are sent by another worker (or this one, later)
            self._deliver(conn, delivery)
        return len(claimed)

    def _deliver(self, conn: psycopg.Connection[Any], delivery: ClaimedDelivery) -> None:
        sink = self.sinks[delivery.sink]
        alert = Alert.of_delivery(delivery, self._link(delivery.job_id))
        try:
            sink.send(alert)
        except Exception as exc:
            self._failed(conn, delivery, _describe(exc))
            return
        if store.alert_delivery_mark_delivered_if_claimed(conn, delivery):
            log.info("alert %d delivered to %s", delivery.alert_id, delivery.sink)
        else:
            log.warning(
                "alert %d was sent to %s after its claim lapsed (another worker may send it "
                "too; the alert id tells the receiver)",
                delivery.alert_id,
                delivery.sink,
            )

    def _failed(self, conn: psycopg.Connection[Any], delivery: ClaimedDelivery, error: str) -> None:
        delay = self.policy.delay_s(delivery.delivery_attempt)
        status = store.alert_delivery_mark_failed_if_claimed(
            conn,
            delivery,
            error=error,
            delay_s=delay,
            max_attempts=self.settings.alert_max_attempts,
        )
        if status == "abandoned":
            log.error(
                "alert %d abandoned for sink %s after %d sends (last: %s); "
                "`engine alerts retry %d` sends it again",
                delivery.alert_id,
                delivery.sink,
                delivery.delivery_attempt,
                error,
                delivery.alert_id,
            )
        elif status == "pending":
            log.warning(
                "alert %d not delivered to %s (send %d of %d: %s); again in %.1f s",
                delivery.alert_id,
                delivery.sink,
                delivery.delivery_attempt,
                self.settings.alert_max_attempts,
                error,
                delay,
            )
        else:
            log.warning("alert %d: claim lapsed before recording a failed send", delivery.alert_id)

    def _link(self, job_id: uuid.UUID | None) -> str | None:
        if job_id is None:
            return None
        try:
            return report_link(self.settings, job_id)
        except Exception:  # a link is a convenience: never a reason not to alert
            log.debug("no report link for job %s", job_id, exc_info=True)
            return None

    # -- the thread ----------------------------------------------------------------------

    def _interval_s(self) -> float:
        return self.settings.alert_poll_s

    def _turn(self) -> float:
        """Dispatch a batch; the next at once when it was full (more may be due), else wait."""
        return 0.0 if self.dispatch_once() >= _BATCH else self._interval_s()

    def _round_failed(self, exc: Exception) -> None:
        log.exception("alert dispatch failed; next round in %s s", self._interval_s())

    def _pause(self, seconds: float) -> None:
        self._wake.wait(seconds)  # woken early by a commit that recorded an alert, or a stop
        self._wake.clear()

    def close(self, timeout_s: float) -> None:
        """Stop the thread (a send in flight ends within its own timeout)."""
        self.stop.set()  # before the wake: a woken loop must see the stop
        self._wake.set()
        super().close(timeout_s)
        if self._thread is not None and self._thread.is_alive():
            log.warning("alert dispatcher still sending at shutdown; its claim will lapse")


def _describe(exc: BaseException) -> str:
    """A failed send's reason for the database and the log: no URL, no secret."""
    return mask_secrets(f"{type(exc).__name__}: {exc}")[:500]
