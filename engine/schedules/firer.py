"""The schedule firer: every worker fires the due schedules of the flows it has loaded.

Every ``sweep_interval_s`` a :class:`ScheduleFirer` thread fires them. Each
scheduled time fires exactly once, whatever the number of workers:

1. due schedules are read by the database clock (``next_fire_at <= now()``),
   without a lock;
2. one conditional UPDATE claims a schedule: still at the ``next_fire_at``
   this worker read, it moves to the first time after now. A racer blocks on
   the row, then sees the new value and gets nothing (:class:`SlotTaken`);
3. in that same transaction each time fired gets its row in
   ``engine_schedule_fires`` (unique per time) and its job is submitted, the
   scheduled time being part of the job's fingerprint
   (``submit(..., scheduled_for=t)``). A crash before the commit rolls the
   claim back with the jobs: the times are still due for the next worker.

Times missed while no worker was up fire once on return, as the latest of
them (``catch_up latest``, the default), or each once with ``catch_up all``
(at most :data:`engine.schedules.calendar.CATCH_UP_LIMIT`, the latest ones).
A paused schedule is not due (step 1) and its claim restates "not paused"
(step 2), so a pause that commits first wins over a worker that had read the
schedule. Times that fell while it was paused are not missed times: the
resume moves the schedule to its next time after now
(:func:`engine.schedules.schedules.resume_schedule`), so nothing is caught up.

A time that submits no job does not pass in silence. A submit the flow
refuses (its admission check raises :class:`engine.Refused`, or the
parameters no longer validate: outcome ``refused``) or that raises (a bug in
an admission check, a constraint: outcome ``error``) is undone alone (a
savepoint), recorded on the fire and as the schedule's ``last_error``,
logged, and alerted once per schedule and time (the alert commits with the
fire, through the dead letters' sinks); the schedule moves on and the worker
is not stopped by it. Only a lost race (:class:`engine.errors.Contention`)
or an outage rolls the claim back, and the time is tried again. A schedule
whose flow no live worker loads is never fired here: the sweeper alerts it
(:meth:`engine.alerts.AlertRecorder.record_unloaded_schedules`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine import store
from engine.alerts import AlertRecorder
from engine.config import Settings
from engine.errors import BadInput, Contention
from engine.flow import Flow
from engine.flow.registry import Registry
from engine.infra import faults
from engine.infra.background import BackgroundLoop
from engine.infra.outage import Outage, is_outage
from engine.infra.secrets import mask_secrets
from engine.jobs.submit import submit
from engine.schedules.calendar import Calendar, resolve_params
from engine.store import db
from engine.store.schedules import DueSchedule, SlotTaken
from engine.store.status import CatchUp, FireOutcome
from engine.transports import transport_for
from engine.transports.base import Transport

__all__ = ["Fired", "ScheduleFirer"]

log = logging.getLogger(__name__)

_DUE_BATCH = 50  # due schedules read per round


@dataclass(frozen=True)
class Fired:
    """One scheduled time fired: its job, or why it has none.

    ``outcome`` is ``job``, ``refused`` (the flow said no) or ``error`` (the
    submit raised); ``error`` holds the reason of the last two.
    """

    schedule: str
    scheduled_for: datetime
    job_id: uuid.UUID | None
    created: bool
    error: str | None = None
    outcome: FireOutcome = FireOutcome.JOB


class ScheduleFirer(BackgroundLoop):
    """Fires due schedules of the flows in ``registry``; see the module docstring."""

    name = "schedule firer"
    autocommit = False

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        *,
        worker: str,
        transport: Transport | None = None,
        stop: threading.Event | None = None,
        outage: Outage | None = None,
        connect: Callable[[], psycopg.Connection[Any]] | None = None,
        alerts: AlertRecorder | None = None,
    ) -> None:
        super().__init__(
            settings,
            connect=connect or (lambda: db.connect(settings)),
            stop=stop,
            outage=outage,
        )
        # a time that submits no job is alerted with its fire, like a dead letter
        self.alerts = alerts or AlertRecorder(list(dict.fromkeys(settings.alert_sinks)))
        self.registry = registry
        self.worker = worker
        self.transport = transport or transport_for(settings)

    # -- one schedule ---------------------------------------------------------------------

    def due(self, conn: psycopg.Connection[Any]) -> list[DueSchedule]:
        """Schedules due now by the database clock, of flows loaded here (no lock taken)."""
        with conn.transaction():
            return store.schedule_select_due_many(
                conn, flows=self.registry.names(), limit=_DUE_BATCH
            )

    def fire(self, conn: psycopg.Connection[Any], due: DueSchedule) -> list[Fired] | SlotTaken:
        """Claim ``due`` and submit its jobs in one transaction on ``conn`` (not autocommit).

        :class:`SlotTaken` when another worker fired these times first.
        """
        if conn.autocommit:
            # submit would commit (and publish) on its own, apart from the claim
            raise ValueError("fire() needs a connection that is not in autocommit mode")
        flow = self.registry.get(due.flow)
        calendar = Calendar.parse(due.cron, due.timezone)
        plan = calendar.due(due.next_fire_at, due.db_now, due.catch_up)
        with conn.transaction():
            claimed = store.schedule_claim_if_due(conn, due, plan.next_fire_at)
            if isinstance(claimed, SlotTaken):
                return claimed
            faults.hit("schedule_after_claim")
            fired = [
                f
                for slot in plan.slots
                if (f := self._fire_one(conn, flow, due, calendar, slot)) is not None
            ]
            if fired:
                last = fired[-1]
                job = next((f.job_id for f in reversed(fired) if f.job_id is not None), None)
                store.schedule_record_fired(
                    conn, due.id, last.scheduled_for, job_id=job, error=last.error
                )
            alerted = [
                self.alerts.record_schedule_fire(
                    conn,
                    schedule_id=due.id,
                    scheduled_for=f.scheduled_for,
                    outcome=f.outcome,
                    error=f.error,
                )
                for f in fired
                if f.error is not None
            ]
            faults.hit("schedule_before_commit")
        if any(alerted):
            self.alerts.wake()
        if plan.skipped:
            log.warning(
                "schedule %s: %d missed time(s) not fired (catch-up %s fires %s)",
                due.name,
                plan.skipped,
                due.catch_up.value,
                "the latest only" if due.catch_up is CatchUp.LATEST else "at most 100",
            )
        for f in fired:
            if f.error is None:
                log.info(
                    "schedule %s fired for %s: %s job %s",
                    f.schedule,
                    f.scheduled_for.isoformat(),
                    due.flow,
                    f.job_id,
                )
        return fired

    def _fire_one(
        self,
        conn: psycopg.Connection[Any],
        flow: Flow,
        due: DueSchedule,
        calendar: Calendar,
        slot: datetime,
    ) -> Fired | None:
        if not store.schedule_fire_insert_if_new(conn, due.id, slot, self.worker):
            log.warning("schedule %s: %s was fired already", due.name, slot.isoformat())
            return None
        try:
            with conn.transaction():  # a refusal or an error undoes this submit only
                result = submit(
                    flow,
                    resolve_params(due.params, slot, calendar.tz),
                    conn=conn,
                    settings=self.settings,
                    registry=self.registry,
                    publisher=self.transport,
                    submitted_by=f"schedule {due.name}",
                    scheduled_for=slot,
                )
        except BadInput as exc:  # the admission check refused, or the params no longer fit
            return self._not_submitted(conn, due, slot, FireOutcome.REFUSED, str(exc))
        except Contention:
            raise  # a lost race: the claim rolls back and the time is tried again
        except Exception as exc:
            if is_outage(exc) or conn.broken:
                raise  # nothing can be recorded: the time stays due for the next round
            log.exception("schedule %s: submitting the %s job raised", due.name, due.flow)
            reason = mask_secrets(f"{type(exc).__name__}: {exc}".partition("\n")[0])[:500]
            return self._not_submitted(conn, due, slot, FireOutcome.ERROR, reason)
        store.schedule_fire_set_outcome(
            conn, due.id, slot, outcome=FireOutcome.JOB, job_id=result.job_id, error=None
        )
        return Fired(due.name, slot, result.job_id, result.created)

    def _not_submitted(
        self,
        conn: psycopg.Connection[Any],
        due: DueSchedule,
        slot: datetime,
        outcome: FireOutcome,
        error: str,
    ) -> Fired:
        store.schedule_fire_set_outcome(
            conn, due.id, slot, outcome=outcome, job_id=None, error=error
        )
        log.warning(
            "schedule %s: the %s job for %s was not submitted (%s: %s); alerted, "
            "the schedule moves on",
            due.name,
            due.flow,
            slot.isoformat(),
            outcome,
            error,
        )
        return Fired(due.name, slot, None, False, error, outcome)

    # -- one round, and the thread ----------------------------------------------------------

    def fire_due(self) -> list[Fired]:
        """Fire every due schedule once, on this firer's own connection."""
        conn = self._connection()
        fired: list[Fired] = []
        for due in self.due(conn):
            if self.stop.is_set():
                break
            try:
                outcome = self.fire(conn, due)
            except Contention:
                continue  # a lock wait timed out behind the worker firing it: not ours
            except Exception as exc:
                if is_outage(exc):
                    raise
                log.exception("schedule %s: firing failed; it stays due", due.name)
                continue
            if not isinstance(outcome, SlotTaken):
                fired.extend(outcome)
        return fired

    def _interval_s(self) -> float:
        return self.settings.sweep_interval_s

    def _turn(self) -> float:
        """Fire due schedules every ``sweep_interval_s``."""
        self.fire_due()
        return self._interval_s()

    def _round_failed(self, exc: Exception) -> None:
        log.exception("firing schedules failed; next round in %s s", self._interval_s())
