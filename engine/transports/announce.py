"""Announcing step runs that became ready: inside the transaction, or after its commit.

Every path that makes a step run claimable (submit, a checkpoint's
successors, a retry's backoff, an operator's replay, the sweeper's
re-announcement, a concurrency slot freed: :func:`announce_freed`) says so
through :func:`announce` in the transaction that made it ready, then calls
:meth:`Announced.publish_after_commit` once that transaction has committed:

- a transport whose queue lives in this database (``transactional``) gets
  the messages inside the transaction, so they exist exactly when it
  commits, and nothing is left for after the commit;
- any other transport (SQS) cannot join the transaction: outbox rows commit
  with the step runs, and the ids come back to be relayed after the commit.
  A failure there only delays the messages: the sweeper's relay (and the
  workers' relay listeners, woken by ``notify``) send what is left.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from engine import store
from engine.store.rows import NewStepRun
from engine.transports.base import Outgoing
from engine.transports.message import StepMessage
from engine.transports.outbox import Publisher, relay

log = logging.getLogger(__name__)


def transactional(publisher: Publisher) -> bool:
    """Whether ``publisher`` writes its messages in the caller's transaction."""
    return bool(getattr(publisher, "transactional", False))


@dataclass(frozen=True)
class Announced:
    """What an announcement left for after the commit: outbox rows to relay."""

    publisher: Publisher
    outbox_ids: tuple[int, ...] = field(default=())

    def publish_after_commit(self, conn: psycopg.Connection[Any]) -> int:
        """Relay the rows the commit left in the outbox; the count published.

        Never raises for a failed publish: the rows are committed, and the
        sweeper's relay sends them later.
        """
        if not self.outbox_ids:
            return 0
        try:
            return relay(conn, self.publisher, ids=self.outbox_ids)
        except Exception:
            log.warning("publish after commit failed; the outbox relay will send", exc_info=True)
            return 0

    def __add__(self, other: Announced) -> Announced:
        """Both announcements' rows, relayed together after the commit."""
        return Announced(self.publisher, self.outbox_ids + other.outbox_ids)


def announce(
    conn: store.Executes,
    publisher: Publisher,
    *,
    job_id: uuid.UUID | None = None,
    new_runs: Sequence[NewStepRun] = (),
    outbox_ids: Sequence[int] = (),
    notify: bool = False,
) -> Announced:
    """Announce, in ``conn``'s open transaction, what became ready in it.

    ``new_runs`` (step runs of ``job_id`` not inserted yet) are inserted with
    their announcement; ``outbox_ids`` are outbox rows the caller wrote for
    existing step runs (a retry's delayed message, a replay). With ``notify``
    a ``NOTIFY`` wakes every worker's relay at the caller's commit, for a
    caller whose commit we cannot hook (a submit inside the ERP's transaction).
    Needs no result on the transactional path for ``new_runs``, so ``conn``
    may be a :class:`~engine.store.Batch` there; anything else reads rows.
    """
    if transactional(publisher):
        if new_runs:
            assert job_id is not None, "new step runs belong to a job"
            store.step_run_insert_many_announced(conn, job_id, new_runs)
            publisher.publish(
                conn, [Outgoing(StepMessage(job_id=job_id, step_run_id=r.id)) for r in new_runs]
            )
        if outbox_ids:
            relay(_reads(conn), publisher, ids=outbox_ids)
        return Announced(publisher)
    conn = _reads(conn)
    ids = list(outbox_ids)
    if new_runs:
        assert job_id is not None, "new step runs belong to a job"
        ids += store.step_run_insert_many_with_outbox(conn, job_id, new_runs)
    if notify and ids:
        store.outbox_notify(conn)
    return Announced(publisher, tuple(ids))


def announce_freed(
    conn: psycopg.Connection[Any],
    publisher: Publisher,
    job_ids: Sequence[uuid.UUID],
    *,
    expired: bool = False,
) -> Announced:
    """Announce, in ``conn``'s open transaction, the step runs waiting for a slot these jobs freed.

    Called by every path that stops a step run holding a concurrency key
    (checkpoint, retry, dead letter, cancel, give-back, the sweeper), after
    its status changed in that transaction: for each key of the jobs' step
    runs with a slot free now, the next waiting step runs only (as many as
    slots are free), so a waiter runs as soon as its holder commits and
    nobody polls. A key still full announces nothing. With ``expired`` (the
    sweeper) the keys whose holders died, their leases expired, count too.
    """
    ids = store.outbox_insert_for_freed_keys(conn, job_ids, expired=expired)
    if not ids:
        return Announced(publisher)
    return announce(conn, publisher, outbox_ids=ids)


def announce_if_slot_free(
    conn: psycopg.Connection[Any], publisher: Publisher, step_run_ids: Sequence[uuid.UUID]
) -> None:
    """Announce, after the commit that created them pending, keyed step runs whose key has
    a slot free now (an eager successor whose key's lock was busy: a claim of the key
    in progress, a keyed checkpoint committing). Without a slot free, the key's
    holder announces them when it ends (:func:`announce_freed`), and nobody waits
    for the sweeper's backstop.
    """
    with conn.transaction():
        ids = store.outbox_insert_if_slot_free(conn, step_run_ids)
        announced = announce(conn, publisher, outbox_ids=ids)
    announced.publish_after_commit(conn)


def _reads(conn: store.Executes) -> psycopg.Connection[Any]:
    """``conn`` itself: what follows reads rows, which a batch has none of before it is sent."""
    if isinstance(conn, store.Batch):
        raise TypeError("outbox rows are read back: announce them on the connection, not a batch")
    return conn
