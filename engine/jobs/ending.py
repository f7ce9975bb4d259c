"""A job has ended: what follows, written once for every path that ends one.

Five paths end a job, each with its own guarded statement, which stays
where it is: a checkpoint completes it (``job_finish_if_active_logged``), a
step fails past its attempt cap (the same, failed), a step raises
``Cancel`` (``job_cancel_if_leased``, fenced by its lease token, invariant
16), an operator cancels it (``job_cancel_if_active``) and the sweeper
dead-letters a step whose lease expired on its last attempt
(``job_finish_if_active``). Once that statement has ended the job, in the
same transaction, :func:`job_ended`:

1. cancels what is left (``cancel_rest``: its descendants, then its step
   runs, in that one lock order) when the guarded statement did not already;
2. frees the concurrency slots the job held (``free_slots``), announcing
   the next waiters of those keys in the same commit, so they run as soon as
   it commits;
3. wakes the parent step run waiting for this job, if it is a child
   (:func:`wake_parent`, or :func:`wake_parent_in` inside a checkpoint's batch).

What it leaves to publish after the commit is the :class:`Ended` it returns;
its :meth:`Ended.after_commit` publishes it and renders the job's report,
whichever path ended the job (an operator's cancel included). The runner,
whose commit may be a group's, publishes and renders when that commits.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from engine import store
from engine.transports.announce import Announced, announce, announce_freed
from engine.transports.outbox import Publisher

if TYPE_CHECKING:
    from engine.config import Settings
    from engine.flow.registry import Registry

__all__ = [
    "Ended",
    "announce_woken",
    "job_ended",
    "render_report",
    "wake_parent",
    "wake_parent_in",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ended:
    """A job that ended in an open transaction: what to publish and render after its commit."""

    job_id: uuid.UUID
    announced: Announced

    def after_commit(
        self,
        conn: psycopg.Connection[Any],
        settings: Settings,
        registry: Registry | None = None,
    ) -> None:
        """Publish what the end announced, then render the job's report."""
        self.announced.publish_after_commit(conn)
        render_report(settings, self.job_id, registry)


def job_ended(
    conn: psycopg.Connection[Any],
    publisher: Publisher,
    job_id: uuid.UUID,
    *,
    cancel_rest: bool,
    free_slots: bool,
    batch: store.Batch | None = None,
) -> Ended:
    """What follows the end of ``job_id``, in the transaction whose statement ended it.

    ``cancel_rest``: cancel its active descendants and its step runs (a job
    failing leaves nothing running; their heartbeats and checkpoints then read
    "cancelled"). ``free_slots``: announce the waiters of the keys it held
    (a caller that frees many jobs' slots at once passes ``False`` and does
    it itself). ``batch``: the checkpoint's batch, in which the parent is
    woken (a transport in this database; nothing is read back before it is
    sent).
    """
    announced = Announced(publisher)
    if cancel_rest:
        store.job_cancel_descendants(conn, job_id, "parent failed")
        store.step_cancel_by_job(conn, job_id)
    if free_slots:
        announced += announce_freed(conn, publisher, [job_id])
    if batch is None:
        announced += wake_parent(conn, publisher, job_id)
    else:
        wake_parent_in(batch, publisher, job_id)
    return Ended(job_id, announced)


def render_report(settings: Settings, job_id: uuid.UUID, registry: Registry | None = None) -> None:
    """Render the ended job's report (the alert links to it); never raises into the caller."""
    if not settings.report_on_end:
        return
    try:
        from engine.reports import render_after_end  # jinja2, SQLModel: the worker extra
    except ImportError as exc:  # the API install renders nothing; a worker will not either
        log.info("no report for job %s: the renderers need the worker extra (%s)", job_id, exc)
        return
    render_after_end(settings, job_id, registry)


def wake_parent(
    conn: psycopg.Connection[Any], publisher: Publisher, child_job_id: uuid.UUID
) -> Announced:
    """Wake the parent step run waiting for ``child_job_id``, which ended in this transaction.

    Nothing for a job that is no child, or whose parent step is not waiting
    (running: its park will see the end; ended: it waits no more).
    """
    return announce_woken(conn, publisher, store.step_wake_parent(conn, child_job_id))


def wake_parent_in(batch: store.Batch, publisher: Publisher, child_job_id: uuid.UUID) -> None:
    """:func:`wake_parent` in ``batch`` (a transport in this database: nothing to publish later).

    The woken parent, if any, is announced once the batch is sent, still in
    its transaction.
    """
    reply = store.step_wake_parent_batched(batch, child_job_id)

    def announce_reply() -> None:
        # a transport in this database leaves nothing to publish after the commit
        announce_woken(batch.conn, publisher, [row["id"] for row in reply.fetchall()])

    batch.after_send(announce_reply)


def announce_woken(
    conn: psycopg.Connection[Any], publisher: Publisher, woken: list[uuid.UUID]
) -> Announced:
    """Announce the parent step runs ``woken`` made pending, in ``conn``'s transaction."""
    if not woken:
        return Announced(publisher)
    return announce(conn, publisher, outbox_ids=store.outbox_insert_many(conn, woken))
