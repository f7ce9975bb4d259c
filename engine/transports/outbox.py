"""The outbox relay: hands committed "ready" rows to a transport, then marks them.

Submit and scheduling write outbox rows in the same transaction as the step
runs they announce (invariant 8). Those rows are invisible until that
transaction commits, so a relay can only ever publish committed work; a
rollback leaves nothing to publish. A crash after handing rows on but before
marking them published makes a duplicate message, which the claim absorbs.

A transactional transport (the PostgreSQL queue table) needs no relay on the
hot path: the checkpoint that makes step runs ready writes their messages in
its own transaction and their outbox rows already marked published, which
the sweeper still reads as "announced".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import psycopg

from engine import store
from engine.config import Settings
from engine.infra import faults, logs
from engine.infra.outage import is_outage
from engine.store import db
from engine.transports.base import Outgoing
from engine.transports.message import StepMessage

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """Where "step run X is ready" goes: a transport's send side.

    ``conn`` is the relay's transaction. A transport whose queue lives in the
    same database may write into it, so the message and the "published" mark
    commit together; an external queue ignores it. ``max_delay_s`` is the
    longest delay it can give a message (SQS: 900 s); rows due later wait in
    the outbox.
    """

    max_delay_s: float

    def publish(self, conn: store.Executes | None, messages: Sequence[Outgoing]) -> None: ...


def relay(
    conn: psycopg.Connection[Any],
    publisher: Publisher,
    *,
    limit: int = 500,
    ids: Sequence[int] | None = None,
) -> int:
    """Publish up to ``limit`` unpublished rows (only ``ids`` if given); the count published.

    Runs in a transaction on ``conn`` (a savepoint if one is open already, so
    a transactional transport can publish inside the caller's transaction).
    """
    with conn.transaction():
        rows = store.outbox_lock_unpublished_many(
            conn, limit=limit, ids=ids, horizon_s=publisher.max_delay_s
        )
        if not rows:
            return 0
        publisher.publish(
            conn,
            [
                Outgoing(StepMessage(job_id=r.job_id, step_run_id=r.step_run_id), r.delay_s)
                for r in rows
            ],
        )
        faults.hit("after_publish")
        return store.outbox_mark_published_many(conn, [r.id for r in rows])


class RelayListener:
    """Relays the outbox as soon as a caller's commit announces rows (invariant 8).

    ``submit`` on a caller's connection cannot publish after a commit it does
    not see; it sends ``NOTIFY engine_outbox`` in that transaction instead,
    which PostgreSQL delivers only if and when it commits. Each worker of an
    external transport (SQS) listens on its own connection and relays at
    once; the relay's ``SKIP LOCKED`` hands each row to one of them. The
    sweeper's relay stays the backstop for a notification nobody heard.
    Behind a transaction pooler, where no notification is heard, it relays
    every ``ENGINE_POOLED_POLL_S``.
    """

    def __init__(
        self,
        settings: Settings,
        publisher: Publisher,
        *,
        on_outage: Callable[[BaseException, str], None] | None = None,
        outage_over: Callable[[], bool] = lambda: True,
    ) -> None:
        self._settings = settings
        self._publisher = publisher
        self._on_outage = on_outage
        self._outage_over = outage_over
        self._stop = threading.Event()
        self.relayed = 0
        self.listening = False  # tests: set once LISTEN is in place
        # its log lines carry the worker's context (a new thread starts with none)
        self._thread = threading.Thread(
            target=logs.inheriting(self._run), name="outbox-relay", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with db.connect(self._settings, autocommit=True) as conn:
                    if db.pooled(self._settings):
                        self._poll(conn)
                        continue
                    store.outbox_listen(conn)
                    self.listening = True
                    # rows committed before we listened are the sweeper's
                    while not self._stop.is_set():
                        if store.outbox_wait_notified(conn, timeout_s=1.0):
                            self._relay_all(conn)
            except Exception as exc:
                self.listening = False
                if is_outage(exc) and self._on_outage is not None:
                    self._on_outage(exc, "outbox relay")
                else:
                    log.warning("outbox relay listener failed; reconnecting", exc_info=True)
                # wait for the worker to see the database back, then listen again
                while not self._stop.wait(1.0) and not self._outage_over():
                    pass

    def _poll(self, conn: psycopg.Connection[Any]) -> None:
        """Behind a transaction pooler LISTEN hears nothing (:mod:`engine.store.pooler`):
        relay every ``ENGINE_POOLED_POLL_S`` instead."""
        self.listening = True
        while not self._stop.is_set():
            self._relay_all(conn)
            self._stop.wait(self._settings.pooled_poll_s)

    def _relay_all(self, conn: psycopg.Connection[Any]) -> None:
        while True:
            n = relay(conn, self._publisher, limit=500)
            self.relayed += n
            if n < 500:
                return
