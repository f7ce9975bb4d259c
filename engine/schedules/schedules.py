"""Recurring jobs: schedules that submit a flow on a calendar.

A schedule names a flow, its parameters and a calendar (:mod:`engine.schedules.calendar`:
a cron expression in a timezone). ``engine schedule add|list|remove`` (or
:func:`add_schedule`, :func:`list_schedules`, :func:`remove_schedule`)
manage them; every worker fires the due ones (:mod:`engine.schedules.firer`).

An operator acts on one (``engine schedule pause|resume|run``, the console):

- :func:`pause_schedule`: no worker fires it until it is resumed (the
  firer's claim restates "not paused", so a pause that commits first wins
  over a worker that had read it as due);
- :func:`resume_schedule`: it fires again from its next scheduled time after
  the resume. The times that fell while it was paused are skipped, whatever
  its catch-up policy (that is for times missed while no worker was up, not
  for times an operator held back): a resume never fires a burst;
- :func:`run_schedule_now`: its flow with its parameters (fire-time values
  taken at now) submitted now, by the submit the firer uses (admission and
  deduplication alike), without the scheduled time in the fingerprint: while
  an identical job is active, that job is returned (``created`` false), not
  a second one. Its calendar is untouched.

Each action records who (``actor``, default ``user@host``), from where and
why in the audit trail, in its own transaction. A pause of a paused schedule,
a resume of an active one, and a run that found its job active change
nothing and record nothing. An unknown name is :class:`BadInput` naming the
schedules that exist.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from engine import store
from engine.config import Settings
from engine.errors import BadInput, InvalidParameters
from engine.flow.registry import Registry
from engine.infra.json_fields import json_fields
from engine.jobs.admin import operator_action
from engine.jobs.audit import operator, record_action
from engine.jobs.submit import Submitted, submit
from engine.schedules.calendar import Calendar, check_templates, resolve_params
from engine.store import db, jsonb
from engine.store.status import AuditSource, CatchUp
from engine.transports import transport_for

__all__ = [
    "Schedule",
    "add_schedule",
    "list_schedules",
    "pause_schedule",
    "remove_schedule",
    "resume_schedule",
    "run_schedule_now",
]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


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
    last_job_id: (
        uuid.UUID | None
    )  # the last job it submitted (an earlier fire's, if the last had none)
    last_error: str | None
    created_by: str | None
    last_outcome: str | None = None  # the last fire's: job, refused or error
    unloaded: bool = False  # due, and no live worker loads its flow: nobody fires it
    paused_at: datetime | None = None  # paused: no worker fires it until it is resumed
    paused_by: str | None = None
    paused_reason: str | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def as_json(self) -> dict[str, Any]:
        return {**json_fields(self), "paused": self.paused}

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
            last_outcome=row.get("last_outcome"),
            unloaded=bool(row.get("unloaded")),
            paused_at=row.get("paused_at"),
            paused_by=row.get("paused_by"),
            paused_reason=row.get("paused_reason"),
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
    source: AuditSource | str = AuditSource.API,
) -> Schedule:
    """Add a schedule; :class:`BadInput` (naming the value) for anything invalid.

    The flow must be registered, the calendar valid, and ``params`` (with
    fire-time values resolved for the first time it fires) must validate
    against the flow's parameter model. The flow's admission check is not
    run: it is about the data at the time the job is submitted.

    The audit trail records the add, by ``created_by`` (default: the OS
    user at this host), in the same transaction.
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

    def refused(message: str) -> InvalidParameters:
        return InvalidParameters(target.name, [message])

    # NaN, an infinity, a NUL: refused naming the field, as given and as the flow reads it
    jsonb.checked(values, "params", error=refused)
    check_templates(values)
    with db.connect(settings) as conn, conn.transaction():
        first = calendar.after(store.schedule_select_db_now(conn))
        parsed = target.parse_params(resolve_params(values, first, calendar.tz))
        jsonb.model_json(parsed, "params", error=refused)
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
        record_action(
            conn,
            "schedule_add",
            "schedule",
            name,
            actor=created_by or operator(),
            source=source,
            detail={"flow": target.name, "cron": cron, "timezone": timezone, "params": values},
        )
        rows = store.schedule_select_all(conn, live_s=settings.worker_live_s)
    return next(Schedule.from_row(r) for r in rows if r["name"] == name)


def list_schedules(settings: Settings | None = None) -> list[Schedule]:
    """Every schedule, by name, with its last fire's outcome and whether a worker loads it."""
    settings = settings or Settings()
    with db.connect(settings) as conn:
        rows = store.schedule_select_all(conn, live_s=settings.worker_live_s)
    return [Schedule.from_row(r) for r in rows]


def remove_schedule(
    name: str,
    settings: Settings | None = None,
    *,
    actor: str | None = None,
    source: AuditSource | str = AuditSource.API,
) -> None:
    """Remove a schedule (its jobs stay); :class:`BadInput` naming the existing ones.

    The audit trail records the removal, by ``actor`` (default: the OS user
    at this host), in the same transaction.
    """
    with db.connect(settings or Settings()) as conn, conn.transaction():
        if store.schedule_delete_by_name(conn, name):
            record_action(conn, "schedule_remove", "schedule", name, actor=actor, source=source)
            return
        raise _unknown(conn, name)


