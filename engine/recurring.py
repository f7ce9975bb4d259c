"""Recurring jobs: schedules that submit a flow on a calendar, fired by any worker.

A schedule names a flow, its parameters and a calendar (:mod:`engine.cron`:
a cron expression in a timezone). ``engine schedule add|list|remove`` (or
:func:`add_schedule`, :func:`list_schedules`, :func:`remove_schedule`)
manage them; every worker runs a :class:`ScheduleFirer` thread that, every
``sweep_interval_s``, fires the due schedules of the flows it has loaded.

Each scheduled time fires exactly once, whatever the number of workers:

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
(at most :data:`engine.cron.CATCH_UP_LIMIT`, the latest ones). A submit the
flow refuses (its admission check raises :class:`engine.Refused`, or the
parameters no longer validate) is recorded on the fire and as the schedule's
``last_error``, logged, and the schedule moves on: the worker is not stopped
by it. Other errors roll the claim back and the time is tried again.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine import db, faults, logs, store
from engine.config import Settings
from engine.cron import Calendar, check_templates, resolve_params
from engine.errors import BadInput, Contention
from engine.flow import Flow
from engine.outage import Outage, is_outage
from engine.registry import Registry
from engine.store.schedules import DueSchedule, SlotTaken
from engine.store.status import CatchUp
from engine.submit import submit
from engine.transports import transport_for
from engine.transports.base import Transport

__all__ = [
    "Fired",
    "Schedule",
    "ScheduleFirer",
    "add_schedule",
    "list_schedules",
    "remove_schedule",
]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_DUE_BATCH = 50


@dataclass(frozen=True)
class Schedule:
    """A schedule as ``engine schedule list`` shows it (times in UTC, and local)."""

    name: str
    flow: str
    cron: str
    timezone: str
    params: dict[str, Any]
    catch_up: str
    next_fire_at: datetime
    next_fire_local: datetime
    last_fired_for: datetime | None
    last_fired_at: datetime | None
    last_job_id: uuid.UUID | None
    last_error: str | None
    created_by: str | None

    def as_json(self) -> dict[str, Any]:
        def iso(t: datetime | None) -> str | None:
            return None if t is None else t.isoformat()

        return {
            "name": self.name,
            "flow": self.flow,
            "cron": self.cron,
            "timezone": self.timezone,
            "params": self.params,
            "catch_up": self.catch_up,
            "next_fire_at": iso(self.next_fire_at),
            "next_fire_local": iso(self.next_fire_local),
            "last_fired_for": iso(self.last_fired_for),
            "last_fired_at": iso(self.last_fired_at),
            "last_job_id": None if self.last_job_id is None else str(self.last_job_id),
            "last_error": self.last_error,
            "created_by": self.created_by,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Schedule:
        calendar = Calendar.parse(row["cron"], row["timezone"])
        return cls(
            name=row["name"],
            flow=row["flow"],
            cron=row["cron"],
            timezone=row["timezone"],
            params=dict(row["params"]),
            catch_up=row["catch_up"],
            next_fire_at=row["next_fire_at"],
            next_fire_local=calendar.local(row["next_fire_at"]),
            last_fired_for=row["last_fired_for"],
            last_fired_at=row["last_fired_at"],
            last_job_id=row["last_job_id"],
            last_error=row["last_error"],
            created_by=row["created_by"],
        )


def add_schedule(
    name: str,
    flow: str,
    cron: str,
    *,
    timezone: str = "UTC",
    params: Mapping[str, Any] | None = None,
    catch_up: str = "latest",
    created_by: str | None = None,
    settings: Settings | None = None,
    registry: Registry | None = None,
) -> Schedule:
    """Add a schedule; :class:`BadInput` (naming the value) for anything invalid.

    The flow must be registered, the calendar valid, and ``params`` (with
    fire-time values resolved for the first time it fires) must validate
    against the flow's parameter model. The flow's admission check is not
    run: it is about the data at the time the job is submitted.
    """
    settings = settings or Settings()
    if not _NAME.match(name):
        raise BadInput(
            f"invalid schedule name {name!r}: 1 to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    target = (registry or Registry.load(settings.flow_modules)).get(flow)
    calendar = Calendar.parse(cron, timezone)
    try:
        policy = CatchUp(catch_up)
    except ValueError:
        valid = ", ".join(c.value for c in CatchUp)
        raise BadInput(f"invalid catch-up {catch_up!r}; valid: {valid}") from None
    values = dict(params or {})
    check_templates(values)
    with db.connect(settings) as conn, conn.transaction():
        first = calendar.after(store.schedule_select_db_now(conn))
        target.parse_params(resolve_params(values, first, calendar.tz))
        if not store.schedule_insert_if_absent(
            conn,
            name=name,
            flow=target.name,
            cron=cron,
            timezone=timezone,
            params=values,
            catch_up=policy,
            next_fire_at=first,
            created_by=created_by,
        ):
            raise BadInput(
                f"a schedule named {name!r} exists; `engine schedule remove {name}` first"
            )
        rows = store.schedule_select_all(conn)
    return next(Schedule.from_row(r) for r in rows if r["name"] == name)


def list_schedules(settings: Settings | None = None) -> list[Schedule]:
    """Every schedule, by name."""
    with db.connect(settings or Settings()) as conn:
        return [Schedule.from_row(r) for r in store.schedule_select_all(conn)]


def remove_schedule(name: str, settings: Settings | None = None) -> None:
    """Remove a schedule (its jobs stay); :class:`BadInput` naming the existing ones."""
    with db.connect(settings or Settings()) as conn, conn.transaction():
        if store.schedule_delete_by_name(conn, name):
            return
        names = store.schedule_select_names(conn)
    raise BadInput(f"no schedule named {name!r}; schedules: {', '.join(names) or '(none)'}")


@dataclass(frozen=True)
class Fired:
    """One scheduled time fired: its job, or why the flow refused it."""

    schedule: str
    scheduled_for: datetime
    job_id: uuid.UUID | None
    created: bool
    error: str | None = None


class ScheduleFirer:
    """Fires due schedules of the flows in ``registry``; see the module docstring."""

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
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.worker = worker
        self.transport = transport or transport_for(settings)
        self.stop = stop if stop is not None else threading.Event()
        self.outage = outage
        self._connect = connect or (lambda: db.connect(settings))
        self._conn: psycopg.Connection[Any] | None = None
        self._thread: threading.Thread | None = None

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
            faults.hit("schedule_before_commit")
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
            with conn.transaction():  # a refusal undoes this submit only, not the claim
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
            error = str(exc)
            store.schedule_fire_set_outcome(conn, due.id, slot, job_id=None, error=error)
            log.warning(
                "schedule %s: the %s job for %s was refused: %s (the schedule moves on)",
                due.name,
                due.flow,
                slot.isoformat(),
                error,
            )
            return Fired(due.name, slot, None, False, error)
        store.schedule_fire_set_outcome(conn, due.id, slot, job_id=result.job_id, error=None)
        return Fired(due.name, slot, result.job_id, result.created)

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

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            self._conn.autocommit = False
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def start(self) -> None:
        """Run :meth:`run` in a daemon thread until :attr:`stop` is set."""
        # its log lines carry the worker's context (the worker binds it before starting us)
        self._thread = threading.Thread(
            target=logs.inheriting(self.run), name="schedule-firer", daemon=True
        )
        self._thread.start()

    def run(self) -> None:
        """Fire due schedules every ``sweep_interval_s`` until stopped; outages are waited out."""
        try:
            while not self.stop.is_set():
                if self.outage is not None and self.outage.down.is_set():
                    self.stop.wait(min(1.0, self.settings.sweep_interval_s))
                    continue
                try:
                    self.fire_due()
                except Exception as exc:
                    self._close()
                    if is_outage(exc):
                        if self.outage is not None:
                            self.outage.failed(exc, "schedule firer")
                    else:
                        log.exception(
                            "firing schedules failed; next round in %s s",
                            self.settings.sweep_interval_s,
                        )
                self.stop.wait(self.settings.sweep_interval_s)
        finally:
            self._close()

    def close(self, timeout_s: float) -> None:
        """Stop the thread; a fire in progress commits or rolls back within ``timeout_s``."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
