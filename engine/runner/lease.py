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

A :class:`Lease` is one attempt: it also keeps when its step started and
stopped running (a step run claimed in a batch waits its turn first), which
the events of the attempt record on the database's clock through the slot's
:class:`DbClock` (a renewal says whether it has started yet; the event ending
it, when it ran), for the run report's timeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import Contention
from engine.infra import logs, metrics
from engine.infra.outage import is_outage
from engine.runner.context import StopSignal
from engine.store import Claimed, Ran, db
from engine.store.status import EventKind
from engine.transports.base import Transport

log = logging.getLogger(__name__)


class DbClock:
    """The database's clock as one slot reads it, for when its steps ran (invariant 3).

    One anchor: a moment of the database's clock the slot was told (a claim's
    ``clock_timestamp()``, from its lease's expiry) and the worker's monotonic
    moment just before it sent the claim. A monotonic moment of the slot maps
    onto the database's clock by that one offset, so the moments of one slot
    keep their order exactly (a batch's step runs, one after another, never
    overlap), and no worker's wall clock is used. The anchor errs late, by
    the claim's way there (a few milliseconds at most, so a bar may end a
    little after the event that ended it): of the claims seen, the one that
    errs least is kept (a step run's moments are converted one by one, so
    the anchor only moves between them). It is taken afresh after
    ``refresh_s``, so that drift between the two clocks stays negligible.
    """

    def __init__(self, refresh_s: float = 300.0) -> None:
        self._refresh_s = refresh_s
        self._anchor: tuple[datetime, float] | None = None
        self._taken = 0.0
        self._given: tuple[float, datetime] | None = None  # the latest moment converted
        self._lock = threading.Lock()  # the slot and its heartbeat convert moments

    def saw(self, db_time: datetime, sent: float) -> None:
        """The database's clock read ``db_time`` after the monotonic moment ``sent``."""
        with self._lock:
            if self._anchor is None or sent - self._taken > self._refresh_s:
                self._anchor, self._taken = (db_time, sent), sent
                return
            # the smaller the database's lead over the send, the closer to its true offset
            anchor_db, anchor_mono = self._anchor
            if db_time - timedelta(seconds=sent) < anchor_db - timedelta(seconds=anchor_mono):
                self._anchor = (db_time, sent)

    def claimed(self, claimed: Claimed, lease_s: float, sent: float) -> None:
        """A claim sent at ``sent``: its lease expires ``lease_s`` after its database time."""
        self.saw(claimed.lease_expires_at - timedelta(seconds=lease_s), sent)

    def at(self, mono: float) -> datetime | None:
        """``mono`` (a monotonic moment) on the database's clock; ``None``: no anchor yet.

        A better anchor moves the offset back by the error it saves (tens of
        milliseconds on a loaded machine): a moment later than one already
        given is never put before it, so the bars of one slot never overlap.
        """
        with self._lock:
            if self._anchor is None:
                return None
            db_time, anchor = self._anchor
            at = db_time + timedelta(seconds=mono - anchor)
            if self._given is not None and mono >= self._given[0]:
                at = max(at, self._given[1])
                self._given = (mono, at)
            elif self._given is None:
                self._given = (mono, at)
            return at


@dataclass
class Lease:
    """A claimed step run as the heartbeat sees it."""

    claimed: Claimed
    # the delivery it came with; None for an eager successor (no message:
    # the lease alone keeps it, and the sweeper announces it if that lapses)
    receipt: str | None
    stop: StopSignal = field(default_factory=StopSignal)
    # set just before the checkpoint: a failed renewal then is the commit
    # itself having cleared the token, not a lost lease
    finishing: bool = False
    renewals: int = 0
    copy_lost: bool = False
    next_beat: float = 0.0
    # when its step started and stopped running on this slot (monotonic): a step
    # run claimed in a batch waits its turn first, and the timeline must not
    # draw that wait as running (the event ending the attempt records them)
    started: float | None = None
    stopped: float | None = None
    clock: DbClock | None = None  # its slot's, which turns those onto the database's clock

    def ran(self) -> Ran | None:
        """When the step ran, for an event of this attempt; ``None``: no clock to tell it."""
        if self.clock is None:
            return None
        if self.started is None:
            return Ran()
        started_at = self.clock.at(self.started)
        if started_at is None:
            return None
        ran_s = None if self.stopped is None else max(self.stopped - self.started, 0.0)
        return Ran(started_at, ran_s)


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
            still_ours = self._watching(lease) and not lease.finishing
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
                lease.stop.set(f"lease on step run {claimed.id} lost (attempt {claimed.attempt})")
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