def pause_schedule(
    name: str,
    *,
    settings: Settings | None = None,
    actor: str | None = None,
    source: AuditSource | str = AuditSource.API,
    reason: str | None = None,
) -> bool:
    """Pause schedule ``name``: no worker fires it until :func:`resume_schedule`.

    ``True``: paused now, recorded in the audit trail (by ``actor``, default
    ``user@host``, with ``reason``) and on the schedule; ``False``: it was
    paused already, nothing changed or recorded. :class:`BadInput` naming
    the schedules for an unknown name.
    """
    settings = settings or Settings()
    who = _who(actor)
    with _operator(settings, f"pausing schedule {name!r}") as conn, conn.transaction():
        if store.schedule_pause_if_active(conn, name, by=who, reason=reason) is None:
            if name in store.schedule_select_names(conn):
                return False  # paused already: idempotent
            raise _unknown(conn, name)
        record_action(
            conn, "schedule_pause", "schedule", name, actor=who, source=source, reason=reason
        )
    log.info("schedule %s paused by %s", name, who)
    return True


def resume_schedule(
    name: str,
    *,
    settings: Settings | None = None,
    actor: str | None = None,
    source: AuditSource | str = AuditSource.API,
    reason: str | None = None,
) -> bool:
    """Resume schedule ``name``: it fires from its next scheduled time after now.

    The times that fell while it was paused are not fired (see the module
    docstring). ``True``: resumed now and recorded (with the next time in
    the entry's detail); ``False``: it was not paused, nothing changed or
    recorded. :class:`BadInput` naming the schedules for an unknown name.
    """
    settings = settings or Settings()
    who = _who(actor)
    with _operator(settings, f"resuming schedule {name!r}") as conn, conn.transaction():
        row = store.schedule_select_by_name(conn, name)
        if row is None:
            raise _unknown(conn, name)
        if row["paused_at"] is None:
            return False  # active already: idempotent
        calendar = Calendar.parse(row["cron"], row["timezone"])
        resumed = store.schedule_resume_if_paused(
            conn, row["id"], next_after_now=calendar.after(row["db_now"])
        )
        if resumed is None:
            return False  # a racer resumed it first
        skipped_from = row["next_fire_at"] if row["next_fire_at"] < resumed else None
        record_action(
            conn,
            "schedule_resume",
            "schedule",
            name,
            actor=who,
            source=source,
            reason=reason,
            detail={
                "next_fire_at": _utc(resumed),
                "paused_at": _utc(row["paused_at"]),
                "paused_by": row["paused_by"],
                # the first of the times skipped while it was paused, if any
                "skipped_from": None if skipped_from is None else _utc(skipped_from),
            },
        )
    log.info("schedule %s resumed by %s; next time %s", name, who, resumed.isoformat())
    return True


def run_schedule_now(
    name: str,
    *,
    settings: Settings | None = None,
    registry: Registry | None = None,
    actor: str | None = None,
    source: AuditSource | str = AuditSource.API,
    reason: str | None = None,
) -> Submitted:
    """Submit schedule ``name``'s flow with its parameters now; the job submitted or found.

    The submit is the firer's (the flow's admission check, deduplication by
    fingerprint), with fire-time values taken at now in the schedule's
    timezone and no scheduled time: while an identical job is active it is
    returned with ``created`` false and nothing is recorded. A paused
    schedule runs too (and stays paused); its calendar is untouched. A
    refusal (:class:`engine.Refused`) or bad parameters raise
    :class:`BadInput` and nothing is written. Recorded in the audit trail
    with the job's id.
    """
    settings = settings or Settings()
    registry = registry or Registry.load(settings.flow_modules)
    who = _who(actor)
    publisher = transport_for(settings)
    with _operator(settings, f"running schedule {name!r}") as conn, conn.transaction():
        row = store.schedule_select_by_name(conn, name)
        if row is None:
            raise _unknown(conn, name)
        flow = registry.get(row["flow"])
        calendar = Calendar.parse(row["cron"], row["timezone"])
        params = resolve_params(row["params"], row["db_now"], calendar.tz)
        result = submit(
            flow,
            params,
            conn=conn,
            settings=settings,
            registry=registry,
            publisher=publisher,
            submitted_by=f"schedule {name} (run now by {who})",
        )
        if result.created:
            record_action(
                conn,
                "schedule_run",
                "schedule",
                name,
                actor=who,
                source=source,
                job_id=result.job_id,
                reason=reason,
                detail={
                    "flow": flow.name,
                    "params": params,
                    "paused": row["paused_at"] is not None,
                },
            )
    log.info(
        "schedule %s run now by %s: %s job %s%s",
        name,
        who,
        flow.name,
        result.job_id,
        "" if result.created else " (already active)",
    )
    return result


def _who(actor: str | None) -> str:
    return (actor or "").strip() or operator()


def _utc(t: datetime) -> str:
    return t.astimezone(UTC).isoformat()


@contextlib.contextmanager
def _operator(settings: Settings, what: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection with an operator's lock wait; past it, :class:`engine.errors.Busy`."""
    with (
        operator_action(settings, what, "engine_schedules"),
        db.connect(settings, lock_timeout_s=settings.admin_lock_timeout_s) as conn,
    ):
        yield conn


def _unknown(conn: psycopg.Connection[Any], name: str) -> BadInput:
    names = store.schedule_select_names(conn)
    return BadInput(f"no schedule named {name!r}; schedules: {', '.join(names) or '(none)'}")
