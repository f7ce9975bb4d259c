"""Recurring jobs: schedules that submit a flow on a calendar.

A schedule names a flow, its parameters and a calendar (:mod:`engine.schedules.calendar`:
a cron expression in a timezone). ``engine schedule add|list|remove`` (or
:func:`add_schedule`, :func:`list_schedules`, :func:`remove_schedule`)
manage them; every worker fires the due ones (:mod:`engine.schedules.firer`).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine import store
from engine.config import Settings
from engine.errors import BadInput
from engine.flow.registry import Registry
from engine.jobs.audit import operator, record_action
from engine.schedules.calendar import Calendar, check_templates, resolve_params
from engine.store import db
from engine.store.status import AuditSource, CatchUp

__all__ = [
    "Schedule",
    "add_schedule",
    "list_schedules",
    "remove_schedule",
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
            "last_outcome": self.last_outcome,
            "unloaded": self.unloaded,
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
            last_outcome=row.get("last_outcome"),
            unloaded=bool(row.get("unloaded")),
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
        names = store.schedule_select_names(conn)
    raise BadInput(f"no schedule named {name!r}; schedules: {', '.join(names) or '(none)'}")
