"""Execution: one claimed step run, fenced, to its checkpoint, retry or dead letter.

The step runs inside one transaction on the slot's connection. Its
checkpoint, its status change, the step runs it makes ready (announced with
them, :mod:`engine.transports.announce`) and any rows the step wrote through
``ctx.conn`` commit together, guarded by the lease token; a zero-row guard
rolls all of it back (invariant 5). With the PostgreSQL transport the
delivery is deleted and the next messages are sent in that same transaction.

The checkpoint's write and what it leads to (successors, an eager one
claimed for this slot, the job's end) are :mod:`engine.runner.checkpoint`;
the eager successor comes back on the :class:`Outcome`, for the slot's
runner to run next.

Alone (not in a group), the checkpoint's message sets a savepoint first: a
lock wait past ``lock_timeout``, a deadlock or a pooler's lost prepared
statement in the checkpoint or what follows it rolls back to it, and the
checkpoint alone is tried again (``ENGINE_CHECKPOINT_RETRIES``, backing off)
with the output the step returned and what it wrote through ``ctx.conn``,
while the lease holds; only then is the step run released, counted
(:meth:`engine.runner.failures.Failures.release_free`, invariant 20).

With several step runs in hand, quick ones share one transaction and one
COMMIT, each in its own savepoint (:mod:`engine.runner.group`): the
checkpoint then ends by releasing its savepoint, and what follows a commit
waits for the group's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg

from engine import store
from engine.errors import Contention, JobCancelled, LeaseLost
from engine.flow.retry import Cancel
from engine.infra import faults, logs, metrics
from engine.jobs.ending import render_report
from engine.jobs.plan import sources
from engine.runner.attempt import Attempt
from engine.runner.call import call_step
from engine.runner.checkpoint import FollowUp, follow_up, put_checkpoint
from engine.runner.failures import Failures
from engine.runner.group import GroupCommit
from engine.runner.outcome import Continuation, Outcome
from engine.runner.park import Park
from engine.runner.services import SlotServices
from engine.runner.timing import DbClock
from engine.transports.announce import announce_if_slot_free
from engine.waits.children import ChildSubmitter
from engine.waits.wait import Wait

log = logging.getLogger(__name__)


class Executor:
    """Runs claimed step runs on one slot (one connection, one heartbeat)."""

    def __init__(self, services: SlotServices) -> None:
        self.services = services
        self.conn = services.conn
        self.heartbeat = services.heartbeat
        self.worker = services.worker
        self.children = ChildSubmitter(services.settings, services.registry, services.transport)
        self.current: Attempt | None = None
        # when its steps ran, on the database's clock (the events ending their attempts)
        self.clock = DbClock()
        # a step run that ends short of its checkpoint, and one that waits
        self.failures = Failures(services)
        self.park = Park(self.failures)
        # the transaction quick step runs share (open only while the slot runs a group)
        self.group = GroupCommit(
            self.conn,
            services.transport,
            services.settings.group_commit_ms / 1000,
            give_back=self._give_back_lost,
        )
        # a step in a group without a transaction of its own: its savepoint is set
        # with its checkpoint (_savepoint), and is to be rolled back to on failure
        self._savepoint = False
        self._savepoint_set = False

    def run(self, attempt: Attempt, output: dict[str, Any] | None = None) -> Outcome:
        """Run ``attempt`` (its lease watched by the heartbeat) to an outcome.

        ``output``: its step returned that already (a pure step whose round was
        rolled back): only its checkpoint is written, the body is not run again.
        """
        claimed = attempt.claimed
        with logs.step_run(claimed, lease_owner=self.worker):
            self._savepoint_set = False
            metrics.step_started(claimed)
            started = time.monotonic()
            with self.running(attempt):
                try:
                    outcome = self._execute(attempt, output)
                finally:
                    self.heartbeat.unwatch(attempt.lease)
            took = time.monotonic() - started
            metrics.step_ended(claimed, outcome.kind, took)
            attempt.ended(outcome)
            if outcome.kind == "done":
                self.group.times.record(claimed.flow, claimed.step, self._quickness(attempt, took))
            if outcome.ended_job is not None:
                ended = outcome.ended_job
                if self.group.open:  # its checkpoint is not committed yet
                    self.group.after_commit(then=lambda: self.render_after_end(ended))
                else:
                    self.render_after_end(ended)
            return outcome

    @staticmethod
    def _quickness(attempt: Attempt, took: float) -> float:
        """How long ``attempt`` counts for deciding whether its step is quick (group commit).

        A step that takes no StepContext goes with a round when quick, and a round
        counts only its call (:mod:`engine.runner.rounds`): alone it is measured the
        same way, not with its own BEGIN, checkpoint and COMMIT. Measured whole, a
        loaded server's commit past the window made every first run look slow,
        and the slot never grouped again (a commit per step for good).
        """
        timing = attempt.timing
        pure = all(source.kind != "context" for source in attempt.step.inputs.values())
        if pure and timing.started is not None and timing.stopped is not None:
            return max(timing.stopped - timing.started, 0.0)
        return took

    @contextmanager
    def running(self, attempt: Attempt) -> Iterator[None]:
        """``attempt`` is the step run executing on this slot while in the block."""
        self.current = attempt
        try:
            with attempt.trace.current():
                yield
        finally:
            self.current = None

    def render_after_end(self, job_id: uuid.UUID) -> None:
        render_report(self.services.settings, job_id, self.services.registry)

    def _give_back_lost(self, attempts: list[Attempt]) -> None:
        """The members of a group that was rolled back: each again at once, at no charge.

        Their checkpoints were written and lost with the group through no
        fault of their own (a statement outside every savepoint failed).
        """
        for attempt in attempts:
            claimed = attempt.claimed
            with logs.step_run(claimed, lease_owner=self.worker):
                try:
                    # its body ran: a free release, counted (invariant 20)
                    self.failures.release_free(
                        attempt,
                        "its group's commit was rolled back by a neighbour's failure",
                        lost="lease lost after its group was rolled back",
                    )
                except Exception:
                    # left to its lease: the sweeper or a redelivery runs it again
                    log.warning("could not give back step run %s", claimed.id, exc_info=True)

    def _group_first(self) -> None:
        """Before any outcome but a checkpoint: the group's neighbours commit first.

        The step's own savepoint was rolled back already; what follows then
        runs in transactions of its own, as it would alone.
        """
        if self.group.open:
            self.group.commit()

    # -- the step ----------------------------------------------------------------------

    def _execute(self, attempt: Attempt, kept: dict[str, Any] | None = None) -> Outcome:
        claimed, step = attempt.claimed, attempt.step
        conn = self.conn
        followed: tuple[FollowUp, Continuation | None] | None = None
        # A step that takes no StepContext cannot write through the engine's
        # transaction, so its BEGIN need not cost a round trip of its own: it
        # travels with the checkpoint's first statements.
        if self.group.open and conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            # the group's transaction was aborted before this step began: it is
            # rolled back (its members go again at no charge), and this step
            # runs on its own rather than be charged for a statement not its own
            self.group.commit()
        sees_conn = kept is None and any(s.kind == "context" for s in step.inputs.values())
        # In a group every step has a savepoint, so a failure rolls back its own
        # writes only: the step's own transaction (a savepoint) for a step that
        # writes through ctx, else one set in its checkpoint's message.
        grouped = self.group.open
        # In a group, a step that reads its inputs (checkpoints not in hand) reads
        # them in its savepoint: a read that fails (a statement timeout, a cancel)
        # is its own failure and must not abort the group's transaction under its
        # neighbours' checkpoints.
        reads = grouped and kept is None and bool(sources(step) - attempt.known.keys())
        own_transaction = sees_conn or reads
        self._savepoint = grouped and not own_transaction
        computed: dict[str, Any] | None = None  # what the step returned, once it did
        try:
            # closed by the checkpoint, whose COMMIT travels with its last statements
            # (in a group: a RELEASE SAVEPOINT, the group commits later)
            with ExitStack() as transaction:

                def begin() -> None:
                    transaction.enter_context(conn.transaction())

                def commit_children() -> None:
                    transaction.close()
                    self._group_first()  # the park and its children commit now

                if own_transaction:
                    begin()
                try:
                    output = self.compute(attempt) if kept is None else kept
                    computed = output
                except Wait as exc:
                    if not exc.children or conn.broken or conn.closed:
                        raise
                    # its children commit with the park, in this transaction
                    return self.park.wait_children(attempt, exc, commit_children)
                followed = self._checkpoint(
                    attempt,
                    output,
                    None if own_transaction or grouped else begin,
                    transaction.close,
                )
        except Exception as exc:
            if conn.broken or conn.closed:
                # the server ended our session (idle-in-transaction timeout
                # after a pause, a restart, a network cut): nothing committed,
                # the group's neighbours neither
                self.group.abandon()
                return self.failures.disconnected(attempt, exc)
            if self._savepoint and self._savepoint_set:
                store.step_savepoint_rollback(conn)  # its own checkpoint's writes
            self._group_first()
            if isinstance(exc, Contention) and grouped and computed is not None and not sees_conn:
                # its checkpoint lost a lock wait in the group, and the step wrote nothing
                # else: alone now, its checkpoint again (with its tries), the body not again
                return self._execute(attempt, computed)
            return self.not_checkpointed(attempt, exc)
        assert followed is not None, "a step that returned has its checkpoint"
        follow, continuation = followed
        done = Outcome(
            "done", step_run_id=claimed.id, continuation=continuation, ended_job=follow.ended_job
        )
        waiting = follow.waiting_successor()
        if self.group.open:
            self.group.after_commit(
                follow.announced,
                attempt.receipt,
                attempt=attempt,
                successor=None if continuation is None else continuation.claimed.id,
                then=None if waiting is None else lambda: self.announce_waiting([waiting]),
            )
            return done
        follow.announced.publish_after_commit(conn)
        self.failures.ack_after_commit(attempt)
        if waiting is not None:
            self.announce_waiting([waiting])
        return done

    def announce_waiting(self, step_run_ids: list[uuid.UUID]) -> None:
        """Eager successors created pending, committed now: announced if their key has a
        slot free (their key's lock was only busy), else left to its holder's end."""
        try:
            announce_if_slot_free(self.conn, self.services.transport, step_run_ids)
        except Exception:
            # committed pending: the sweeper's backstop announces them
            log.warning("could not announce %d waiting successor(s)", len(step_run_ids))

    def compute(self, attempt: Attempt) -> dict[str, Any]:
        """Call the step with its inputs: its output as its checkpoint stores it, checked, and
        the lease still ours.

        An output JSON cannot carry fails here, in this step run's own attempt
        (:func:`~engine.runner.checkpoint.checkpoint_json`), before any statement
        of its checkpoint: a round's or a group's neighbours never see it.
        """
        # its attempt runs from here (its inputs read, then its call), not from its claim
        # (a batch's step runs wait their turn); a round sent back one by one runs it again,
        # and that run is the one its outcome records
        attempt.timing.start()
        try:
            with attempt.trace.body():
                return self._compute(attempt)
        finally:
            attempt.timing.stop()

    def _compute(self, attempt: Attempt) -> dict[str, Any]:
        data = call_step(self.conn, self.children, attempt)
        attempt.timing.finish()
        return data

    def not_checkpointed(self, attempt: Attempt, exc: Exception) -> Outcome:
        """The step stopped short of its checkpoint: fenced, cancelled, waiting or failed.

        A lock wait past ``lock_timeout`` or a deadlock, in the checkpoint that
        raised ``exc`` or in the statements recording the outcome here (a
        park, a retry, a cancel: each rolled back whole), is "not done, try
        again": the lease goes back with its attempt (invariant 18).
        """
        if isinstance(exc, Contention):
            # the engine's statement (a checkpoint, a child submitted) lost a lock wait
            return self.failures.contended(attempt, exc)
        try:
            return self._short_of_checkpoint(attempt, exc)
        except Contention as busy:
            return self.failures.contended(attempt, busy)

    def _short_of_checkpoint(self, attempt: Attempt, exc: Exception) -> Outcome:
        if isinstance(exc, LeaseLost):
            reason = str(exc) or "checkpoint refused: lease token changed"
            return self.failures.fenced(attempt, reason)
        if isinstance(exc, JobCancelled):
            # the heartbeat found the step run cancelled (and recorded it)
            self.failures.delete_delivery(attempt)
            return Outcome("cancelled", str(exc), attempt.claimed.id)
        if isinstance(exc, Cancel):
            return self.failures.cancel_job(attempt, exc.reason)
        if isinstance(exc, Wait):
            return self.park.wait(attempt, exc)
        return self.failures.failed(attempt, exc)

    def _checkpoint(
        self,
        attempt: Attempt,
        output: dict[str, Any],
        begin: Callable[[], None] | None,
        commit: Callable[[], None],
    ) -> tuple[FollowUp, Continuation | None]:
        """``begin`` (unless begun), checkpoint, schedule, announce and ``commit``.

        Returns what the checkpoint led to (what to publish after the commit,
        the job it ended) and the eager successor to run next, if any.
        """
        conn = self.conn
        # from here on, a step in a group has its savepoint (set in this message)
        self._savepoint_set = self._savepoint
        # Alone, the checkpoint sets a savepoint in its message too: a lock wait,
        # a deadlock or a pooler's lost prepared statement it meets is rolled back
        # to it and the checkpoint alone tried again, the body's output (and what
        # it wrote through ctx) kept, while the lease holds (invariant 20). In a
        # group its neighbours commit first; then its checkpoint alone is written
        # again (_execute) if the step wrote nothing through ctx, else it is
        # released, counted.
        retries = 0 if self.group.open else self.services.settings.checkpoint_retries
        tried = 0
        while True:
            try:
                follow = self._write_checkpoint(
                    attempt, output, begin, savepoint=self._savepoint or retries > 0
                )
                break
            except Contention as exc:
                begin = None  # begun already: what it holds is rolled back to the savepoint
                if tried >= retries or conn.broken or conn.closed or attempt.stop.is_set():
                    raise
                tried += 1
                store.step_savepoint_rollback(conn)
                log.info(
                    "checkpoint of step run %s not done (%s); trying it again (%d of %d), "
                    "its output in hand",
                    attempt.claimed.id,
                    str(exc).strip().splitlines()[0][:200],
                    tried,
                    retries,
                )
                # backing off; a lease lost meanwhile stops the wait, and the fenced
                # write then refuses the checkpoint
                attempt.stop.event.wait(min(0.1 * 2 ** (tried - 1), 2.0))
        commit()
        faults.hit("after_commit")
        # an external queue's publish and delete come between this commit and the
        # successor's start, and may outlast its lease: it is checked first
        return follow, follow.continuation(check_lease=not self.services.transport.transactional)

    def _write_checkpoint(
        self,
        attempt: Attempt,
        output: dict[str, Any],
        begin: Callable[[], None] | None,
        *,
        savepoint: bool,
    ) -> FollowUp:
        """The fenced checkpoint and what it leads to, written (not committed)."""
        conn = self.conn
        done = put_checkpoint(
            conn,
            attempt.flow,
            attempt.claimed,
            output,
            self.worker,
            begin=begin,
            savepoint=savepoint,
            ran=attempt.ran(),
        )
        # Inside a transport's own transaction nothing that follows needs an
        # answer: it goes as one batch, one message (not a pipeline, whose
        # statements reach the server one by one: see engine.store.batch), then
        # the COMMIT; messages out and the delivery gone in the same commit as
        # the checkpoint. An external queue gets outbox rows (their ids are read
        # back) and the publish and delete come after the commit.
        batch = store.Batch(conn) if self.services.transport.transactional else None
        follow = self.follow_up(attempt, done, batch)
        faults.hit("in_commit")
        if batch is not None:
            batch.send()
        return follow

    def follow_up(
        self, attempt: Attempt, done: store.Checkpointed, batch: store.Batch | None
    ) -> FollowUp:
        """What the checkpoint leads to (:func:`engine.runner.checkpoint.follow_up`), and the
        delivery's delete, in its transaction (not committed)."""
        follow = follow_up(
            self.conn,
            self.services.settings,
            self.services.transport,
            self.worker,
            attempt.flow,
            attempt.claimed,
            done,
            batch,
            may_continue=self.services.may_continue(),
        )
        self.failures.ack_in_commit(attempt, batch if batch is not None else self.conn)
        return follow
