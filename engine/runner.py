"""One delivery, start to end: decode, claim, run the step fenced, schedule, ack.

The step runs inside one transaction on the executor's connection. Its
checkpoint, its status change, the step runs it makes ready (with their
outbox rows) and any rows the step wrote through ``ctx.conn`` commit together,
guarded by the lease token; a zero-row guard rolls all of it back
(invariant 5). With the PostgreSQL transport the delivery is deleted and the
next messages are sent in that same transaction.

Eager successors (``ENGINE_EAGER_SUCCESSORS``, on by default): of the step
runs a checkpoint makes ready, the slot creates one already leased to itself
(a conditional insert, in the checkpoint's own transaction and under the
job's row lock, so no other worker can have seen it pending) and runs it
next with the checkpoint it already holds. That run has no message at all:
its lease keeps it, and should the slot die the lease lapses and the sweeper
announces it (invariant 9). The others are published as usual.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from pydantic import BaseModel, TypeAdapter, ValidationError

from engine import db, faults, store
from engine import store as job_store  # one namespace; two names keep this file's body as it is
from engine.alerts import Alert, AlertSink
from engine.config import Settings
from engine.context import StepContext
from engine.errors import DefinitionError, JobCancelled, LeaseLost, StoreError, UnknownFlow
from engine.flow import Flow, Step
from engine.heartbeat import Heartbeat, Lease
from engine.messages import MalformedMessage, StepMessage
from engine.outage import is_outage
from engine.outbox import relay
from engine.registry import Registry
from engine.retry import Cancel, Fail, Retry, RetryPolicy
from engine.schedule import Outputs, schedule_ready
from engine.store import Claimed, ClaimRefused, NewStepRun, QueuedClaim
from engine.store import dead_letter_insert_message_logged as record_dead_message
from engine.store.models import EventKind, JobStatus
from engine.transports.base import Outgoing, Received, Transport

log = logging.getLogger(__name__)


class _Fenced(Exception):
    """The fenced write matched zero rows: our lease token is no longer current."""


@dataclass(frozen=True)
class Outcome:
    """What handling one delivery came to (for logs, tests and metrics)."""

    kind: str  # done | retried | dead | fenced | cancelled | refused | dropped | malformed
    detail: str = ""
    step_run_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Continuation:
    """An eager successor this slot claimed in its last checkpoint's commit."""

    claimed: Claimed
    known: Outputs  # checkpoints in hand, which spare the successor a read
    # the lease is checked (and renewed) before the successor starts when work
    # outside the commit (an external transport's publish and delete) came between
    check_lease: bool = False


def claim(
    conn: psycopg.Connection[Any],
    message: StepMessage,
    worker: str,
    lease_s: float,
    runnable: Sequence[str],
) -> Claimed | ClaimRefused:
    """Claim the step run of ``message`` and commit (invariant 2).

    On an autocommit connection (the worker's) the claim, the job start and
    the claim event are one statement, so one round trip; otherwise they run
    in a transaction of their own. Only jobs of a ``flow:version`` in
    ``runnable`` are claimed (a refusal costs no attempt). Losing is normal:
    zero rows, a serialization failure (SQLSTATE 40001), a deadlock or a lock
    wait past ``lock_timeout`` are all "not claimed".
    """
    try:
        with nullcontext() if conn.autocommit else conn.transaction():
            result = store.step_claim_if_available(
                conn,
                step_run_id=message.step_run_id,
                job_id=message.job_id,
                worker=worker,
                lease_s=lease_s,
                runnable=runnable,
            )
            if isinstance(result, ClaimRefused) and result.reason != "unknown":
                job_store.event_insert(
                    conn,
                    EventKind.CLAIM_REFUSED,
                    job_id=message.job_id,
                    step_run_id=message.step_run_id,
                    worker=worker,
                    detail={"reason": result.reason},
                )
            return result
    except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
        return ClaimRefused("race")
    except StoreError as exc:
        if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
            return ClaimRefused("race")
        raise


def error_record(exc: BaseException, attempt: int) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "message": str(exc)[:4000],
        "traceback": "".join(traceback.format_exception(exc))[-16000:],
        "attempt": attempt,
    }


