"""The worker: receive deliveries, run step runs on N executor slots, sweep.

The main thread receives in batches (no more than there are idle slots) and
runs the sweeper every ``sweep_interval_s`` (a thread of its own fires due
schedules as often, :mod:`engine.schedules.firer`, and another retires
finished jobs past their retention, :mod:`engine.worker.pruner`); a slot that finishes a step first
tries to receive its next message itself, without waiting, and hands itself
back to the main thread only when none is visible. Each executor slot is a thread
with its own connection and its own heartbeat (:mod:`engine.worker.slot`). On SIGTERM or SIGINT
(invariant 12) the worker stops receiving, gives back deliveries it had not
started, lets running steps finish within ``shutdown_grace_s``, then releases
the leases of those still running and makes their messages visible at once,
so another worker picks them up without waiting for a lease to expire.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import socket
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

import psycopg

from engine import store, tracing
from engine.alerts import AlertRecorder, AlertSink
from engine.alerts.dispatch import AlertDispatcher
from engine.alerts.sinks import sinks_for
from engine.config import Settings
from engine.errors import ConfigError, Contention
from engine.flow.registry import Registry
from engine.infra import logs
from engine.infra.background import LoopWiring
from engine.infra.outage import Outage, is_outage
from engine.runner import Outcome
from engine.schedules.firer import ScheduleFirer
from engine.store import db
from engine.transports import transport_for
from engine.transports.base import Received, Transport
from engine.transports.outbox import RelayListener
from engine.worker.pruner import Pruner
from engine.worker.roster import Roster
from engine.worker.slot import Slot
from engine.worker.sweeper import Sweeper

log = logging.getLogger(__name__)

_RECEIVE_BATCH = 10  # SQS's limit per receive


def check_startup(settings: Settings, queue_visibility_s: float | None = None) -> None:
    """Invariant 6: heartbeat < lease and heartbeat < visibility, or refuse to start."""
    visibility = queue_visibility_s if queue_visibility_s is not None else settings.visibility_s
    if settings.heartbeat_s < settings.lease_s and settings.heartbeat_s < visibility:
        return
    raise ConfigError(
        f"refusing to start: heartbeat interval {settings.heartbeat_s:g} s must be shorter than "
        f"the lease duration {settings.lease_s:g} s and the queue visibility timeout "
        f"{visibility:g} s; change ENGINE_HEARTBEAT_S, ENGINE_LEASE_S or ENGINE_VISIBILITY_S"
    )


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def connect_worker(settings: Settings) -> psycopg.Connection[Any]:
    """A connection whose statements, lock waits and idle transactions are bounded.

    Statements and lock waits are bounded on every engine connection
    (:func:`engine.store.db.conninfo`). A zombie (a worker paused past its
    lease) cannot commit thanks to fencing, but its open transaction would
    still hold row locks; the server ends it after
    ``idle_in_transaction_timeout_s`` so the new owner is not blocked.
    """
    options = (
        "-c idle_in_transaction_session_timeout="
        f"{int(settings.idle_in_transaction_timeout_s * 1000)}"
    )
    return db.connect(settings, options=options)


class Worker:
    """``engine worker``: see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        *,
        transport: Transport | None = None,
        alert_sinks: Sequence[AlertSink] | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        # a sink configured without its setting refuses to start (before any queue call)
        sinks = list(alert_sinks) if alert_sinks is not None else sinks_for(settings)
        self.transport = transport or transport_for(settings)
        self.worker_id = worker_id or settings.worker_id or default_worker_id()
        self.inbox: queue.Queue[list[Received] | None] = queue.Queue()
        self.stop_event = threading.Event()
        self.outcomes: dict[str, int] = {}
        # shared by every loop: set while PostgreSQL is unreachable (no receiving then)
        self.outage = Outage(settings.outage_backoff_max_s)
        # its background loops stop with it, wait out its outages, connect with its role
        wiring = LoopWiring(
            stop=self.stop_event, outage=self.outage, connect=lambda: connect_worker(settings)
        )
        self.dispatcher = AlertDispatcher(settings, sinks, owner=self.worker_id, **wiring)
        # dead letters and their alerts commit together; the dispatcher is woken after
        self.alerts = AlertRecorder([sink.name for sink in sinks], wake=self.dispatcher.wake)
        self.schedules = ScheduleFirer(
            settings,
            registry,
            worker=self.worker_id,
            transport=self.transport,
            alerts=self.alerts,
            **wiring,
        )
        self.pruner = Pruner(settings, registry, **wiring)
        # engine_workers: what this worker runs, seen at every sweep (engine flows show)
        self.roster = Roster(settings, self.worker_id, registry.runnable())
        self._free = threading.Condition()
        self._idle = settings.concurrency
        self._slots: list[Slot] = []

    # -- bookkeeping used by the slots -------------------------------------------------

    def outcome(self, outcome: Outcome) -> None:
        with self._free:
            self.outcomes[outcome.kind] = self.outcomes.get(outcome.kind, 0) + 1

    def slot_freed(self) -> None:
        with self._free:
            self._idle += 1
            self._free.notify_all()

    # -- life cycle --------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        def stop(signum: int, _frame: FrameType | None) -> None:
            log.warning("%s received: stopping", signal.Signals(signum).name)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def run(self) -> int:
        """Run until :attr:`stop_event` is set; returns the process exit code (0).

        Configuration errors refuse to start (invariant 6); an unreachable
        database or queue does not: start-up waits for them (invariant 15).
        """
        # this thread's lines and the threads it starts; unbound when run returns
        with logs.bound(worker=self.worker_id):
            return self._run()

    def _run(self) -> int:
        check_startup(self.settings, self._queue_visibility())
        # traced (the OTEL_* settings), its exporter process is started now, not at the
        # first claim; a bad setting refuses to start
        tracing.enabled()
        if not self._wait_for_database("start-up"):
            return 0
        self._register()
        # each slot connects as the worker does: statements and lock waits bounded
        self._slots = [
            Slot(self, i, connect=lambda: connect_worker(self.settings))
            for i in range(self.settings.concurrency)
        ]
        for slot in self._slots:
            slot.thread.start()
        self.dispatcher.start()
        self.schedules.start()
        self.pruner.start()
        listener: RelayListener | None = None
        if not self.transport.transactional:
            listener = RelayListener(
                self.settings,
                self.transport,
                on_outage=self.outage.failed,
                outage_over=lambda: not self.outage.down.is_set(),
            )
            listener.start()
        log.info("worker %s started with %d slots", self.worker_id, len(self._slots))
        try:
            self._main_loop()
        finally:
            if listener is not None:
                listener.close()
            self._shutdown()
        return 0

    def _queue_visibility(self) -> float | None:
        """The visibility the worker can count on: the configured one, or the queue's if shorter."""
        read_visibility = getattr(self.transport, "queue_visibility_s", None)
        if not callable(read_visibility):
            return None
        backoff = _Backoff(self.settings.outage_backoff_max_s)
        while True:
            try:
                return min(self.settings.visibility_s, float(read_visibility()))
            except Exception as exc:
                if self.stop_event.is_set():
                    return None
                backoff.failed("reading the queue's visibility timeout", exc)
                self.stop_event.wait(backoff.next_s())

    def _register(self) -> None:
        try:
            with connect_worker(self.settings) as conn:
                conn.autocommit = True
                self.roster.register(conn)
        except Exception as exc:
            if not is_outage(exc):
                raise
            # the first beat writes the row once the database is back
            self.outage.failed(exc, "registration")

    def _probe(self) -> None:  # one round trip: can a new connection run a statement?
        with db.connect(self.settings, autocommit=True) as conn:
            store.server_ping(conn)

    def _wait_for_database(self, where: str) -> bool:
        """``True`` once PostgreSQL answers; ``False`` if the worker was stopped first."""
        if not self.outage.down.is_set():
            try:
                self._probe()
                return True
            except Exception as exc:
                if not is_outage(exc):
                    raise  # a refused role or a bad setting: exit with its message
                self.outage.failed(exc, where)
        return self.outage.wait(self._probe, self.stop_event)

    def _main_loop(self) -> None:
        sweeper = Sweeper(self.settings, self.transport, self.worker_id, self.alerts, self.registry)
        sweep_conn: psycopg.Connection[Any] | None = None
        receive_backoff = _Backoff(self.settings.outage_backoff_max_s)
        next_sweep = 0.0
        # the beat keeps this worker live (seen within worker_live_s) however rare sweeps are
        beat_s = min(self.settings.sweep_interval_s, self.settings.worker_live_s / 4)
        next_beat = 0.0
        try:
            while not self.stop_event.is_set():
                if self.outage.down.is_set():
                    # receive nothing while claims cannot be made: on SQS each
                    # receive would count towards the redrive to the DLQ
                    if not self._wait_for_database("outage"):
                        return
                    next_sweep = 0.0  # leases ran out meanwhile: sweep at once
                    continue
                now = time.monotonic()
                if now >= next_sweep or now >= next_beat:
                    sweeping = now >= next_sweep
                    next_beat = now + beat_s
                    if sweeping:
                        next_sweep = now + self.settings.sweep_interval_s
                    try:
                        if sweep_conn is None or sweep_conn.closed:
                            sweep_conn = connect_worker(self.settings)
                            sweep_conn.autocommit = True
                        self.roster.beat(sweep_conn)
                        if sweeping:
                            sweeper.sweep(sweep_conn)
                    except Exception as exc:
                        if sweep_conn is not None:
                            sweep_conn.close()
                        sweep_conn = None
                        if is_outage(exc):
                            self.outage.failed(exc, "sweeper")
                            continue
                        if isinstance(exc, Contention):
                            # a lock wait past lock_timeout: a normal race, not a bug
                            log.warning(
                                "sweep not done (%s); next round in %s s",
                                str(exc).strip().splitlines()[0],
                                self.settings.sweep_interval_s,
                            )
                        else:
                            log.exception(
                                "sweep failed; next round in %s s", self.settings.sweep_interval_s
                            )
                with self._free:
                    if self._idle == 0:
                        self._free.wait(timeout=min(1.0, self.settings.sweep_interval_s))
                        continue
                    idle = self._idle
                    room = min(idle, _RECEIVE_BATCH)
                due = min(next_sweep, next_beat) - time.monotonic()
                wait = max(0.0, min(self.settings.poll_wait_s, due))
                try:
                    batch = self.transport.receive(room, self.settings.visibility_s, wait)
                except Exception as exc:
                    if is_outage(exc):
                        self.outage.failed(exc, "receive")
                        continue
                    receive_backoff.failed("receive", exc)
                    self.stop_event.wait(receive_backoff.next_s())
                    continue
                receive_backoff.succeeded()
                # shared out evenly between the idle slots, each share claimed at once
                shares = [batch[i::idle] for i in range(min(idle, len(batch)))]
                with self._free:
                    self._idle -= len(shares)
                for share in shares:
                    self.inbox.put(share)
        finally:
            if sweep_conn is not None:
                sweep_conn.close()

    def _shutdown(self) -> None:
        # deliveries received but not started go back at once
        pending: list[str] = []
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                pending.extend(r.receipt for r in item)
                self.slot_freed()
        if pending:
            try:
                self.transport.release(pending)
            except Exception:
                log.warning("could not release %d unstarted deliveries", len(pending))
        for _ in self._slots:
            self.inbox.put(None)
        deadline = time.monotonic() + self.settings.shutdown_grace_s
        for slot in self._slots:
            slot.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [s for s in self._slots if s.thread.is_alive()]
        if stuck:
            try:
                self._release(stuck)
            except Exception:
                # the database is gone: those leases lapse and the sweeper announces them
                log.warning("could not release %d step run(s) at shutdown", len(stuck))
        for slot in self._slots:
            slot.heartbeat.close()
            if slot.runner is not None and not slot.thread.is_alive():
                slot.runner.conn.close()
        self.dispatcher.close(max(1.0, deadline - time.monotonic()))
        self.schedules.close(max(1.0, deadline - time.monotonic()))
        self.pruner.close(max(1.0, deadline - time.monotonic()))
        try:
            with db.connect(self.settings, autocommit=True) as conn:
                self.roster.stop(conn)
        except Exception:
            # the database is gone: the row stops being seen and ages out of "live"
            log.warning("could not mark worker %s stopped", self.worker_id)
        log.info("worker %s stopped", self.worker_id)

    def _release(self, stuck: list[Slot]) -> None:
        """Give back the leases of steps that did not finish within the grace period."""
        with db.connect(self.settings, autocommit=True) as conn:
            for slot in stuck:
                runner = slot.runner
                if runner is None:
                    continue
                # the step running and those of its batch waiting their turn
                for lease in runner.held():
                    claimed = lease.claimed
                    lease.stop.set("worker shutting down")
                    if runner.give_back(lease, conn, reason="shutdown grace period over"):
                        log.warning("released step run %s at shutdown", claimed.id)


class _Backoff:
    """Capped exponential backoff with jitter for a loop whose calls fail; logs once per run."""

    def __init__(self, max_s: float, initial_s: float = 0.5) -> None:
        self._max_s = max_s
        self._initial_s = initial_s
        self._failures = 0

    def failed(self, what: str, exc: BaseException) -> None:
        if self._failures == 0:
            log.error("%s failed (%s); retrying with backoff", what, str(exc).strip()[:300])
        self._failures += 1

    def succeeded(self) -> None:
        if self._failures:
            log.warning("working again after %d failed attempt(s)", self._failures)
        self._failures = 0

    def next_s(self) -> float:
        raw = min(self._max_s, self._initial_s * 2 ** max(0, self._failures - 1))
        return float(raw / 2 + random.uniform(0, raw / 2))
