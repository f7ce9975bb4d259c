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
from engine.infra.outage import Outage, is_outage
from engine.infra.secrets import mask_secrets
from engine.reports.links import report_link
from engine.store import db
from engine.store.rows import ClaimedDelivery

__all__ = ["AlertDispatcher"]

log = logging.getLogger(__name__)

_BATCH = 20


class AlertDispatcher:
    """Sends due alert deliveries of ``sinks``; see the module docstring."""

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
        self.settings = settings
        self.sinks = {sink.name: sink for sink in sinks}
        self.owner = owner
        self.stop = stop if stop is not None else threading.Event()
        self.outage = outage
        self._connect = connect or (lambda: db.connect(settings, autocommit=True))
        self._conn: psycopg.Connection[Any] | None = None
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
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

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            self._conn.autocommit = True
        return self._conn

    # -- the thread ----------------------------------------------------------------------

    def start(self) -> None:
        """Run :meth:`run` in a daemon thread until :attr:`stop` is set."""
        self._thread = threading.Thread(target=self.run, name="alert-dispatcher", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """Dispatch until :attr:`stop` is set; database outages are waited out."""
        try:
            while not self.stop.is_set():
                if self.outage is not None and self.outage.down.is_set():
                    # the worker's main loop probes; look again once it is over
                    self.stop.wait(min(1.0, self.settings.alert_poll_s))
                    continue
                claimed = 0
                try:
                    claimed = self.dispatch_once()
                except Exception as exc:
                    self._close()
                    if is_outage(exc):
                        if self.outage is not None:
                            self.outage.failed(exc, "alert dispatcher")
                    else:
                        log.exception(
                            "alert dispatch failed; next round in %s s", self.settings.alert_poll_s
                        )
                if claimed >= _BATCH:
                    continue  # more may be due
                self._wake.wait(self.settings.alert_poll_s)
                self._wake.clear()
        finally:
            self._close()

    def close(self, timeout_s: float) -> None:
        """Stop the thread (a send in flight ends within its own timeout)."""
        self.stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            if self._thread.is_alive():
                log.warning("alert dispatcher still sending at shutdown; its claim will lapse")

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                log.debug("closing the dispatcher's connection failed", exc_info=True)
            self._conn = None


def _describe(exc: BaseException) -> str:
    """A failed send's reason for the database and the log: no URL, no secret."""
    return mask_secrets(f"{type(exc).__name__}: {exc}")[:500]
