"""How a step run ends short of its checkpoint: retried, dead, rejected, cancelled or fenced.

Every outcome here is written under the same fence as a checkpoint: a stale
attempt (its lease reclaimed) retries nothing, dead-letters nothing and
cancels nothing (invariant 16); it records that it was fenced, and the
message is left to the new owner. A dead letter fails the job, cancels its
siblings (nothing is left running under an ended job) and records one alert
in the same transaction (:class:`~engine.alerts.AlertRecorder`). A step that
refuses its input data (:class:`~engine.flow.retry.Reject`) fails its job the
same way, once, without a dead letter or an alert: the data is at fault.

A lock wait past ``lock_timeout`` or a deadlock in the engine's own statements
(a checkpoint, a park, a group's or a round's commit) is none of the step's
doing: the step run is not done and goes again, its lease given back with the
attempt it took (invariant 18, :meth:`Failures.contended`). Its body then runs
again, so such a free release is counted and bounded (invariant 20,
:meth:`Failures.release_free`): each one's ``released`` event says why and
which one it is; past ``ENGINE_FREE_RELEASES_MAX`` since the step run last
parked, the next one charges the attempt (a ``retried`` event, an alert of
source ``release`` saying why; at the attempt cap a dead letter). A finished
body's checkpoint is first tried again with its output in hand
(:mod:`engine.runner.execution`), so most lock waits never get here.
"""

from __future__ import annotations

import logging
import traceback
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.errors import Contention, DefinitionError, ReleasesSpent
from engine.flow.retry import Fail, Reject, Retry, RetryPolicy, attempt_label
from engine.infra.outage import is_outage
from engine.jobs.ending import Ended, job_ended
from engine.runner.attempt import Attempt
from engine.runner.dead_letter import dead_letter_step, fail_job
from engine.runner.lease import Lease
from engine.runner.outcome import Outcome
from engine.runner.services import SlotServices
from engine.store import db
from engine.store.status import EventKind
from engine.transports.announce import Announced, announce, announce_freed
from engine.transports.base import Outgoing
from engine.transports.message import StepMessage

log = logging.getLogger(__name__)


def error_record(exc: BaseException, attempt: int) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "message": _recordable(str(exc))[:4000],
        "traceback": _recordable("".join(traceback.format_exception(exc)))[-16000:],
        "attempt": attempt,
    }


def _recordable(text: str) -> str:
    """``text`` with what jsonb and a text column refuse (NUL, surrogates) escaped.

    A step's error may quote data it choked on; left as it is, the write of
    its failure failed, and the step run waited for its lease to lapse.
    """
    text = text.replace("\x00", "\\x00")
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode(errors="backslashreplace").decode()
    return text


