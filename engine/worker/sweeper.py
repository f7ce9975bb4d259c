"""The sweeper: liveness never depends on a message surviving (invariant 9).

Runs inside every worker, every ``sweep_interval_s``; safe with several at
once (an advisory lock lets one of them do the republishing per round, and
the relay hands each outbox row on once via SKIP LOCKED). Each round:

1. step runs whose worker died during their last allowed attempt are dead:
   dead-lettered with their alert, their job failed (its other step runs
   cancelled); step runs still active under a job that ended are cancelled, so
   nothing rests in a state no worker will ever leave (invariant 13);
2. waiting step runs whose deadline passed (a signal's timeout, a durable
   sleep) become pending: a waiting step run is claimable *later*, and this
   is when (invariant 13);
3. claimable step runs (due, or running with an expired lease) that were not
   announced since they became claimable get a new outbox row, and so do the
   next waiters of concurrency keys that have a slot free (a holder died or
   ended here); a step run over its limit stays claimable later, announced
   again like any other, never stranded;

   steps 1 and 3 look at a slice of the queue (:class:`QueueSlices`), not the
   whole of it: up to ``sweep_scan`` pending and as many running step runs
   from where this sweeper's last round stopped, so that a round costs about
   the same with a queue of 10,000 or 1.5M (a round that read the whole queue
   took 33 s at 1.5M; sliced, 130-213 ms);
4. the outbox is relayed: rows never published (a crash between commit and
   publish) and due retries reach the transport;
5. a flow version that active jobs need and no live worker has loaded for
   ``version_orphan_alert_s`` gets its one alert of the episode
   (:mod:`engine.worker.roster`), and a schedule due for
   ``schedule_unloaded_alert_s`` whose flow no live worker has loaded for as
   long gets its one alert of that scheduled time (no worker would fire it);

Retention's prune runs beside it, in a thread of its own
(:mod:`engine.worker.pruner`): rendering reports is not work for the loop
that receives.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import psycopg

from engine import store
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.flow.registry import Registry
from engine.infra import metrics
from engine.jobs.ending import Ended
from engine.runner.dead_letter import dead_letter_step
from engine.store.rows import ExpiredExhausted, SliceKey, SweepSlice
from engine.store.status import EventKind
from engine.transports.announce import announce, announce_freed
from engine.transports.base import Received, Transport
from engine.transports.outbox import relay

log = logging.getLogger(__name__)

_RELAY_BATCH = 500
_RELAY_ROUNDS = 20  # bound one sweep; the next sweep continues
# a lost message's announcements a round: a backlog whose messages all went stale at once
# (republish_after) goes round at this pace, not a whole slice's every round
_ANNOUNCE_LIMIT = 1000
_CANCEL_LIMIT = 100  # ended jobs whose leftovers a round cancels


@dataclass(frozen=True)
class SweepReport:
    dead: int = 0
    announced: int = 0
    published: int = 0
    cancelled: int = 0  # step runs left active under ended jobs
    woken: int = 0  # waiting step runs past their deadline, made pending


_START: SliceKey = (datetime.min.replace(tzinfo=UTC), uuid.UUID(int=0))


class QueueSlices:
    """Where a sweeper's next slice of the queue starts, for pending and running step runs.

    Each round takes the next ``sweep_scan`` of each, in the order they became due
    (pending) or their lease expires (running), after where the last round's slice
    ended; a part that came back short reached the end, and the next round starts it
    over. A queue no deeper than the scan is checked whole every round; a deeper one
    over ``depth / sweep_scan`` rounds (a pass), so a lost message or an ended job's
    leftover waits at most a pass more, never forever. The positions move on only once
    the round committed (:meth:`advance`): a round that failed or that another sweeper
    held leaves its slice for the next, and so does one whose announcements or
    cancellations reached their limit (:meth:`stay`).
    """

    def __init__(self, scan: int) -> None:
        self.scan = scan
        self.pending: SliceKey = _START
        self.running: SliceKey = _START
        self._next = (self.pending, self.running)

    def take(self, conn: psycopg.Connection[Any]) -> SweepSlice:
        """This round's slice (its bounds: the rows stay in the database)."""
        taken = store.step_sweep_slice(
            conn, pending_after=self.pending, running_after=self.running, limit=self.scan
        )
        self._next = (
            taken.pending_upto if taken.pending_full else _START,
            taken.running_upto if taken.running_full else _START,
        )
        return taken

    def stay(self) -> None:
        """The next round takes this round's slice again (its work was cut short)."""
        self._next = (self.pending, self.running)

    def advance(self) -> None:
        self.pending, self.running = self._next


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        transport: Transport,
        worker: str,
        alerts: AlertRecorder,
        registry: Registry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.worker = worker
        self.alerts = alerts
        self.registry = registry
        self.clock = clock
        self.slices = QueueSlices(settings.sweep_scan)

    def sweep(self, conn: psycopg.Connection[Any]) -> SweepReport:
        alerted = 0
        ended: list[Ended] = []  # jobs this round failed: their reports follow the commit
        announced: list[int] = []
        dead = []
        cancelled_jobs: list[Any] = []
        orphans = 0
        woken: list[Any] = []
        swept = False
        with conn.transaction():
            if store.sweep_lock_try(conn):
                swept = True
                dead = store.step_dead_if_expired_exhausted_many(conn)
                for d in dead:
                    # as a slot dead-letters its step run's last failure (one function)
                    end, alert = dead_letter_step(
                        conn,
                        self.transport,
                        self.alerts,
                        job_id=d.job_id,
                        step_run_id=d.id,
                        step=d.step,
                        reason=f"lease expired during the last allowed attempt ({d.attempts})",
                        error=None,
                        worker=self.worker,
                        record=partial(self._record_dead, d),
                        # its slots are freed with the others' below
                        free_slots=False,
                    )
                    alerted += alert
                    if end is not None:
                        ended.append(end)
                # after the dead above: their jobs' other step runs are cancelled already
                queued = self.slices.take(conn)
                leftovers = store.step_cancel_if_job_ended_many(conn, queued, limit=_CANCEL_LIMIT)
                if len({c.job_id for c in leftovers}) >= _CANCEL_LIMIT:
                    self.slices.stay()  # more in this slice, perhaps: again next round
                for c in leftovers:
                    cancelled_jobs.append(c.job_id)
                    orphans += 1
                    store.event_insert(
                        conn,
                        EventKind.CANCELLED,
                        job_id=c.job_id,
                        step_run_id=c.id,
                        worker=self.worker,
                        attempt=c.attempts,
                        detail={"reason": "its job had ended", "by": "sweeper"},
                    )
                # announced below with the slice (pending now, after it was read)
                woken = store.step_wake_if_due_many(conn, self.worker)
                announced = store.outbox_insert_for_claimable(
                    conn,
                    queued,
                    woken,
                    republish_after_s=self.settings.republish_after_s,
                    limit=_ANNOUNCE_LIMIT,
                )
                if len(announced) >= _ANNOUNCE_LIMIT:  # the rest of this slice next round
                    self.slices.stay()
                alerted += self._alert_orphaned_versions(conn)
                alerted += self._alert_unloaded_schedules(conn)
                # an external queue's rows are sent by the relay below, after the commit
                announce(conn, self.transport, outbox_ids=announced)
                # concurrency slots freed by the dead, the cancelled, and holders whose
                # lease expired: their next waiters (nothing while every key is full)
                ended_jobs = sorted({d.job_id for d in dead} | set(cancelled_jobs))
                announce_freed(conn, self.transport, ended_jobs, expired=True)
        if swept:  # committed: the next round's slice follows this one's
            self.slices.advance()
        for d in dead:  # committed
            metrics.dead_lettered(d.flow, d.step)
        if alerted:
            self.alerts.wake()
        for end in ended:
            # the alert links to the report: rendered as a worker ending the job would
            end.after_commit(conn, self.settings)
        self.record_transport_dead_letters(conn)
        published = 0
        for _ in range(_RELAY_ROUNDS):
            n = relay(conn, self.transport, limit=_RELAY_BATCH)
            published += n
            if n < _RELAY_BATCH:
                break
        if dead or announced or orphans or woken:
            log.info(
                "sweep: %d dead, %d woken past their deadline, %d re-announced, %d published, "
                "%d left under ended jobs cancelled",
                len(dead),
                len(woken),
                len(announced),
                published,
                orphans,
            )
        return SweepReport(len(dead), len(announced), published, orphans, len(woken))

    def _record_dead(
        self, dead: ExpiredExhausted, conn: psycopg.Connection[Any], kind: EventKind, **detail: Any
    ) -> None:
        """The sweeper's event about a step run it dead-lettered (no attempt of its own)."""
        store.event_insert(
            conn,
            kind,
            job_id=dead.job_id,
            step_run_id=dead.id,
            worker=self.worker,
            attempt=dead.attempts,
            detail={**detail, "by": "sweeper"},
        )

    def _alert_orphaned_versions(self, conn: psycopg.Connection[Any]) -> int:
        made = self.alerts.record_orphaned_versions(
            conn,
            live_s=self.settings.worker_live_s,
            alert_after_s=self.settings.version_orphan_alert_s,
        )
        for alert_id, flow, version in made:
            log.warning(
                "flow %s version %d: active jobs need it and no live worker has it loaded "
                "(alert %d)",
                flow,
                version,
                alert_id,
            )
        return len(made)

    def _alert_unloaded_schedules(self, conn: psycopg.Connection[Any]) -> int:
        made = self.alerts.record_unloaded_schedules(
            conn,
            live_s=self.settings.worker_live_s,
            alert_after_s=self.settings.schedule_unloaded_alert_s,
        )
        for alert_id, schedule, flow in made:
            log.warning(
                "schedule %s is due and no live worker loads flow %s (alert %d)",
                schedule,
                flow,
                alert_id,
            )
        return len(made)

    def record_transport_dead_letters(self, conn: psycopg.Connection[Any]) -> int:
        """Record what the queue itself dead-lettered (SQS redrive), once each, with an alert.

        How many messages the queue handed over (a message recorded before
        and seen again is not recorded twice).
        """
        drain = getattr(self.transport, "drain_dead_letters", None)
        if not callable(drain):
            return 0

        def record(received: Received, reason: str) -> None:
            with conn.transaction():  # the dead letter and its alert commit together
                dead_letter = store.dead_letter_insert_message_logged(
                    conn, self.worker, received, reason
                )
                alerted = self.alerts.record(conn, dead_letter)
            if alerted:
                self.alerts.wake()

        return int(drain(record))
