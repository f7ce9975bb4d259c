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

from collections.abc import Sequence
from typing import Any, Protocol

import psycopg

from engine import faults
from engine.messages import StepMessage
from engine.store import outbox as store
from engine.transports.base import Outgoing


class Publisher(Protocol):
    """Where "step run X is ready" goes: a transport's send side.

    ``conn`` is the relay's transaction. A transport whose queue lives in the
    same database may write into it, so the message and the "published" mark
    commit together; an external queue ignores it. ``max_delay_s`` is the
    longest delay it can give a message (SQS: 900 s); rows due later wait in
    the outbox.
    """

    max_delay_s: float

    def publish(
        self, conn: psycopg.Connection[Any] | None, messages: Sequence[Outgoing]
    ) -> None: ...


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