class Failures:
    """How this slot's step runs end short of a checkpoint, and how their deliveries go.

    One per slot, beside the executor (which holds it), sharing the slot's services.
    """

    def __init__(self, services: SlotServices) -> None:
        self.services = services
        self.settings = services.settings
        self.transport = services.transport
        self.worker = services.worker
        self.conn = services.conn
        self.alerts = services.alerts
        self.default_policy = RetryPolicy(
            max_attempts=self.settings.max_attempts,
            base_delay_s=self.settings.retry_base_delay_s,
            max_delay_s=self.settings.retry_max_delay_s,
        )

    def delete_delivery(self, attempt: Attempt, conn: store.Executes | None = None) -> None:
        # an eager successor came with no message: nothing to delete
        if attempt.receipt is not None:
            self.transport.delete([attempt.receipt], conn)

    def ack_in_commit(self, attempt: Attempt, conn: store.Executes) -> None:
        """A queue in this database loses the delivery in the step's own commit."""
        if self.transport.transactional:
            self.delete_delivery(attempt, conn)

    def ack_after_commit(self, attempt: Attempt) -> None:
        """An external queue's delivery goes once the commit is in."""
        if self.transport.transactional:
            return
        try:
            self.delete_delivery(attempt)
        except Exception:
            # committed: a copy left behind is refused as finished and deleted
            # when it comes back; an eager successor still runs
            log.warning("delete after commit failed for %s", attempt.claimed.id, exc_info=True)

    def disconnected(self, attempt: Attempt, exc: Exception) -> Outcome:
        claimed = attempt.claimed
        self.conn.close()
        reason = f"connection lost before commit: {str(exc).strip()[:300]}"
        on_outage = self.services.on_outage
        if on_outage is not None and is_outage(exc):
            on_outage(exc, f"slot {self.worker}")
        try:
            with db.connect(self.settings, autocommit=True) as conn:
                attempt.record(conn, EventKind.FENCED, reason=reason)
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

    def give_back(
        self,
        lease: Lease,
        conn: psycopg.Connection[Any] | None = None,
        *,
        reason: str,
        visible_in_s: float = 0.0,
    ) -> bool:
        """Release the lease with its attempt and make the step run visible to workers.

        The release and its ``released`` event (with ``reason``) commit
        together. A delivery is visible again after ``visible_in_s``; an eager
        successor, which has none, is announced with a new message. ``False``:
        the lease was lost already. The event says when its step ran, or that it never
        started (a step run of a batch given back before its turn).
        """
        claimed = lease.claimed
        conn = conn if conn is not None else self.conn
        freed = Announced(self.transport)
        with conn.transaction():
            # the attempt comes back with the lease: giving back is not the step's fault
            if not store.lease_release_if_owner(conn, claimed.id, claimed.token):
                return False
            store.attempt_event_insert(
                conn,
                EventKind.RELEASED,
                claimed,
                worker=self.worker,
                ran=lease.ran(),
                detail={"reason": reason},
            )
            if claimed.concurrency_key is not None:
                freed = announce_freed(conn, self.transport, [claimed.job_id])
        freed.publish_after_commit(conn)
        self._visible_again(lease, visible_in_s)
        return True

    def _visible_again(self, lease: Lease, visible_in_s: float) -> None:
        """A released step run's delivery visible after ``visible_in_s``, or a new message."""
        claimed, receipt = lease.claimed, lease.receipt
        if receipt is None:
            message = StepMessage(job_id=claimed.job_id, step_run_id=claimed.id)
            self.transport.publish(None, [Outgoing(message, delay_s=visible_in_s)])
        else:
            self.transport.give_back([receipt], visible_in_s)

    def contended(self, attempt: Attempt, exc: Contention) -> Outcome:
        """A lock wait timed out or a deadlock hit the engine's statement: not done, again.

        Nothing of the attempt committed (its transaction or savepoint was rolled
        back); the lease goes back with its attempt and the delivery comes back
        in a second, so the step run runs again at no charge (invariant 18), a
        bounded number of times (:meth:`release_free`, invariant 20).
        """
        reason = f"not done, try again: {str(exc).strip().splitlines()[0][:300]}"
        return self.release_free(attempt, reason, lost=f"lease lost after a lock wait: {exc}")

    def release_free(
        self, attempt: Attempt, reason: str, *, lost: str, visible_in_s: float = 1.0
    ) -> Outcome:
        """Give back a step run whose body ran but did not commit, through no fault of its own.

        At no charge, counted, and its ``released`` event says why and how many
        times (``free_release`` of ``free_releases_max``), so the step's body
        runs again only a bounded number of times for free (invariant 20): once
        ``ENGINE_FREE_RELEASES_MAX`` are spent since it last parked, this
        release charges the attempt instead (:meth:`_charge`). ``lost``: what the
        fenced event says if the lease was lost meanwhile.
        """
        claimed = attempt.claimed
        conn = self.conn
        most = self.settings.free_releases_max
        freed = Announced(self.transport)
        with conn.transaction():
            count = store.lease_release_free_if_owner(conn, claimed.id, claimed.token, most)
            if count is not None:
                attempt.record(
                    conn,
                    EventKind.RELEASED,
                    reason=reason,
                    free_release=count,
                    free_releases_max=most,
                )
                if claimed.concurrency_key is not None:
                    freed = announce_freed(conn, self.transport, [claimed.job_id])
        if count is None:
            # the lease was lost, or its free releases are spent: charged (fenced there too)
            return self._charge(attempt, reason, lost=lost)
        freed.publish_after_commit(conn)
        self._visible_again(attempt.lease, visible_in_s)
        log.info("step run %s released (%d of %d free): %s", claimed.id, count, most, reason)
        return Outcome("released", reason, claimed.id)

    def _charge(self, attempt: Attempt, reason: str, *, lost: str) -> Outcome:
        """Its free releases are spent: this release costs the attempt, with an alert saying why.

        Under the cap the step run goes back charged, due after its policy's
        backoff, in a transaction that touches its own row and no job row (what
        held its checkpoint up may hold the job row still); at the cap it is
        dead-lettered (the job fails, alerted as any dead letter). A dead letter
        that cannot take the job row either leaves the lease to lapse: a lapsed
        last attempt is dead-lettered by the sweeper, its body never run again.
        """
        claimed = attempt.claimed
        conn = self.conn
        most = self.settings.free_releases_max
        spent = ReleasesSpent(f"released {most} times without charge; then again: {reason}")
        if claimed.attempt >= claimed.max_attempts:
            try:
                return self.failed(attempt, spent)
            except Contention as busy:
                log.warning(
                    "step run %s: its last attempt, charged, could not be dead-lettered (%s); "
                    "left to its lease, which the sweeper dead-letters once it lapses",
                    claimed.id,
                    busy,
                )
                return Outcome("charged", str(spent), claimed.id)
        policy = attempt.step.retry or self.default_policy
        delay = policy.delay_s(claimed.attempt)
        error = error_record(spent, claimed.attempt)
        announced = Announced(self.transport)
        alerted = False
        with conn.transaction():
            due = store.step_release_charged_if_leased(conn, claimed, delay, error)
            if due is not None:
                announced = self._retried(attempt, due, delay, error, charged="free releases spent")
                alerted = self.alerts.record_release(
                    conn, claimed.id, error_line=f"ReleasesSpent: {spent}", reason=str(spent)
                )
                if claimed.concurrency_key is not None:
                    announced += announce_freed(conn, self.transport, [claimed.job_id])
                self.ack_in_commit(attempt, conn)
        if due is None:
            return self.fenced(attempt, lost)
        self._committed(attempt, announced, alerted)
        log.warning("step run %s attempt %d charged: %s", claimed.id, claimed.attempt, spent)
        return Outcome("retried", str(spent), claimed.id)

    def _committed(self, attempt: Attempt, announced: Announced, alerted: bool) -> None:
        """After an outcome's commit: its messages out, its delivery gone, its alert told."""
        announced.publish_after_commit(self.conn)
        self.ack_after_commit(attempt)
        if alerted:
            self.alerts.wake()

    def _retried(
        self, attempt: Attempt, due: datetime, delay: float, error: dict[str, Any], **detail: str
    ) -> Announced:
        """In the retry's transaction: its message due at ``due``, and its ``retried`` event."""
        announced = announce(
            self.conn,
            self.transport,
            outbox_ids=[store.outbox_insert_delayed(self.conn, attempt.claimed.id, due)],
        )
        attempt.record(
            self.conn,
            EventKind.RETRIED,
            delay_s=round(delay, 3),
            error=error["message"][:500],
            **detail,
        )
        return announced

    def fenced(self, attempt: Attempt, reason: str) -> Outcome:
        """Record that its lease was lost (or its step run stopped with its cancelled job)."""
        claimed = attempt.claimed
        state = store.step_select_status(self.conn, claimed.id)
        if state is not None and state.cancelled:
            # not a lost lease: the job was cancelled (or failed) under it
            return self._stopped_cancelled(attempt, "step run cancelled with its job")
        with self.conn.transaction():
            attempt.record(self.conn, EventKind.FENCED, reason=reason)
        log.warning("step run %s fenced: %s", claimed.id, reason)
        # the message is not ours to delete any more: the new owner's copy
        return Outcome("fenced", reason, claimed.id)

    def _stopped_cancelled(self, attempt: Attempt, reason: str) -> Outcome:
        """The step stopped because its step run was cancelled: record it as such (once)."""
        if not attempt.stop.cancelled:  # else the heartbeat recorded it
            with self.conn.transaction():
                attempt.record(self.conn, EventKind.CANCELLED, reason=reason, by="job")
        self.delete_delivery(attempt)
        log.info("step run %s stopped: %s", attempt.claimed.id, reason)
        return Outcome("cancelled", reason, attempt.claimed.id)

    def cancel_job(self, attempt: Attempt, reason: str) -> Outcome:
        claimed = attempt.claimed
        ended: Ended | None = None
        with self.conn.transaction():
            # fenced like a checkpoint: a stale attempt cancels nothing (invariant 16)
            cancelled = store.job_cancel_if_leased(self.conn, claimed, reason)
            if cancelled:
                ended = job_ended(
                    self.conn, self.transport, claimed.job_id, cancel_rest=False, free_slots=True
                )
                attempt.record(self.conn, EventKind.CANCELLED, reason=reason, by="step")
        if ended is None:
            return self.fenced(attempt, f"lease lost before cancelling the job: {reason}")
        ended.announced.publish_after_commit(self.conn)
        self.delete_delivery(attempt)
        return Outcome("cancelled", reason, claimed.id, ended_job=claimed.job_id)

    def failed(self, attempt: Attempt, exc: Exception) -> Outcome:
        """The step raised: retry it (under its cap), or end it and fail the job.

        A step run ends ``dead``: dead-lettered with one alert when it failed
        (attempts exhausted, ``Fail``), or with no dead letter and no alert
        when it refused its input data (``Reject``, outcome ``rejected``).
        """
        claimed = attempt.claimed
        conn = self.conn
        policy = attempt.step.retry or self.default_policy
        error = error_record(exc, claimed.attempt)
        rejected = isinstance(exc, Reject)
        permanent = rejected or isinstance(exc, (Fail, DefinitionError))
        alerted = False
        announced = Announced(self.transport)
        with conn.transaction():
            if not permanent and claimed.attempt < claimed.max_attempts:
                delay = (
                    exc.delay_s
                    if isinstance(exc, Retry) and exc.delay_s is not None
                    else policy.delay_s(claimed.attempt - claimed.attempt_base)
                )
                due = store.step_retry_if_leased(conn, claimed, delay, error)
                if due is None:
                    raise_fenced = True
                else:
                    raise_fenced = False
                    announced = self._retried(attempt, due, delay, error)
                kind = "retried"
            else:
                ended = self._end_job(attempt, error, rejected=rejected)
                raise_fenced = ended is None
                if ended is not None:
                    announced, alerted = ended
                kind = "rejected" if rejected else "dead"
            if not raise_fenced:
                if claimed.concurrency_key is not None and kind == "retried":
                    # the slot held by this step run is free in this commit (an
                    # ended job freed its slots already)
                    announced += announce_freed(conn, self.transport, [claimed.job_id])
                self.ack_in_commit(attempt, conn)
        if raise_fenced:
            return self.fenced(attempt, f"lease lost before recording failure: {exc}")
        self._committed(attempt, announced, alerted)
        log.log(
            {"dead": logging.ERROR, "rejected": logging.WARNING}.get(kind, logging.INFO),
            "step run %s (%s) attempt %d failed (%s): %s",
            claimed.id,
            attempt.step.name,
            claimed.attempt,
            kind,
            # the first line: a driver's DETAIL lines may quote a row's values (a document's)
            error["message"].partition("\n")[0][:200],
        )
        ended_job = claimed.job_id if kind != "retried" else None
        return Outcome(kind, error["message"], claimed.id, ended_job=ended_job)

    def _end_job(
        self, attempt: Attempt, error: dict[str, Any], *, rejected: bool
    ) -> tuple[Announced, bool] | None:
        """End the step run and fail its job, in the caller's transaction.

        A failure is dead-lettered with its alert (``True``: one was recorded,
        :func:`~engine.runner.dead_letter.dead_letter_step`, as the sweeper's);
        a rejection of the step's input data records only that it was rejected.
        ``None``: the lease was lost and nothing was written (invariant 16).
        """
        conn = self.conn
        claimed = attempt.claimed
        if not store.step_dead_if_leased(conn, claimed, error):
            return None
        summary = f"{error['type']}: {error['message'][:500]}"
        if rejected:
            attempt.record(conn, EventKind.REJECTED, reason=summary)
            # the data's decision: `engine retry` refuses it, a parent sees Child.rejected
            ended = fail_job(
                conn,
                self.transport,
                claimed.job_id,
                worker=self.worker,
                error=f"step {attempt.step.name}: {summary}",
                free_slots=True,
                rejected=True,
            )
            alerted = False
        else:
            label = attempt_label(
                claimed.attempt, claimed.max_attempts, claimed.attempt_base, claimed.retries
            )
            ended, alerted = dead_letter_step(
                conn,
                self.transport,
                self.alerts,
                job_id=claimed.job_id,
                step_run_id=claimed.id,
                step=attempt.step.name,
                reason=f"{summary} ({label})",
                error=error,
                worker=self.worker,
                record=attempt.record,
                free_slots=True,
            )
        return (Announced(self.transport) if ended is None else ended.announced), alerted
