"""The checkpoint: a step run's output, written only if its lease token still matches.

The fenced write (``checkpoint_put_if_leased``, invariant 5) and what it
leads to, in the same transaction (:func:`follow_up`): the step runs it made
ready (one claimed by this slot as its eager successor, the rest announced),
the slot its concurrency key frees, the job's end (:mod:`engine.jobs.ending`).
What follows is a value, :class:`FollowUp`, that the one-by-one path
(:mod:`engine.runner.execution`) and a round (:mod:`engine.runner.rounds`)
read; neither writes the other's state.

Eager successors (``ENGINE_EAGER_SUCCESSORS``, on by default): of the step
runs a checkpoint makes ready, the slot creates one already leased to itself
(a conditional insert, in the checkpoint's own transaction and under the
job's row lock, so no other worker can have seen it pending) and runs it
next with the checkpoint it already holds. That run has no message at all:
its lease keeps it, and should the slot die the lease lapses and the sweeper
announces it (invariant 9).

What a checkpoint stores is the output as JSON (:func:`checkpoint_json`),
taken by the step run's own attempt, before anything is written: a value the
checkpoint's ``jsonb`` cannot carry (NaN, an infinity, a NUL character, a
surrogate) fails that step run alone, as if its code had raised
(:class:`~engine.errors.OutputRefused`, naming the field), and is retried
under its policy. Left to the database, it failed the statement, and with it
the neighbours' checkpoints of a round (:mod:`engine.runner.rounds`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from pydantic import BaseModel

from engine import store
from engine.config import Settings
from engine.errors import LeaseLost, OutputRefused
from engine.flow import Flow
from engine.infra import faults
from engine.jobs.ending import job_ended
from engine.jobs.plan import Outputs, schedule_ready
from engine.runner.outcome import Continuation
from engine.store import jsonb
from engine.store.rows import Claimed, NewStepRun, QueuedClaim
from engine.store.status import EventKind, JobStatus
from engine.transports.announce import Announced, announce, announce_freed
from engine.transports.base import Transport

__all__ = ["FollowUp", "checkpoint_json", "follow_up", "hands_on", "put_checkpoint"]

log = logging.getLogger(__name__)


def hands_on(flow: Flow, claimed: Claimed) -> bool:
    """Is the checkpoint read back with its write: a single-run step with a successor?

    A single-run step's stored checkpoint, handed on, spares its eager
    successor a read of its input.
    """
    successor = any(claimed.step in s.after for s in flow.steps.values())
    return successor and claimed.fanout_key == ""


def checkpoint_json(output: BaseModel) -> dict[str, Any]:
    """``output`` as its checkpoint stores it (JSON), or :class:`OutputRefused`.

    Refused: what a ``jsonb`` column cannot carry (:mod:`engine.store.jsonb`:
    NaN, an infinity, a NUL character, a surrogate), named by its field's
    path, e.g. "output field 'totals.ratio' is NaN: JSON cannot carry it".
    """
    data: dict[str, Any] = jsonb.model_json(output, "output", error=OutputRefused)
    return data


def put_checkpoint(
    conn: psycopg.Connection[Any],
    flow: Flow,
    claimed: Claimed,
    output: dict[str, Any],
    worker: str,
    *,
    begin: Callable[[], None] | None,
    savepoint: bool,
    ran: store.Ran | None = None,
) -> store.Checkpointed:
    """Write ``output`` (:func:`checkpoint_json`) as the step run's checkpoint, fenced by its
    lease token; its ``succeeded`` event records when the step ran (``ran``).

    :class:`LeaseLost` when the token no longer matches: nothing is written.
    """
    done = store.checkpoint_put_if_leased(
        conn,
        step_run_id=claimed.id,
        job_id=claimed.job_id,
        token=claimed.token,
        output=output,
        worker=worker,
        with_output=hands_on(flow, claimed),
        begin=begin,
        savepoint=savepoint,
        ran=ran,
    )
    if done is None:
        raise LeaseLost(f"checkpoint of step run {claimed.id} refused: lease token changed")
    return done


@dataclass(frozen=True)
class FollowUp:
    """What a checkpoint led to, written in its transaction (not committed yet)."""

    announced: Announced  # to publish after the commit
    queued: QueuedClaim | None  # the eager successor's claim, readable once sent
    known: Outputs  # the checkpoints the successor is handed
    ended_job: uuid.UUID | None  # the job this checkpoint completed, its report to render
    eager: uuid.UUID | None = None  # the eager successor's id, claimed or not

    def waiting_successor(self) -> uuid.UUID | None:
        """The eager successor created pending (read after :meth:`continuation`): to be
        announced after the commit if its key has a slot free (its key's lock was only busy),
        else by its key's holder (:func:`engine.transports.announce.announce_if_slot_free`)."""
        if self.queued is None or not self.queued.created_pending:
            return None
        return self.eager

    def continuation(self, *, check_lease: bool = False) -> Continuation | None:
        """The eager successor to run next, read after the commit (only then is the claim real)."""
        if self.queued is None:
            return None
        eager = self.queued.result()
        if eager is None:
            # Over its concurrency limit it was created pending, to be announced
            # by its key's holder. Otherwise its step key existed: scheduling
            # under the job lock makes that impossible, and were it to happen
            # that run is someone else's.
            log.info("eager successor not claimed here (over its concurrency limit, or taken)")
            return None
        return Continuation(eager, self.known, check_lease)


def follow_up(
    conn: psycopg.Connection[Any],
    settings: Settings,
    transport: Transport,
    worker: str,
    flow: Flow,
    claimed: Claimed,
    done: store.Checkpointed,
    batch: store.Batch | None,
    *,
    may_continue: bool,
) -> FollowUp:
    """What the checkpoint ``done`` leads to, in its transaction.

    The step runs it made ready (one claimed by this slot when
    ``may_continue``, the rest announced), the job's end, the slot its
    concurrency key frees. Statements that need no answer go to ``batch``
    when given (a parent its job's end wakes is announced once it is sent).
    """
    runs: list[NewStepRun] = []
    job_complete = False
    known: Outputs = {}
    if done.job_status in (JobStatus.PENDING, JobStatus.RUNNING):
        mine = done.counts.get(claimed.step)
        if done.output is not None and mine is not None and mine.total == 1:
            known = {claimed.step: [(claimed.fanout_key, done.output)]}
        scheduled = schedule_ready(
            conn, flow, claimed.job_id, claimed.params, settings, done.counts, known
        )
        runs, job_complete = scheduled.runs, scheduled.job_complete
    eager = runs[0] if runs and settings.eager_successors and may_continue else None
    published = runs[1:] if eager is not None else runs
    queued: QueuedClaim | None = None
    announced = Announced(transport)
    if claimed.concurrency_key is not None and (
        eager is None or eager.concurrency_key != claimed.concurrency_key
    ):
        # the slot this step run held is free in this commit: its next waiter
        # is announced with it (an eager successor of the same key keeps it)
        announced = announce_freed(conn, transport, [claimed.job_id])
    faults.hit("before_commit")
    sink: store.Executes = batch if batch is not None else conn
    ended_job: uuid.UUID | None = None
    if job_complete:
        store.job_finish_if_active_logged(
            sink, claimed.job_id, JobStatus.DONE, event=EventKind.JOB_DONE, worker=worker
        )
        # nothing is left to cancel, and the step's own slot was freed above
        ended = job_ended(
            conn, transport, claimed.job_id, cancel_rest=False, free_slots=False, batch=batch
        )
        announced += ended.announced
        ended_job = claimed.job_id
    if eager is not None:
        # created already leased to this slot, in the checkpoint's transaction
        queued = store.step_run_insert_claimed(
            sink,
            eager,
            job_id=claimed.job_id,
            flow=claimed.flow,
            params=claimed.params,
            worker=worker,
            lease_s=settings.lease_s,
            traceparent=claimed.traceparent,
        )
    announced += announce(sink, transport, job_id=claimed.job_id, new_runs=published)
    return FollowUp(announced, queued, known, ended_job, None if eager is None else eager.id)
