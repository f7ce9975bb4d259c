"""The PostgreSQL transport: a queue table with SQS's at-least-once contract.

A message is a row of ``engine_queue``. Receiving is one ``UPDATE ... FROM
(SELECT ... FOR UPDATE SKIP LOCKED) ... RETURNING`` that hides the rows for the
visibility timeout (database clock), counts the delivery and stamps a fresh
receipt uuid; a row whose visibility lapses is received again with a new
receipt, which makes the older one stale. The opaque receipt handed out is
``"<id>:<receipt uuid>"``, and every extend, release and delete is guarded by
both parts.

Publishing (and deleting) can join the caller's transaction, so a message
exists exactly when the work it announces commits. Publishing and releasing
also ``NOTIFY engine_queue``: a receiver with nothing to do waits on a
``LISTEN`` connection, capped at the moment the earliest hidden or delayed row
becomes visible, so neither new messages nor delayed retries wait for a poll.
Behind a transaction pooler, where ``LISTEN`` hears nothing
(:mod:`engine.store.pooler`), an idle receiver looks at the queue every
``ENGINE_POOLED_POLL_S`` instead.

The transport is shared by threads (receiver, heartbeats, executors). It holds
three lazily opened autocommit connections, each used by one thread at a
time: one for short statements, one for receiving (its commits do not wait
for the WAL flush: a lost receive only makes the message visible again), and
one dedicated to ``LISTEN``. A broken connection is dropped and reopened on next use.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg

from engine.config import Settings
from engine.errors import BadInput, StoreError
from engine.store import db
from engine.store.batch import Executes
from engine.store.errors import wrap_errors
from engine.store.queries import load
from engine.transports.base import Outgoing, QueueProbe, Received

_q = load(str(Path(__file__).with_suffix(".sql")))

# Floor of one wait: a row already due but locked by another receiver's
# UPDATE must not turn the wait loop into a busy loop.
_MIN_WAIT_S = 0.01


class _Connection:
    """One lazily opened autocommit connection, used by one thread at a time."""

    def __init__(self, settings: Settings, setup: str | None = None) -> None:
        self._settings = settings
        self._setup = setup
        self.lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self.closed = False

    @property
    def opened(self) -> bool:
        return self._conn is not None

    @contextmanager
    def held(self) -> Iterator[psycopg.Connection[Any]]:
        """The connection; the caller must hold ``lock``."""
        if self.closed:
            raise StoreError("the postgres transport is closed")
        if self._conn is None or self._conn.closed:
            self._conn = db.connect(self._settings, autocommit=True)
            # a session setting behind a transaction pooler would stay on a server
            # session other clients borrow next (and not on this connection's)
            if self._setup is not None and not db.pooled(self._settings):
                self._conn.execute(self._setup)
        try:
            yield self._conn
        except psycopg.Error:
            if self._conn.broken:
                # the server went away or restarted: reconnect on next use
                self._conn.close()
                self._conn = None
            raise

    @contextmanager
    def use(self) -> Iterator[psycopg.Connection[Any]]:
        """Hold the lock and the connection for one short piece of work."""
        with self.lock, self.held() as conn:
            yield conn

    def close(self) -> None:
        """Close the connection; the caller must hold ``lock``."""
        self.closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _parse(receipts: Sequence[str]) -> dict[str, list[Any]]:
    """Query parameters ``ids`` and ``receipts`` of ``"<id>:<uuid>"`` receipts."""
    ids: list[int] = []
    uuids: list[uuid.UUID] = []
    for receipt in receipts:
        id_text, _, uuid_text = receipt.partition(":")
        try:
            ids.append(int(id_text))
            uuids.append(uuid.UUID(uuid_text))
        except ValueError:
            raise BadInput(
                f"not a postgres transport receipt: {receipt!r} (expected '<id>:<uuid>')"
            ) from None
    return {"ids": ids, "receipts": uuids}


def _receipt(row: dict[str, Any]) -> str:
    return f"{row['id']}:{row['receipt']}"


class PostgresTransport:
    """Messages are rows of ``engine_queue`` in the engine's own database."""

    name = "postgres"
    transactional = True
    # The table could hold any delay; SQS's limit keeps both transports on the
    # same path (rows due later wait in the outbox), so small installs test it.
    max_delay_s = 900.0

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings if settings is not None else Settings()
        self._short = _Connection(self._settings)
        self._recv = _Connection(self._settings, setup=_q["queue_receiver_commit_async"])
        self._listen = _Connection(self._settings, setup=_q["queue_listen"])
        self._closed = False
        self._woken = threading.Event()  # polling behind a pooler: close() wakes it

    @wrap_errors
    def publish(self, conn: Executes | None, messages: Sequence[Outgoing]) -> None:
        """Send ``messages``: inside ``conn``'s transaction when given (they commit with it)."""
        if not messages:
            return
        for m in messages:
            if not 0 <= m.delay_s <= self.max_delay_s:
                raise BadInput(
                    f"delay of {m.delay_s} s for step run {m.message.step_run_id}: "
                    f"must be between 0 and {self.max_delay_s} s"
                )
        params = {
            "bodies": [m.message.encode() for m in messages],
            "delays": [m.delay_s for m in messages],
        }
        if conn is not None:
            conn.execute(_q["queue_send_many"], params)
            return
        with self._short.use() as own:
            own.execute(_q["queue_send_many"], params)

    @wrap_errors
    def send_raw(self, body: str) -> None:
        """Send ``body`` as is, visible at once."""
        with self._short.use() as conn:
            conn.execute(_q["queue_send_many"], {"bodies": [body], "delays": [0.0]})

    @wrap_errors
    def receive(self, max_messages: int, visibility_s: float, wait_s: float) -> list[Received]:
        """Up to ``max_messages`` visible messages, each hidden for ``visibility_s``.

        With nothing visible, waits up to ``wait_s`` for a notification or for
        the earliest hidden or delayed row to become visible, then tries again.
        Returns ``[]`` after ``wait_s``, or early if the transport is closed.
        """
        if max_messages < 1:
            raise BadInput(f"max_messages must be at least 1, got {max_messages}")
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            self._drain_notifications()
            received = self._receive_once(max_messages, visibility_s)
            remaining = deadline - time.monotonic()
            if received or remaining <= 0 or self._closed:
                return received
            with self._recv.use() as conn:
                row = conn.execute(_q["queue_select_next_visible"]).fetchone()
            until_visible = None if row is None else row["wait_s"]
            if until_visible is not None:
                remaining = min(remaining, max(until_visible, _MIN_WAIT_S))
            self._wait_for_notification(remaining)
            if self._closed:
                return []

    def _receive_once(self, max_messages: int, visibility_s: float) -> list[Received]:
        with self._recv.use() as conn:
            rows = conn.execute(
                _q["queue_receive_visible_many"],
                {"limit": max_messages, "visibility_s": visibility_s},
            ).fetchall()
        return [
            Received(
                message_id=str(row["id"]),
                body=row["body"],
                receipt=_receipt(row),
                receive_count=row["receive_count"],
            )
            for row in sorted(rows, key=lambda r: r["id"])
        ]

    def _drain_notifications(self) -> None:
        # A receiver that always finds work never waits, so notifications
        # would pile up on the LISTEN connection (and hold back the server's
        # notification queue). Draining *before* the receive statement loses
        # nothing: a drained NOTIFY was for a commit that statement will see.
        if not self._listen.opened or not self._listen.lock.acquire(blocking=False):
            return
        try:
            with self._listen.held() as conn:
                for _ in conn.notifies(timeout=0):
                    pass
        finally:
            self._listen.lock.release()

    def _wait_for_notification(self, timeout: float) -> None:
        """Wait up to ``timeout`` for a NOTIFY; only one thread listens at a time.

        The others wait for the listener to finish (a notification, or its own
        timeout) and then look at the queue again themselves.
        """
        if db.pooled(self._settings):
            # behind a transaction pooler LISTEN hears nothing (engine.store.pooler)
            self._woken.wait(min(timeout, self._settings.pooled_poll_s))
            return
        if self._listen.lock.acquire(blocking=False):
            try:
                with self._listen.held() as conn:
                    for _ in conn.notifies(timeout=timeout, stop_after=1):
                        pass
            finally:
                self._listen.lock.release()
        elif self._listen.lock.acquire(timeout=timeout):
            self._listen.lock.release()

    @wrap_errors
    def extend(self, receipts: Sequence[str], visibility_s: float) -> set[str]:
        """Hide these deliveries for ``visibility_s`` from now; the receipts still current."""
        if not receipts:
            return set()
        with self._short.use() as conn:
            rows = conn.execute(
                _q["queue_extend_if_receipt_many"],
                {**_parse(receipts), "visibility_s": visibility_s},
            ).fetchall()
        return {_receipt(row) for row in rows}

    def give_back(self, receipts: Sequence[str], after_s: float) -> None:
        """Visible again after ``after_s`` (this queue has no dead-letter queue by receives)."""
        if after_s > 0:
            self.extend(receipts, after_s)
        else:
            self.release(receipts)

    @wrap_errors
    def release(self, receipts: Sequence[str]) -> None:
        """Make these deliveries visible at once (stale receipts release nothing)."""
        if not receipts:
            return
        with self._short.use() as conn:
            conn.execute(_q["queue_release_if_receipt_many"], _parse(receipts))

    @wrap_errors
    def delete(self, receipts: Sequence[str], conn: Executes | None = None) -> None:
        """Delete these deliveries, inside ``conn``'s transaction when given.

        A stale receipt deletes nothing and raises nothing.
        """
        if not receipts:
            return
        params = _parse(receipts)
        if conn is not None:
            conn.execute(_q["queue_delete_if_receipt_many"], params)
            return
        with self._short.use() as own:
            own.execute(_q["queue_delete_if_receipt_many"], params)

    def dead_letter(self, received: Received, reason: str) -> None:
        """Remove the delivery from the queue.

        The engine records ``reason`` in its own dead-letter table; this
        queue has no dead-letter queue of its own.
        """
        self.delete([received.receipt])

    @wrap_errors
    def probe(self) -> QueueProbe:
        """The queue table answers: its message counts."""
        with self._short.use() as conn:
            row = conn.execute(_q["queue_select_depth"]).fetchone()
        assert row is not None, "an aggregate returns one row"
        return QueueProbe(
            f"table engine_queue: {row['messages']} messages, {row['visible']} visible",
            int(row["messages"]),
        )

    def close(self) -> None:
        """Close the connections; a receive waiting in another thread returns ``[]``.

        Calls after ``close`` (other than ``close``) raise :class:`StoreError`.
        """
        self._closed = True
        self._woken.set()
        if not self._listen.lock.acquire(blocking=False):
            # Another thread is waiting on LISTEN: wake it rather than wait out its timeout.
            with suppress(psycopg.Error, StoreError), self._short.use() as conn:
                conn.execute(_q["queue_notify"])
            self._listen.lock.acquire()
        try:
            self._listen.close()
        finally:
            self._listen.lock.release()
        for connection in (self._recv, self._short):
            with connection.lock:
                connection.close()
