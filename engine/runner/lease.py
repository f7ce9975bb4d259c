"""The heartbeat: renews the lease and the message's visibility while a step runs.

One heartbeat thread accompanies each executor slot and has its own database
connection. Every ``heartbeat_s`` it renews each lease the slot holds (the
step running now, and the step runs claimed with it in one batch that wait
their turn), fenced by owner token (invariant 4), and extends the
deliveries' visibility. When the
database says the lease is gone the step is told to stop (``ctx.check()``
raises) and its commit would be refused anyway (invariant 5). A visibility
extension that fails only means "this copy of the message is lost": the
database lease is the truth, and a redelivered copy finds it held.

A :class:`Lease` is what the heartbeat renews, and only the heartbeat
writes it; the attempt it belongs to (:mod:`engine.runner.attempt`) owns its
timing (:mod:`engine.runner.timing`), which a renewal reads to say whether
its step has started yet, for the run report's timeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import Contention
from engine.infra import logs, metrics
from engine.infra.outage import is_outage
from engine.runner.context import StopSignal
from engine.runner.timing import DbClock, Timing
from engine.store import Claimed, Ran, db
from engine.store.status import EventKind
from engine.transports.base import Transport

__all__ = ["DbClock", "Heartbeat", "Lease"]

log = logging.getLogger(__name__)


@dataclass
class Lease:
    """A claimed step run as the heartbeat sees it: written by the heartbeat alone.

    ``timing`` is its attempt's (:class:`~engine.runner.timing.Timing`), which
    the heartbeat only reads: whether the step started, whether it is finishing.
    """

    claimed: Claimed
    # the delivery it came with; None for an eager successor (no message:
    # the lease alone keeps it, and the sweeper announces it if that lapses)
    receipt: str | None
    timing: Timing = field(default_factory=Timing)
    stop: StopSignal = field(default_factory=StopSignal)
    renewals: int = 0
    copy_lost: bool = False
    next_beat: float = 0.0

    def ran(self) -> Ran | None:
        """When the step ran, for an event of this attempt (:meth:`Timing.ran`)."""
        return self.timing.ran()


class Heartbeat:
    """Renews the leases of one executor slot; :meth:`watch` each while the slot holds it."""

    def __init__(
        self,
        settings: Settings,
        transport: Transport,
        worker: str,
        on_outage: Callable[[BaseException, str], None] | None = None,
    ) -> None:
        self._settings = settings
        self._on_outage = on_outage
        self._transport = transport
        self._worker = worker
        self._lock = threading.Lock()
        self._leases: dict[int, Lease] = {}  # by id(): a Lease is a mutable dataclass
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        # its log lines carry the worker's context, and the step run's while it renews one
        self._thread = threading.Thread(
            target=logs.inheriting(self._run), name=f"heartbeat-{worker}", daemon=True
        )
        self.paused = threading.Event()  # tests: simulate a stalled heartbeat
        self._thread.start()

    def watch(self, lease: Lease) -> None:
        # No wake-up needed (one fewer thread switch per step): the thread is
        # asleep until at most one interval after it last looked, which is no
        # later than this lease's first beat, and it looks again then.
        lease.next_beat = time.monotonic() + self._settings.heartbeat_s
        with self._lock:
            self._leases[id(lease)] = lease

    def unwatch(self, lease: Lease | None = None) -> None:
        """Stop renewing ``lease`` (every lease when ``None``)."""
        with self._lock:
            if lease is None:
                self._leases.clear()
            else:
                self._leases.pop(id(lease), None)

    def watched(self) -> list[Lease]:
        """The leases renewed now (the slot's running step run and those waiting their turn)."""
        with self._lock:
            return list(self._leases.values())

    def _watching(self, lease: Lease) -> bool:
        return self._leases.get(id(lease)) is lease

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=5)
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                # the lease whose beat is due first
                lease = min(self._leases.values(), key=lambda x: x.next_beat, default=None)
            # local monotonic time only paces the renewals; the lease itself
            # is judged by the database clock
            wait = (
                self._settings.heartbeat_s if lease is None else lease.next_beat - time.monotonic()
            )
            if wait > 0:
                self._wake.wait(wait)
                self._wake.clear()
                continue
            assert lease is not None
            lease.next_beat = time.monotonic() + self._settings.heartbeat_s
            if self.paused.is_set():
                continue
            try:
                with logs.step_run(lease.claimed, lease_owner=self._worker):
                    self.beat(lease)
            except Exception as exc:
                if is_outage(exc):
                    # logged once for the whole worker, not once per interval
                    if self._on_outage is not None:
                        self._on_outage(exc, f"heartbeat {self._worker}")
                    log.debug("heartbeat: database unreachable", exc_info=True)
                elif isinstance(exc, Contention):
                    # bounded to one interval (connection()): the next beat tries again
                    log.warning("heartbeat not done (%s); retrying next interval", exc)
                    continue
                else:
                    log.warning("heartbeat failed; retrying next interval", exc_info=True)
                if self._conn is not None:
                    self._conn.close()
                self._conn = None

    def connection(self) -> psycopg.Connection[Any]:
        """The heartbeat's own connection, opened if need be.

        Bounded like every engine connection (TCP keepalives and
        ``tcp_user_timeout``: a dead socket fails a renewal instead of
        blocking it), and tighter: a renewal waits for a lock or runs for at
        most one heartbeat interval, then gives up until the next one.
        """
        if self._conn is None or self._conn.closed:
            bound = self._settings.heartbeat_s
            self._conn = db.connect(
                self._settings,
                autocommit=True,
                lock_timeout_s=min(self._settings.lock_timeout_s, bound),
                statement_timeout_s=min(self._settings.statement_timeout_s, bound),
            )
        return self._conn

    def beat(self, lease: Lease) -> bool:
        """Renew once; ``False`` when the lease is lost (and the step told to stop)."""
        self._conn = self.connection()
        claimed = lease.claimed
        expires = store.lease_extend_if_owner(
            self._conn, claimed.id, claimed.token, self._settings.lease_s
        )
        with self._lock:
            still_ours = self._watching(lease) and not lease.timing.finishing
        if expires is None:
            if still_ours:
                state = store.step_select_status(self._conn, claimed.id)
                if state is not None and state.cancelled:
                    # invariant 16's other side: a cancel reaches the step as a cancel
                    lease.stop.set(
                        f"step run {claimed.id} cancelled (job {state.job_status})", cancelled=True
                    )
                    store.attempt_event_insert(
                        self._conn,
                        EventKind.CANCELLED,
                        claimed,
                        worker=self._worker,
                        ran=lease.ran(),
                        detail={"during": "renewal", "by": "job"},
                    )
                    return False
                lease.stop.set(
                    f"lease on step run {claimed.id} lost (attempt {claimed.attempt})",
                    lease_lost=True,
                )
                metrics.lease_lost(claimed)
                store.step_event_insert(
                    self._conn,
                    EventKind.LEASE_LOST,
                    claimed,
                    worker=self._worker,
                    detail={"during": "renewal"},
                )
            return False
        lease.renewals += 1
        metrics.lease_renewed(claimed)
        # whether its step has started (a batch's step run may still wait its turn), for a
        # live report's timeline: an attempt not ended yet is drawn from its last renewal's
        store.attempt_event_insert(
            self._conn,
            EventKind.RENEWED,
            claimed,
            worker=self._worker,
            ran=lease.ran(),
            detail={"expires_at": expires.isoformat(), "n": lease.renewals},
        )
        if lease.receipt is not None and not lease.copy_lost:
            kept = self._transport.extend([lease.receipt], self._settings.visibility_s)
            lease.copy_lost = lease.receipt not in kept
        return True