class StepRunner:
    """Handles deliveries on one executor slot (one connection, one heartbeat)."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: Registry,
        transport: Transport,
        worker: str,
        conn: psycopg.Connection[Any],
        heartbeat: Heartbeat,
        alert: AlertSink,
        may_continue: Callable[[], bool] = lambda: True,
        on_outage: Callable[[BaseException, str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.transport = transport
        self.worker = worker
        self.conn = conn
        self.heartbeat = heartbeat
        self.alert = alert
        self.current: Lease | None = None
        # asked before claiming an eager successor (the worker says no once stopping)
        self.may_continue = may_continue
        # told when the database went away under a step (the worker pauses receiving)
        self.on_outage = on_outage
        # set by a checkpoint that claimed an eager successor: run it with run_continuation()
        self.continuation: Continuation | None = None
        self.ended_job: uuid.UUID | None = None  # set when this delivery ended its job
        self.runnable = registry.runnable()
        self._default_policy = RetryPolicy(
            max_attempts=settings.max_attempts,
            base_delay_s=settings.retry_base_delay_s,
            max_delay_s=settings.retry_max_delay_s,
        )

    # -- the delivery ------------------------------------------------------------------

    def handle(self, received: Received) -> Outcome:
        try:
            message = StepMessage.decode(received.body)
        except MalformedMessage as exc:
            return self._malformed(received, str(exc))
        result = claim(self.conn, message, self.worker, self.settings.lease_s, self.runnable)
        if isinstance(result, ClaimRefused):
            return self._refused(received, message, result)
        faults.hit("after_claim")
        return self._run(result, received.receipt, {})

    def run_continuation(self) -> Outcome | None:
        """Run the eager successor the last step claimed; ``None`` if there is none."""
        continuation, self.continuation = self.continuation, None
        if continuation is None:
            return None
        claimed = continuation.claimed
        if continuation.check_lease:
            # An external transport's publish and delete came between the
            # commit that claimed it and now, and may have outlasted its lease
            # (invariant 9): renew it, or leave it to whoever reclaimed it.
            expires = store.lease_extend_if_owner(
                self.conn, claimed.id, claimed.token, self.settings.lease_s
            )
            if expires is None:
                return self._fenced(claimed, "eager successor's lease lapsed before it started")
        return self._run(claimed, None, continuation.known)

    def _run(self, claimed: Claimed, receipt: str | None, known: Outputs) -> Outcome:
        self.continuation = None
        try:
            flow = self.registry.get(claimed.flow)
            step = flow.steps[claimed.step]
        except (UnknownFlow, KeyError) as exc:
            # a worker deployed without this flow must not hold it: give it back
            log.error("cannot run %s/%s here: %s", claimed.flow, claimed.step, exc)
            self.give_back(claimed, receipt, reason=f"flow or step not registered here: {exc}")
            return Outcome("refused", f"flow or step not registered: {exc}", claimed.id)
        lease = Lease(claimed, receipt)
        self.current = lease
        self.ended_job = None
        self.heartbeat.watch(lease)
        try:
            outcome = self._execute(flow, step, lease, known)
        finally:
            self.heartbeat.unwatch()
            self.current = None
        if self.ended_job is not None and self.settings.report_on_end:
            self._render_report(self.ended_job)
        return outcome

    def give_back(
        self,
        claimed: Claimed,
        receipt: str | None,
        conn: psycopg.Connection[Any] | None = None,
        *,
        reason: str,
    ) -> bool:
        """Release the lease at once and make the step run visible to other workers.

        The release and its ``released`` event (with ``reason``) commit
        together. A delivery is released; an eager successor, which has none,
        is announced with a new message. ``False``: the lease was lost already.
        """
        conn = conn if conn is not None else self.conn
        with conn.transaction():
            # the attempt comes back with the lease: giving back is not the step's fault
            if not store.lease_release_if_owner(conn, claimed.id, claimed.token):
                return False
            job_store.step_event_insert(
                conn, EventKind.RELEASED, claimed, worker=self.worker, detail={"reason": reason}
            )
        if receipt is not None:
            self.transport.release([receipt])
        else:
            message = StepMessage(job_id=claimed.job_id, step_run_id=claimed.id)
            self.transport.publish(None, [Outgoing(message)])
        return True

    def _delete_delivery(self, lease: Lease, conn: psycopg.Connection[Any] | None = None) -> None:
        # an eager successor came with no message: nothing to delete
        if lease.receipt is not None:
            self.transport.delete([lease.receipt], conn)

    def _render_report(self, job_id: uuid.UUID) -> None:
        # the books are committed; a report that fails to render is logged, never retried
        from engine.reports import render_index, render_job_report

        try:
            render_job_report(self.settings, job_id, registry=self.registry)
            render_index(self.settings)
        except Exception:
            log.warning("could not render the report of job %s", job_id, exc_info=True)

    def _malformed(self, received: Received, reason: str) -> Outcome:
        record_dead_message(self.conn, self.worker, received, reason)
        self.transport.dead_letter(received, reason)
        log.warning("malformed message %s dead-lettered: %s", received.message_id, reason)
        self.alert(Alert(reason=f"malformed message {received.message_id}: {reason}"))
        return Outcome("malformed", reason)

    def _refused(self, received: Received, message: StepMessage, refused: ClaimRefused) -> Outcome:
        if refused.reason == "unknown":
            with self.conn.transaction():
                job_store.event_insert(
                    self.conn,
                    EventKind.MESSAGE_DROPPED,
                    worker=self.worker,
                    detail={
                        "reason": "unknown step run",
                        "step_run_id": str(message.step_run_id),
                        "job_id": str(message.job_id),
                    },
                )
            log.info("dropped message for unknown step run %s", message.step_run_id)
            self.transport.delete([received.receipt])
            return Outcome("dropped", "unknown step run", message.step_run_id)
        if refused.reason == "finished":
            self.transport.delete([received.receipt])
        elif refused.reason == "not_runnable":
            # A worker of another deploy (rolling update) can run it. A fresh
            # copy, delayed, replaces this one: returning the same copy would
            # count receives, and SQS would move it to its dead-letter queue.
            self.transport.publish(None, [Outgoing(message, self.settings.refusal_delay_s)])
            self.transport.delete([received.receipt])
        elif refused.reason == "race":
            # a lock wait or a deadlock lost to another transaction: soon again
            self.transport.extend([received.receipt], 1.0)
        elif refused.reason == "not_due" and refused.retry_in_s > 0:
            # come back when the backoff ends rather than after a full visibility timeout
            self.transport.extend([received.receipt], min(refused.retry_in_s + 0.5, 43_000))
        elif refused.reason == "held":
            # Leave the copy as a backup should the holder die, but hidden for long:
            # each return counts as a receive, and on SQS too many receives move it
            # to the dead-letter queue while the step is still running. Liveness
            # does not rest on it: the sweeper re-announces an expired lease.
            hide = max(refused.retry_in_s, self.settings.republish_after_s) * 2
            self.transport.extend([received.receipt], min(hide, 43_000))
        # exhausted: leave the copy; the sweeper dead-letters the step run
        return Outcome("refused", refused.reason, message.step_run_id)

    # -- the step ----------------------------------------------------------------------

    def _execute(self, flow: Flow, step: Step, lease: Lease, known: Outputs) -> Outcome:
        claimed = lease.claimed
        conn = self.conn
        outbox_ids: list[int] = []
        # A step that takes no StepContext cannot write through the engine's
        # transaction, so its BEGIN need not cost a round trip of its own: it
        # travels with the checkpoint's first statements.
        sees_conn = any(s.kind == "context" for s in step.inputs.values())
        try:
            # closed by the checkpoint, whose COMMIT travels with its last statements
            with ExitStack() as transaction:

                def begin() -> None:
                    transaction.enter_context(conn.transaction())

                if sees_conn:
                    begin()
                ctx = StepContext(
                    conn=conn,
                    job_id=claimed.job_id,
                    step_run_id=claimed.id,
                    step=claimed.step,
                    fanout_key=claimed.fanout_key,
                    attempt=claimed.attempt,
                    max_attempts=claimed.max_attempts,
                    fingerprint=claimed.fingerprint,
                    worker=self.worker,
                    stop=lease.stop,
                )
                output = step.fn(**self._inputs(flow, step, claimed, ctx, known))
                if not isinstance(output, step.output):
                    raise Fail(
                        f"step {step.name!r} returned {type(output).__name__}, "
                        f"expected {step.output.__name__}"
                    )
                ctx.check()
                lease.finishing = True
                outbox_ids = self._checkpoint(
                    flow, claimed, output, lease, None if sees_conn else begin, transaction.close
                )
        except (_Fenced, LeaseLost) as exc:
            reason = str(exc) or "checkpoint refused: lease token changed"
            return self._fenced(claimed, reason, lease)
        except JobCancelled as exc:
            # the heartbeat found the step run cancelled (and recorded it)
            self._delete_delivery(lease)
            return Outcome("cancelled", str(exc), claimed.id)
        except Cancel as exc:
            return self._cancel_job(lease, exc.reason)
        except Exception as exc:
            if conn.broken or conn.closed:
                # the server ended our session (idle-in-transaction timeout
                # after a pause, a restart, a network cut): nothing committed
                return self._disconnected(claimed, exc)
            return self._failed(step, lease, exc)
        if not self.transport.transactional:
            self._publish_after_commit(outbox_ids)
            try:
                self._delete_delivery(lease)
            except Exception:
                # committed: a copy left behind is refused as finished and
                # deleted when it comes back; the eager successor still runs
                log.warning("delete after commit failed for %s", claimed.id, exc_info=True)
        return Outcome("done", step_run_id=claimed.id)

    def _inputs(
        self, flow: Flow, step: Step, claimed: Claimed, ctx: StepContext, known: Outputs
    ) -> dict[str, Any]:
        sources = {s.step for s in step.inputs.values() if s.kind in ("upstream", "gather")}
        missing = sorted(s for s in sources if s and s not in known)
        outputs = {
            **known,
            **(store.step_outputs_select(self.conn, claimed.job_id, missing) if missing else {}),
        }
        kwargs: dict[str, Any] = {}
        try:
            for param, source in step.inputs.items():
                if source.kind == "params":
                    kwargs[param] = flow.params.model_validate(claimed.params)
                elif source.kind == "context":
                    kwargs[param] = ctx
                elif source.kind == "item":
                    kwargs[param] = TypeAdapter(source.annotation).validate_python(claimed.item)
                elif source.step is not None:
                    model = flow.steps[source.step].output
                    values = [model.model_validate(out) for _, out in outputs[source.step]]
                    kwargs[param] = values if source.kind == "gather" else values[0]
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
    ) -> list[int]:
        """``begin`` (unless begun), checkpoint, schedule, publish and ``commit``.

        Returns the outbox ids left to relay.
        """
        conn = self.conn
        # a single-run step's stored checkpoint spares its successor a read
        successor = any(claimed.step in s.after for s in flow.steps.values())
        done = store.checkpoint_put_if_leased(
            conn,
            step_run_id=claimed.id,
            job_id=claimed.job_id,
            token=claimed.token,
            output=output.model_dump(mode="json"),
            worker=self.worker,
            with_output=successor and claimed.fanout_key == "",
            begin=begin,
        )
        if done is None:
            raise _Fenced(f"checkpoint of step run {claimed.id} refused: lease token changed")
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
        if not self.transport.transactional:
            if job_complete:
                self._finish_job(claimed)
            if eager is not None:
                queued = self._claim_eager(claimed, eager)
            outbox_ids = job_store.step_run_insert_many_with_outbox(conn, claimed.job_id, published)
            faults.hit("before_commit")
            commit()
            faults.hit("after_commit")
            # the publish and delete that follow are outside the commit
            self._continue_with(queued, known, check_lease=True)
            return outbox_ids
        # The rest needs no answer, so it travels with the COMMIT: messages out and
        # the delivery gone in the same commit as the checkpoint; the outbox rows
        # are written as published (the sweeper's "announced").
        committing = False
        faults.hit("before_commit")
        try:
            with conn.pipeline():
                if job_complete:
                    self._finish_job(claimed)
                if eager is not None:
                    queued = self._claim_eager(claimed, eager)
                job_store.step_run_insert_many_announced(conn, claimed.job_id, published)
                self.transport.publish(
                    conn,
                    [
                        Outgoing(StepMessage(job_id=claimed.job_id, step_run_id=r.id))
                        for r in published
                    ],
                )
                self._delete_delivery(lease, conn)
                committing = True
                commit()
        except BaseException:
            if committing and conn.info.transaction_status == TransactionStatus.INERROR:
                # a statement failed and the server skipped the COMMIT behind it
                conn.rollback()
            raise
        faults.hit("after_commit")
        self._continue_with(queued, known)
        return []

    def _claim_eager(self, claimed: Claimed, run: NewStepRun) -> QueuedClaim:
        """Create ``run`` already leased to this slot, in the checkpoint's transaction."""
        return store.step_run_insert_claimed(
            self.conn,
            run,
            job_id=claimed.job_id,
            flow=claimed.flow,
            params=claimed.params,
            worker=self.worker,
            lease_s=self.settings.lease_s,
        )

    def _continue_with(
        self, queued: QueuedClaim | None, known: Outputs, *, check_lease: bool = False
    ) -> None:
        # read after the commit: the claim is real only once it has committed
        if queued is None:
            return
        eager = queued.result()
        if eager is None:
            # its step key existed: scheduling under the job lock makes that
            # impossible, and were it to happen that run is someone else's
            log.warning("eager successor existed already; not running it here")
            return
        self.continuation = Continuation(eager, known, check_lease)

    def _finish_job(self, claimed: Claimed) -> None:
        store.job_finish_if_active_logged(
            self.conn, claimed.job_id, JobStatus.DONE, event=EventKind.JOB_DONE, worker=self.worker
        )
        self.ended_job = claimed.job_id

    def _publish_after_commit(self, outbox_ids: list[int]) -> None:
        if not outbox_ids:
            return
        try:
            relay(self.conn, self.transport, ids=outbox_ids)
        except Exception:
            # committed rows stay in the outbox; the sweeper's relay sends them
            log.warning("publish after commit failed; the sweeper will relay", exc_info=True)

    def _disconnected(self, claimed: Claimed, exc: Exception) -> Outcome:
        self.conn.close()
        reason = f"connection lost before commit: {str(exc).strip()[:300]}"
        if self.on_outage is not None and is_outage(exc):
            self.on_outage(exc, f"slot {self.worker}")
        try:
            with db.connect(self.settings, autocommit=True) as conn:
                job_store.step_event_insert(
                    conn,
                    EventKind.FENCED,
                    claimed,
                    worker=self.worker,
                    detail={"reason": reason},
                )
        except Exception as record_exc:
            # during an outage the worker has logged it once already
            log.log(
                logging.DEBUG if is_outage(record_exc) else logging.WARNING,
                "could not record the lost connection of %s",
                claimed.id,
                exc_info=True,
            )
        log.warning("step run %s not committed: %s", claimed.id, reason)
        return Outcome("fenced", reason, claimed.id)

    def _fenced(self, claimed: Claimed, reason: str, lease: Lease | None = None) -> Outcome:
        state = store.step_select_status(self.conn, claimed.id)
        if state is not None and state.cancelled:
            # not a lost lease: the job was cancelled (or failed) under it
            return self._stopped_cancelled(claimed, lease, "step run cancelled with its job")
        with self.conn.transaction():
            job_store.step_event_insert(
                self.conn,
                EventKind.FENCED,
                claimed,
                worker=self.worker,
                detail={"reason": reason},
            )
        log.warning("step run %s fenced: %s", claimed.id, reason)
        # the message is not ours to delete any more: the new owner's copy
        return Outcome("fenced", reason, claimed.id)

    def _stopped_cancelled(self, claimed: Claimed, lease: Lease | None, reason: str) -> Outcome:
        """The step stopped because its step run was cancelled: record it as such (once)."""
        recorded = lease is not None and lease.stop.cancelled  # by the heartbeat
        with self.conn.transaction():
            if not recorded:
                job_store.step_event_insert(
                    self.conn,
                    EventKind.CANCELLED,
                    claimed,
                    worker=self.worker,
                    detail={"reason": reason, "by": "job"},
                )
        if lease is not None:
            self._delete_delivery(lease)
        log.info("step run %s stopped: %s", claimed.id, reason)
        return Outcome("cancelled", reason, claimed.id)

    def _cancel_job(self, lease: Lease, reason: str) -> Outcome:
        claimed = lease.claimed
        with self.conn.transaction():
            # fenced like a checkpoint: a stale attempt cancels nothing (invariant 16)
            cancelled = store.job_cancel_if_leased(self.conn, claimed, reason)
            if cancelled:
                job_store.event_insert(
                    self.conn,
                    EventKind.CANCELLED,
                    job_id=claimed.job_id,
                    step_run_id=claimed.id,
                    worker=self.worker,
                    detail={"reason": reason, "by": "step"},
                )
                self.ended_job = claimed.job_id
        if not cancelled:
            return self._fenced(claimed, f"lease lost before cancelling the job: {reason}", lease)
        self._delete_delivery(lease)
        return Outcome("cancelled", reason, claimed.id)

    def _failed(self, step: Step, lease: Lease, exc: Exception) -> Outcome:
        claimed = lease.claimed
        conn = self.conn
        policy = step.retry or self._default_policy
        error = error_record(exc, claimed.attempt)
        permanent = isinstance(exc, (Fail, DefinitionError))
        alert: Alert | None = None
        outbox_ids: list[int] = []
        with conn.transaction():
            if not permanent and claimed.attempt < claimed.max_attempts:
                delay = (
                    exc.delay_s
                    if isinstance(exc, Retry) and exc.delay_s is not None
                    else policy.delay_s(claimed.attempt)
                )
                due = store.step_retry_if_leased(conn, claimed, delay, error)
                if due is None:
                    raise_fenced = True
                else:
                    raise_fenced = False
                    outbox_ids = [store.outbox_insert_delayed(conn, claimed.id, due)]
                    job_store.step_event_insert(
                        conn,
                        EventKind.RETRIED,
                        claimed,
                        worker=self.worker,
                        detail={"delay_s": round(delay, 3), "error": error["message"][:500]},
                    )
                kind = "retried"
            else:
                raise_fenced = not store.step_dead_if_leased(conn, claimed, error)
                if not raise_fenced:
                    reason = (
                        f"{error['type']}: {error['message'][:500]}"
                        f" (attempt {claimed.attempt} of {claimed.max_attempts})"
                    )
                    if store.dead_letter_insert_step(
                        conn,
                        job_id=claimed.job_id,
                        step_run_id=claimed.id,
                        reason=reason,
                        error=error,
                    ):
                        alert = Alert(reason, claimed.job_id, claimed.id, claimed.flow, step.name)
                    job_store.step_event_insert(
                        conn,
                        EventKind.DEAD_LETTERED,
                        claimed,
                        worker=self.worker,
                        detail={"reason": reason},
                    )
                    store.job_finish_if_active_logged(
                        conn,
                        claimed.job_id,
                        JobStatus.FAILED,
                        event=EventKind.JOB_FAILED,
                        worker=self.worker,
                        error=f"step {step.name}: {reason}",
                    )
                    # a failed job leaves nothing running: siblings are cancelled
                    # (their heartbeats and checkpoints then read "cancelled")
                    store.step_cancel_by_job(conn, claimed.job_id)
                    self.ended_job = claimed.job_id
                kind = "dead"
            if not raise_fenced and self.transport.transactional:
                if outbox_ids:
                    relay(conn, self.transport, ids=outbox_ids)
                self._delete_delivery(lease, conn)
        if raise_fenced:
            return self._fenced(claimed, f"lease lost before recording failure: {exc}", lease)
        if not self.transport.transactional:
            self._publish_after_commit(outbox_ids)
            self._delete_delivery(lease)
        if alert is not None:
            self.alert(alert)
        log.log(
            logging.ERROR if kind == "dead" else logging.INFO,
            "step run %s (%s) attempt %d failed (%s): %s",
            claimed.id,
            step.name,
            claimed.attempt,
            kind,
            error["message"][:200],
        )
        return Outcome(kind, error["message"], claimed.id)
