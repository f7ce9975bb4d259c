"""A round of pure step runs, checkpointed together: one message for their checkpoints.

A group commit (:mod:`engine.runner.group`) shares one COMMIT among the
quick step runs a slot holds, but each still costs its own round trips: its
checkpoint, then what the checkpoint leads to. For steps that take no
:class:`~engine.runner.context.StepContext` (they write nothing through the engine's
transaction, so nothing of theirs needs a savepoint), the slot does better:
it calls every step of the round first, then writes all their checkpoints in
one statement (:func:`~engine.store.checkpoint_put_many_if_leased`, each guarded
by its own token, the jobs locked in id order), schedules each, sends everything
that follows in one batch (the eager successors, and the parents the ended jobs
wake, each as one statement for the round: :meth:`engine.store.Batch.add_row`),
and commits once.

Fencing is exact as ever: a checkpoint refused (its lease reclaimed) wrote
nothing, and its neighbours commit; a step that raised wrote nothing, and
its failure is handled after the commit as it would be alone. A step whose
input read failed (a statement timeout, a cancel request) aborted the
round's transaction: it is rolled back and begun again for the others, who
only read before it, so no neighbour pays for it. Should a
statement fail (a deadlock, a lock timeout), the round is rolled back and
each step run's checkpoint is written again, one by one, with the output its
step returned (the body is not called again), on the path that gives each
its own savepoint and its own tries; a connection lost loses the round, as
it would lose one step.

A :class:`Round` is one such round: made by the slot's runner
(:mod:`engine.runner.delivery`) with its attempts, it holds what the round
shares (the slot's connection, its group's transaction) and takes each
attempt from its call to its outcome through the executor's collaborators.

Only the PostgreSQL transport (whose messages and deletes commit in the same
transaction) takes this path, and only one step run per job per round (a
second one of the same job must see the first one's scheduling).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg

from engine import store
from engine.errors import StoreError
from engine.flow import Step
from engine.infra import faults, logs, metrics
from engine.runner.attempt import Attempt
from engine.runner.checkpoint import FollowUp, hands_on
from engine.runner.execution import Executor
from engine.runner.outcome import Outcome

__all__ = ["Round", "pure"]

log = logging.getLogger(__name__)


def pure(step: Step) -> bool:
    """Does ``step`` take no StepContext (it cannot write through the engine's transaction)?"""
    return all(source.kind != "context" for source in step.inputs.values())


@dataclass
class _Computed:
    attempt: Attempt
    output: dict[str, Any]  # as its checkpoint stores it, checked by its own attempt
    started: float
    ran: float  # the step's own call: what decides whether it is quick


@dataclass
class _Followed:
    attempt: Attempt
    follow: FollowUp
    started: float
    ran: float


class Round:
    """``attempts`` (pure, quick, of distinct jobs, in job order) checkpointed together.

    Made once per round by the slot's runner; :meth:`run` returns an outcome
    for each attempt, each carrying the eager successor its checkpoint
    claimed, if any.
    """

    def __init__(self, executor: Executor, attempts: list[Attempt]) -> None:
        self.executor = executor
        self.attempts = attempts
        self.conn = executor.conn
        self.group = executor.group
        self.worker = executor.worker
        self.computed: list[_Computed] = []
        self.failed: list[tuple[Attempt, Exception, float]] = []  # the step raised
        self.results: dict[int, Outcome] = {}  # by id() of the attempt

    def run(self) -> list[Outcome]:
        self.group.commit()  # nothing of an earlier group shares this round's transaction
        first = self.attempts[0]
        self.group.begin(first.flow.name, first.step.name)
        for attempt in self.attempts:
            self._compute(attempt)
        try:
            followed, fenced = self._checkpoint()
        except Exception as exc:
            return self._failed(exc)
        self.group.commit()
        faults.hit("after_commit")
        waiting: list[uuid.UUID] = []
        for f in followed:
            outcome = Outcome(
                "done", step_run_id=f.attempt.claimed.id, continuation=f.follow.continuation()
            )
            if (successor := f.follow.waiting_successor()) is not None:
                waiting.append(successor)
            # quick or not by its own call: the round's shared statements are not its own
            self._ended(f.attempt, outcome, f.started, f.ran)
        if waiting:
            self.executor.announce_waiting(waiting)
        for attempt, started in fenced:
            claimed = attempt.claimed
            with logs.step_run(claimed, lease_owner=self.worker):
                outcome = self.executor.failures.fenced(
                    attempt, f"checkpoint of step run {claimed.id} refused: lease token changed"
                )
            self._ended(attempt, outcome, started)
        return self._outcomes()

    def _compute(self, attempt: Attempt) -> None:
        """Call ``attempt``'s step in the round's transaction."""
        started = time.monotonic()
        with logs.step_run(attempt.claimed, lease_owner=self.worker):
            metrics.step_started(attempt.claimed)
            try:
                with self.executor.running(attempt):
                    output = self.executor.compute(attempt)
            except Exception as exc:
                self.failed.append((attempt, exc, started))
                if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    # its input read failed (a statement timeout, a cancel) and took
                    # the round's transaction with it; nothing of the round is written
                    # yet (its members only read), so the rest go on in a fresh one
                    # and are charged nothing: only this one pays, as alone
                    self.group.rollback()
                    self.group.begin(attempt.flow.name, attempt.step.name)
            else:
                self.computed.append(
                    _Computed(attempt, output, started, time.monotonic() - started)
                )

    def _checkpoint(self) -> tuple[list[_Followed], list[tuple[Attempt, float]]]:
        """Every checkpoint in one message, then what each leads to in one batch (not
        committed); the attempts followed up, and those whose checkpoint was refused."""
        conn = self.conn
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            raise StoreError("a statement reading a step's inputs failed")
        done = store.checkpoint_put_many_if_leased(
            conn,
            [
                store.Checkpoint(
                    step_run_id=c.attempt.claimed.id,
                    job_id=c.attempt.claimed.job_id,
                    token=c.attempt.claimed.token,
                    output=c.output,
                    with_output=hands_on(c.attempt.flow, c.attempt.claimed),
                    ran=c.attempt.ran(),
                )
                for c in self.computed
            ],
            self.worker,
        )
        followed: list[_Followed] = []
        fenced: list[tuple[Attempt, float]] = []
        batch = store.Batch(conn)
        for c, checkpointed in zip(self.computed, done, strict=True):
            if checkpointed is None:
                fenced.append((c.attempt, c.started))
                continue
            with logs.step_run(c.attempt.claimed, lease_owner=self.worker):
                follow = self.executor.follow_up(c.attempt, checkpointed, batch)
                self.group.after_commit(follow.announced)
                if follow.ended_job is not None:
                    self.group.after_commit(
                        then=partial(self.executor.render_after_end, follow.ended_job)
                    )
            followed.append(_Followed(c.attempt, follow, c.started, c.ran))
        faults.hit("in_commit")
        batch.send()
        return followed, fenced

    def _outcomes(self) -> list[Outcome]:
        """The failures of the steps that raised (after the commit, as alone), then every
        outcome in the round's order."""
        for attempt, step_exc, started in self.failed:
            self._not_checkpointed(attempt, step_exc, started)
        return [self.results[id(attempt)] for attempt in self.attempts]

    def _not_checkpointed(self, attempt: Attempt, exc: Exception, started: float) -> None:
        """A step that raised: its failure handled after the round's commit, as alone."""
        with logs.step_run(attempt.claimed, lease_owner=self.worker):
            outcome = self.executor.not_checkpointed(attempt, exc)
            if outcome.ended_job is not None:
                self.executor.render_after_end(outcome.ended_job)
        self._ended(attempt, outcome, started)

    def _ended(
        self, attempt: Attempt, outcome: Outcome, started: float, ran: float | None = None
    ) -> None:
        claimed = attempt.claimed
        self.executor.heartbeat.unwatch(attempt.lease)
        took = time.monotonic() - started
        metrics.step_ended(claimed, outcome.kind, took)
        attempt.ended(outcome)
        if outcome.kind == "done":
            self.group.times.record(claimed.flow, claimed.step, took if ran is None else ran)
        self.results[id(attempt)] = outcome

    def _failed(self, exc: Exception) -> list[Outcome]:
        """A statement of the round failed: nothing of it commits; each goes again alone."""
        conn = self.conn
        if conn.broken or conn.closed:
            # the server ended our session: nothing committed, as for a single step
            self.group.abandon()
            lost = [(c.attempt, c.started) for c in self.computed]
            lost += [(a, s) for a, _, s in self.failed]
            for attempt, started in lost:
                with logs.step_run(attempt.claimed, lease_owner=self.worker):
                    outcome = self.executor.failures.disconnected(attempt, exc)
                self._ended(attempt, outcome, started)
            return [self.results[id(attempt)] for attempt in self.attempts]
        self.group.rollback()
        log.warning(
            "a round of %d checkpoints was rolled back (%s); its step runs go again one by one",
            len(self.computed),
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
        )
        for c in self.computed:
            # its output kept: only its checkpoint is written again, alone, the body is
            # not called again (invariant 20; a step without a context wrote nothing else)
            self.results[id(c.attempt)] = self.executor.run(c.attempt, c.output)
        self.group.commit()
        return self._outcomes()
