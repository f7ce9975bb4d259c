"""The caller's transaction, or our own: where a submit or a signal writes, and when it publishes.

``submit`` and ``signal`` take an optional ``conn``. Without one the engine
opens its own connection, commits, and publishes at once. With a psycopg
connection, a SQLAlchemy ``Connection`` or ``Session``, the rows join the
caller's open transaction (one is begun if needed) and the caller commits:
a request that rolls back leaves no row and sends no message (invariant 8).
An autocommit psycopg connection would commit each statement alone, so the
work gets a transaction of its own on it. The messages leave at the caller's
commit: in that same commit with the PostgreSQL transport, by a ``NOTIFY``
that wakes the workers' relay otherwise (a ``Session`` also publishes from its
after-commit hook).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg

from engine.config import Settings
from engine.infra import faults
from engine.store import db
from engine.transports.announce import Announced
from engine.transports.outbox import Publisher

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.orm import Session

    Connectable = psycopg.Connection[Any] | SAConnection | Session

__all__ = ["Written", "driver_connection", "in_transaction", "publish_after_commit"]

log = logging.getLogger(__name__)


class Written(Protocol):
    """What a unit of work wrote: the outbox rows to publish after the commit."""

    @property
    def outbox_ids(self) -> tuple[int, ...]: ...


W = TypeVar("W", bound=Written)


def in_transaction(
    conn: Connectable | None,
    settings: Settings,
    publisher: Publisher,
    work: Callable[[psycopg.Connection[Any], bool], W],
    *,
    after_commit_fault: str | None = None,
) -> W:
    """Run ``work(raw_conn, notify)`` in the caller's transaction or our own (module docstring).

    ``notify`` is true when the caller commits: a ``NOTIFY`` then wakes the
    relays at that commit. ``after_commit_fault`` names the fault point hit
    between our own commit and the publish (chaos runs).
    """
    if conn is None:
        with db.connect(settings) as own:
            return _own(own, publisher, work, after_commit_fault)
    raw = driver_connection(conn)
    if raw.autocommit:
        # each statement would commit alone: a job without its step runs could exist
        return _own(raw, publisher, work, after_commit_fault)
    result = work(raw, True)
    if result.outbox_ids:
        publish_after_commit(conn, settings, publisher, result.outbox_ids)
    return result


def _own(
    conn: psycopg.Connection[Any],
    publisher: Publisher,
    work: Callable[[psycopg.Connection[Any], bool], W],
    after_commit_fault: str | None,
) -> W:
    """``work`` in a transaction of our own on ``conn``, then publish."""
    with conn.transaction():
        result = work(conn, False)
    if after_commit_fault is not None:
        faults.hit(after_commit_fault)
    Announced(publisher, result.outbox_ids).publish_after_commit(conn)
    return result


def driver_connection(conn: Connectable) -> psycopg.Connection[Any]:
    """The psycopg connection under ``conn``, inside a begun transaction."""
    if isinstance(conn, psycopg.Connection):
        return conn
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        conn = conn.connection()  # begins the session's transaction if needed
    if isinstance(conn, SAConnection):
        if not conn.in_transaction():
            # Without a begun transaction SQLAlchemy's commit() is a no-op and
            # our rows would be lost when the connection returns to its pool.
            conn.begin()
        raw = conn.connection.driver_connection
        if isinstance(raw, psycopg.Connection):
            return raw
        raise TypeError(
            f"submit needs a psycopg (postgresql+psycopg://) connection, got {type(raw).__name__}"
        )
    raise TypeError(
        "conn must be a psycopg Connection, a SQLAlchemy Connection or a Session, "
        f"not {type(conn).__name__}"
    )


def publish_after_commit(
    conn: Connectable, settings: Settings, publisher: Publisher, ids: Sequence[int]
) -> None:
    """Publish ``ids`` once the caller's ``Session`` commits; other callers rely on the relay."""
    if isinstance(conn, psycopg.Connection):
        return  # no commit hook: the relay in every worker publishes these rows
    # only a SQLAlchemy caller gets here: the API install need not have it
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    if not isinstance(conn, Session):
        return

    def publish(_session: Session) -> None:
        # The caller's commit has happened; a failure here only delays the
        # messages until the next relay sweep, so it must not raise into it.
        try:
            with db.connect(settings) as own:
                Announced(publisher, tuple(ids)).publish_after_commit(own)
        except Exception:
            log.warning("publish after commit failed; the outbox relay will retry", exc_info=True)

    event.listen(conn, "after_commit", publish, once=True)
