"""A round of pure step runs, checkpointed together: one message for their checkpoints.

A group commit (:mod:`engine.runner.group`) shares one COMMIT among the
quick step runs a slot holds, but each still costs its own round trips: its
checkpoint, then what the checkpoint leads to. For steps that take no
:class:`~engine.runner.context.StepContext` (they write nothing through the engine's
transaction, so nothing of theirs needs a savepoint), the slot does better:
it calls every step of the round first, then sends all their checkpoints in
one message (:func:`~engine.store.checkpoint_put_many_if_leased`, each guarded
by its own token, in job order), schedules each, sends everything that
follows in one batch, and commits once.

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
from engine.flow import Flow, Step
from engine.infra import faults, logs, metrics
from engine.jobs.plan import Outputs
from engine.runner.checkpoint import FollowUp, hands_on
from engine.runner.execution import Executor
from engine.runner.lease import Lease
from engine.runner.outcome import Outcome

log = logging.getLogger(__name__)


@dataclass
class RoundMember:
    """A claimed step run of the round, its lease watched until its outcome."""

    flow: Flow
    step: Step
    lease: Lease
    known: Outputs


def pure(step: Step) -> bool:
    """Does ``step`` take no StepContext (it cannot write through the engine's transaction)?"""
    return all(source.kind != "context" for source in step.inputs.values())


@dataclass
class _Computed:
    member: RoundMember
    output: dict[str, Any]  # as its checkpoint stores it, checked by its own attempt
    started: float
    ran: float  # the step's own call: what decides whether it is quick


@dataclass
class _Followed:
    member: RoundMember
    follow: FollowUp
    started: float
    ran: float


def run_round(executor: Executor, members: list[RoundMember]) -> list[Outcome]:
    """Run ``members`` (pure, quick, of distinct jobs, in job order); an outcome for each.

    Each outcome carries the eager successor its checkpoint claimed, if any.
    """
    conn = executor.conn
    group = executor.group
    group.commit()  # nothing of an earlier group shares this round's transaction
    group.begin(members[0].flow.name, members[0].step.name)
    computed: list[_Computed] = []
    failed: list[tuple[RoundMember, Exception, float]] = []
    for member in members:
        claimed = member.lease.claimed
        started = time.monotonic()
        with logs.step_run(claimed, lease_owner=executor.worker):
            metrics.step_started(claimed)
            try:
                with executor.running(member.lease):
                    output = executor.compute(member.flow, member.step, member.lease, member.known)
            except Exception as exc:
                failed.append((member, exc, started))
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    # its input read failed (a statement timeout, a cancel) and took
                    # the round's transaction with it; nothing of the round is written
                    # yet (its members only read), so the rest go on in a fresh one
                    # and are charged nothing: only this one pays, as alone
                    group.rollback()
                    group.begin(member.flow.name, member.step.name)
            else:
                computed.append(_Computed(member, output, started, time.monotonic() - started))
    followed: list[_Followed] = []
    fenced: list[tuple[RoundMember, float]] = []
    try:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            raise StoreError("a statement reading a step's inputs failed")
        done = store.checkpoint_put_many_if_leased(
            conn,
            [
                store.Checkpoint(
                    step_run_id=c.member.lease.claimed.id,
                    job_id=c.member.lease.claimed.job_id,
                    token=c.member.lease.claimed.token,
                    output=c.output,
                    with_output=hands_on(c.member.flow, c.member.lease.claimed),
                    ran=c.member.lease.ran(),
                )
                for c in computed
            ],
            executor.worker,
        )
        batch = store.Batch(conn)
        for c, checkpointed in zip(computed, done, strict=True):
            claimed = c.member.lease.claimed
            if checkpointed is None:
                fenced.append((c.member, c.started))
                continue
            with logs.step_run(claimed, lease_owner=executor.worker):
                follow = executor.follow_up(
                    c.member.flow, claimed, c.member.lease, checkpointed, batch
                )
                group.after_commit(follow.announced)
                if follow.ended_job is not None:
                    group.after_commit(then=partial(executor.render_after_end, follow.ended_job))
            followed.append(_Followed(c.member, follow, c.started, c.ran))
        faults.hit("in_commit")
        batch.send()
    except Exception as exc:
        return _round_failed(executor, members, computed, failed, exc)
    group.commit()
    faults.hit("after_commit")
    results: dict[int, Outcome] = {}
    waiting: list[uuid.UUID] = []
    for f in followed:
        claimed = f.member.lease.claimed
        outcome = Outcome("done", step_run_id=claimed.id, continuation=f.follow.continuation())
        if (successor := f.follow.waiting_successor()) is not None:
            waiting.append(successor)
        # quick or not by its own call: the round's shared statements are not its own
        _ended(executor, f.member, outcome, f.started, f.ran)
        results[id(f.member)] = outcome
    if waiting:
        executor.announce_waiting(waiting)
    for member, started in fenced:
        claimed = member.lease.claimed
        with logs.step_run(claimed, lease_owner=executor.worker):
            outcome = executor.failures.fenced(
                member.lease, f"checkpoint of step run {claimed.id} refused: lease token changed"
            )
        _ended(executor, member, outcome, started)
        results[id(member)] = outcome
    for member, raised, started in failed:
        results[id(member)] = _not_checkpointed(executor, member, raised, started)
    return [results[id(member)] for member in members]


def _not_checkpointed(
    executor: Executor, member: RoundMember, exc: Exception, started: float
) -> Outcome:
    """A step that raised: its failure handled after the round's commit, as alone."""
    claimed = member.lease.claimed
    with logs.step_run(claimed, lease_owner=executor.worker):
        outcome = executor.not_checkpointed(member.step, member.lease, exc)
        if outcome.ended_job is not None:
            executor.render_after_end(outcome.ended_job)
    _ended(executor, member, outcome, started)
    return outcome


def _ended(
    executor: Executor,
    member: RoundMember,
    outcome: Outcome,
    started: float,
    ran: float | None = None,
) -> None:
    claimed = member.lease.claimed
    executor.heartbeat.unwatch(member.lease)
    took = time.monotonic() - started
    metrics.step_ended(claimed, outcome.kind, took)
    if outcome.kind == "done":
        executor.group.times.record(claimed.flow, claimed.step, took if ran is None else ran)


def _round_failed(
    executor: Executor,
    members: list[RoundMember],
    computed: list[_Computed],
    failed: list[tuple[RoundMember, Exception, float]],
    exc: Exception,
) -> list[Outcome]:
    """A statement of the round failed: nothing of it commits; each goes again alone."""
    conn = executor.conn
    results: dict[int, Outcome] = {}
    if conn.broken or conn.closed:
        # the server ended our session: nothing committed, as for a single step
        executor.group.abandon()
        lost = [(c.member, c.started) for c in computed] + [(m, s) for m, _, s in failed]
        for member, started in lost:
            claimed = member.lease.claimed
            with logs.step_run(claimed, lease_owner=executor.worker):
                outcome = executor.failures.disconnected(member.lease, exc)
            _ended(executor, member, outcome, started)
            results[id(member)] = outcome
        return [results[id(member)] for member in members]
    else:
        executor.group.rollback()
        log.warning(
            "a round of %d checkpoints was rolled back (%s); its step runs go again one by one",
            len(computed),
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
        )
        for c in computed:
            # its output kept: only its checkpoint is written again, alone, the body is
            # not called again (invariant 20; a step without a context wrote nothing else)
            outcome = executor.run(
                c.member.flow, c.member.step, c.member.lease, c.member.known, c.output
            )
            results[id(c.member)] = outcome
        executor.group.commit()
    for member, step_exc, started in failed:
        results[id(member)] = _not_checkpointed(executor, member, step_exc, started)
    return [results[id(member)] for member in members]
