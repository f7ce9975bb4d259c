"""Execution: one claimed step run, fenced, to its checkpoint, retry or dead letter.

The step runs inside one transaction on the slot's connection. Its
checkpoint, its status change, the step runs it makes ready (announced with
them, :mod:`engine.transports.announce`) and any rows the step wrote through
``ctx.conn`` commit together, guarded by the lease token; a zero-row guard
rolls all of it back (invariant 5). With the PostgreSQL transport the
delivery is deleted and the next messages are sent in that same transaction.

Eager successors (``ENGINE_EAGER_SUCCESSORS``, on by default): of the step
runs a checkpoint makes ready, the slot creates one already leased to itself
(a conditional insert, in the checkpoint's own transaction and under the
job's row lock, so no other worker can have seen it pending) and runs it
next with the checkpoint it already holds. That run has no message at all:
its lease keeps it, and should the slot die the lease lapses and the sweeper
announces it (invariant 9). The others are announced as usual.

With several step runs in hand, quick ones share one transaction and one
COMMIT, each in its own savepoint (:mod:`engine.runner.group`): the
checkpoint then ends by releasing its savepoint, and what follows a commit
waits for the group's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import psycopg
from pydantic import BaseModel, TypeAdapter, ValidationError

from engine import store
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.errors import JobCancelled, LeaseLost
from engine.flow import Flow, Step
from engine.flow.registry import Registry
from engine.flow.retry import Cancel, Fail, RetryPolicy
from engine.infra import faults, logs, metrics
from engine.jobs.ending import job_ended, render_report
from engine.jobs.plan import Outputs, raw_inputs, schedule_ready, sources, upstream_outputs
from engine.runner.context import StepContext
from engine.runner.group import GroupCommit
from engine.runner.lease import Heartbeat, Lease
from engine.runner.outcome import Continuation, Outcome
from engine.runner.park import Waits
from engine.store.rows import Claimed, NewStepRun, QueuedClaim
from engine.store.status import EventKind, JobStatus
from engine.transports.announce import Announced, announce, announce_freed
from engine.transports.base import Transport
from engine.waits.children import ChildSubmitter
from engine.waits.wait import Wait

log = logging.getLogger(__name__)


def hands_on(flow: Flow, claimed: Claimed) -> bool:
    """Is the checkpoint read back with its write: a single-run step with a successor?

    A single-run step's stored checkpoint, handed on, spares its eager
    successor a read of its input.
    """
    successor = any(claimed.step in s.after for s in flow.steps.values())
    return successor and claimed.fanout_key == ""


class Executor(Waits):
    """Runs claimed step runs on one slot (one connection, one heartbeat)."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: Registry,
        transport: Transport,
        worker: str,
        conn: psycopg.Connection[Any],
        heartbeat: Heartbeat,
        alerts: AlertRecorder,
        may_continue: Callable[[], bool] = lambda: True,
        on_outage: Callable[[BaseException, str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.transport = transport
        self.worker = worker
        self.conn = conn
        self.heartbeat = heartbeat
        self.alerts = alerts
        self.children = ChildSubmitter(settings, registry, transport)
        self.current: Lease | None = None
        # asked before claiming an eager successor (the worker says no once stopping)
        self.may_continue = may_continue
        # told when the database went away under a step (the worker pauses receiving)
        self.on_outage = on_outage
        # set by a checkpoint that claimed an eager successor, for the delivery to run
        self.continuation: Continuation | None = None
        self.ended_job: uuid.UUID | None = None  # set when this step run ended its job
        # the transaction quick step runs share (open only while the slot runs a group)
        self.group = GroupCommit(conn, transport, settings.group_commit_ms / 1000)
        # a step in a group without a transaction of its own: its savepoint is set
        # with its checkpoint (_savepoint), and is to be rolled back to on failure
        self._savepoint = False
        self._savepoint_set = False
        self._default_policy = RetryPolicy(
            max_attempts=settings.max_attempts,
            base_delay_s=settings.retry_base_delay_s,
            max_delay_s=settings.retry_max_delay_s,
        )

    def run(self, flow: Flow, step: Step, lease: Lease, known: Outputs) -> Outcome:
        """Run the step run of ``lease`` (which the heartbeat watches) to an outcome."""
        claimed = lease.claimed
        with logs.step_run(claimed, lease_owner=self.worker):
            self.continuation = None
            self._savepoint_set = False
            self.current = lease
            self.ended_job = None
            metrics.step_started(claimed)
            started = time.monotonic()
            try:
                outcome = self._execute(flow, step, lease, known)
            finally:
                self.heartbeat.unwatch(lease)
                self.current = None
            took = time.monotonic() - started
            metrics.step_ended(claimed, outcome.kind, took)
            if outcome.kind == "done":
                self.group.times.record(claimed.flow, claimed.step, took)
            if self.ended_job is not None:
                ended = self.ended_job
                if self.group.open:  # its checkpoint is not committed yet
                    self.group.after_commit(then=lambda: self.render_after_end(ended))
                else:
                    self.render_after_end(ended)
            return outcome

    def render_after_end(self, job_id: uuid.UUID) -> None:
        render_report(self.settings, job_id, self.registry)

    def _group_first(self) -> None:
        """Before any outcome but a checkpoint: the group's neighbours commit first.

        The step's own savepoint was rolled back already; what follows then
        runs in transactions of its own, as it would alone.
        """
        if self.group.open:
            self.group.commit()

    # -- the step ----------------------------------------------------------------------

    def _execute(self, flow: Flow, step: Step, lease: Lease, known: Outputs) -> Outcome:
        claimed = lease.claimed
        conn = self.conn
        announced: Announced | None = None
        # A step that takes no StepContext cannot write through the engine's
        # transaction, so its BEGIN need not cost a round trip of its own: it
        # travels with the checkpoint's first statements.
        sees_conn = any(s.kind == "context" for s in step.inputs.values())
        # In a group every step has a savepoint, so a failure rolls back its own
        # writes only: the step's own transaction (a savepoint) for a step that
        # writes through ctx, else one set in its checkpoint's message.
        grouped = self.group.open
        self._savepoint = grouped and not sees_conn
        try:
            # closed by the checkpoint, whose COMMIT travels with its last statements
            # (in a group: a RELEASE SAVEPOINT, the group commits later)
            with ExitStack() as transaction:

                def begin() -> None:
                    transaction.enter_context(conn.transaction())

                def commit_children() -> None:
                    transaction.close()
                    self._group_first()  # the park and its children commit now

                if sees_conn:
                    begin()
                try:
                    output = self.compute(flow, step, lease, known)
                except Wait as exc:
                    if not exc.children or conn.broken or conn.closed:
                        raise
                    # its children commit with the park, in this transaction
                    return self._wait_children(lease, exc, commit_children)
                announced = self._checkpoint(
                    flow,
                    claimed,
                    output,
                    lease,
                    None if sees_conn or grouped else begin,
                    transaction.close,
                )
        except Exception as exc:
            if conn.broken or conn.closed:
                # the server ended our session (idle-in-transaction timeout
                # after a pause, a restart, a network cut): nothing committed,
                # the group's neighbours neither
                self.group.abandon()
                return self.disconnected(claimed, exc)
            if self._savepoint and self._savepoint_set:
                store.step_savepoint_rollback(conn)  # its own checkpoint's writes
            self._group_first()
            return self.not_checkpointed(step, lease, exc)
        if self.group.open:
            self.group.after_commit(announced, lease.receipt)
            return Outcome("done", step_run_id=claimed.id)
        if announced is not None:
            announced.publish_after_commit(conn)
        self._ack_after_commit(lease)
        return Outcome("done", step_run_id=claimed.id)

    def compute(self, flow: Flow, step: Step, lease: Lease, known: Outputs) -> BaseModel:
        """Call the step with its inputs: its output, checked, and the lease still ours."""
        claimed = lease.claimed
        ctx = StepContext(
            conn=self.conn,
            job_id=claimed.job_id,
            step_run_id=claimed.id,
            step=claimed.step,
            fanout_key=claimed.fanout_key,
            attempt=claimed.attempt,
            max_attempts=claimed.max_attempts,
            fingerprint=claimed.fingerprint,
            worker=self.worker,
            stop=lease.stop,
            children=self.children,
        )
        output = step.fn(**self._inputs(flow, step, claimed, ctx, known))
        if not isinstance(output, step.output):
            raise Fail(
                f"step {step.name!r} returned {type(output).__name__}, "
                f"expected {step.output.__name__}"
            )
        ctx.check()
        lease.finishing = True
        return output

    def not_checkpointed(self, step: Step, lease: Lease, exc: Exception) -> Outcome:
        """The step stopped short of its checkpoint: fenced, cancelled, waiting or failed."""
        claimed = lease.claimed
        if isinstance(exc, LeaseLost):
            reason = str(exc) or "checkpoint refused: lease token changed"
            return self.fenced(claimed, reason, lease)
        if isinstance(exc, JobCancelled):
            # the heartbeat found the step run cancelled (and recorded it)
            self.delete_delivery(lease)
            return Outcome("cancelled", str(exc), claimed.id)
        if isinstance(exc, Cancel):
            return self._cancel_job(lease, exc.reason)
        if isinstance(exc, Wait):
            return self._wait(lease, exc)
        return self._failed(step, lease, exc)

    def _inputs(
        self, flow: Flow, step: Step, claimed: Claimed, ctx: StepContext, known: Outputs
    ) -> dict[str, Any]:
        outputs = upstream_outputs(self.conn, claimed.job_id, sources(step), known)
        kwargs: dict[str, Any] = {}
        try:
            raw = raw_inputs(step, claimed.params, outputs)
            for param, source in step.inputs.items():
                if source.kind == "params":
                    kwargs[param] = flow.params.model_validate(raw[param])
                elif source.kind == "context":
                    kwargs[param] = ctx
                elif source.kind == "item":
                    kwargs[param] = TypeAdapter(source.annotation).validate_python(claimed.item)
                elif source.step is not None:
                    model = flow.steps[source.step].output
                    value = raw[param]
                    kwargs[param] = (
                        [model.model_validate(v) for v in value]
                        if source.kind == "gather"
                        else model.model_validate(value)
                    )
        except (ValidationError, IndexError) as exc:
            # a checkpoint that no longer fits its model (the flow changed under a
            # running job) will not fit on the next attempt either
            raise Fail(f"inputs of step {step.name!r} do not validate: {exc}") from exc
        return kwargs

    def _checkpoint(
        self,
        flow: Flow,
        claimed: Claimed,
        output: BaseModel,
        lease: Lease,
        begin: Callable[[], None] | None,
        commit: Callable[[], None],
    ) -> Announced:
        """``begin`` (unless begun), checkpoint, schedule, announce and ``commit``.

        Returns what the announcement left to publish after the commit.
        """
        conn = self.conn
        # from here on, a step in a group has its savepoint (set in this message)
        self._savepoint_set = self._savepoint
        done = store.checkpoint_put_if_leased(
            conn,
            step_run_id=claimed.id,
            job_id=claimed.job_id,
            token=claimed.token,
            output=output.model_dump(mode="json"),
            worker=self.worker,
            with_output=hands_on(flow, claimed),
            begin=begin,
            savepoint=self._savepoint,
        )
        if done is None:
            raise LeaseLost(f"checkpoint of step run {claimed.id} refused: lease token changed")
        # Inside a transport's own transaction nothing that follows needs an
        # answer: it goes as one batch, one message (not a pipeline, whose
        # statements reach the server one by one: see engine.store.batch), then
        # the COMMIT; messages out and the delivery gone in the same commit as
        # the checkpoint. An external queue gets outbox rows (their ids are read
        # back) and the publish and delete come after the commit.
        inside = self.transport.transactional
        batch = store.Batch(conn) if inside else None
        announced, queued, known = self.follow_up(flow, claimed, lease, done, batch)
        faults.hit("in_commit")
        if batch is not None:
            batch.send()
        commit()
        faults.hit("after_commit")
        # an external queue's publish and delete come between this commit and the
        # successor's start, and may outlast its lease: it is checked first
        self.continue_with(queued, known, check_lease=not inside)
        return announced

    def follow_up(
        self,
        flow: Flow,
        claimed: Claimed,
        lease: Lease,
        done: store.Checkpointed,
        batch: store.Batch | None,
    ) -> tuple[Announced, QueuedClaim | None, Outputs]:
        """What a checkpoint leads to, written in its transaction (not committed).

        The step runs it made ready (one claimed by this slot, the rest
        announced), the job's end, the slot its concurrency key frees, the
        delivery's delete. Statements that need no answer go to ``batch``
        when given (a parent its job's end wakes is announced once it is
        sent). Returns what to publish after the commit, the eager
        successor's claim (readable once sent) and the checkpoints it will be
        handed.
        """
        conn = self.conn
        runs: list[NewStepRun] = []
        job_complete = False
        known: Outputs = {}
        if done.job_status in (JobStatus.PENDING, JobStatus.RUNNING):
            mine = done.counts.get(claimed.step)
            if done.output is not None and mine is not None and mine.total == 1:
                known = {claimed.step: [(claimed.fanout_key, done.output)]}
            scheduled = schedule_ready(
                conn, flow, claimed.job_id, claimed.params, self.settings, done.counts, known
            )
            runs, job_complete = scheduled.runs, scheduled.job_complete
        eager = runs[0] if runs and self.settings.eager_successors and self.may_continue() else None
        published = runs[1:] if eager is not None else runs
        queued: QueuedClaim | None = None
        freed = Announced(self.transport)
        if claimed.concurrency_key is not None and (
            eager is None or eager.concurrency_key != claimed.concurrency_key
        ):
            # the slot this step run held is free in this commit: its next waiter
            # is announced with it (an eager successor of the same key keeps it)
            freed = announce_freed(conn, self.transport, [claimed.job_id])
        faults.hit("before_commit")
        sink: store.Executes = batch if batch is not None else conn
        if job_complete:
            freed += self._finish_job(claimed, batch)
        if eager is not None:
            queued = self._claim_eager(claimed, eager, sink)
        announced = freed + announce(
            sink, self.transport, job_id=claimed.job_id, new_runs=published
        )
        self._ack_in_commit(lease, sink)
        return announced, queued, known

    def _claim_eager(self, claimed: Claimed, run: NewStepRun, sink: store.Executes) -> QueuedClaim:
        """Create ``run`` already leased to this slot, in the checkpoint's transaction."""
        return store.step_run_insert_claimed(
            sink,
            run,
            job_id=claimed.job_id,
            flow=claimed.flow,
            params=claimed.params,
            worker=self.worker,
            lease_s=self.settings.lease_s,
        )

    def continue_with(
        self, queued: QueuedClaim | None, known: Outputs, *, check_lease: bool = False
    ) -> None:
        # read after the commit: the claim is real only once it has committed
        if queued is None:
            return
        eager = queued.result()
        if eager is None:
            # Over its concurrency limit it was created pending, to be announced
            # by its key's holder. Otherwise its step key existed: scheduling
            # under the job lock makes that impossible, and were it to happen
            # that run is someone else's.
            log.info("eager successor not claimed here (over its concurrency limit, or taken)")
            return
        self.continuation = Continuation(eager, known, check_lease)

    def _finish_job(self, claimed: Claimed, batch: store.Batch | None) -> Announced:
        """End the job; a parent step run waiting for it is woken (in ``batch`` when given)."""
        store.job_finish_if_active_logged(
            batch if batch is not None else self.conn,
            claimed.job_id,
            JobStatus.DONE,
            event=EventKind.JOB_DONE,
            worker=self.worker,
        )
        self.ended_job = claimed.job_id
        # nothing is left to cancel, and the step's own slot was freed by follow_up
        ended = job_ended(
            self.conn,
            self.transport,
            claimed.job_id,
            cancel_rest=False,
            free_slots=False,
            batch=batch,
        )
        return ended.announced
