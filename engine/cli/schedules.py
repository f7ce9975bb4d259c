"""``engine schedule add|list|remove|pause|resume|run``: flows submitted on a calendar.

The workers fire the schedules; an operator adds, removes, pauses, resumes and
runs one now, each recorded in the audit trail with ``--by`` (else user@host).
"""

from __future__ import annotations

import json
from datetime import datetime

import click
from rich.table import Table

from engine.cli.audit import by_option, reason_option
from engine.cli.jobs import whoami
from engine.cli.output import out, print_json, print_table
from engine.cli.state import current
from engine.errors import BadInput
from engine.schedules import schedules as api
from engine.schedules.calendar import CATCH_UP_LIMIT, TEMPLATES
from engine.schedules.schedules import Schedule
from engine.store.status import AuditSource, CatchUp

__all__ = ["schedule"]


@click.group()
def schedule() -> None:
    """Schedules: a flow submitted on a cron calendar; any worker fires each time once."""


def _params(values: tuple[str, ...]) -> dict[str, str]:
    params: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise BadInput(f"invalid --param {value!r}: expected KEY=VALUE, e.g. period=2026-11")
        params[key.replace("-", "_")] = text
    return params


@schedule.command("add")
@click.argument("name")
@click.option("--flow", required=True, help="the flow to submit (engine flows list)")
@click.option("--cron", required=True, help="minute hour day-of-month month day-of-week")
@click.option(
    "--timezone", default="UTC", help="IANA timezone the cron is read in, e.g. Europe/Istanbul"
)
@click.option(
    "--param",
    "param_values",
    multiple=True,
    metavar="KEY=VALUE",
    help=(
        "a parameter of the flow (repeatable); a value may be the scheduled time's "
        f"{', '.join(sorted(TEMPLATES))} in the timezone"
    ),
)
@click.option(
    "--catch-up",
    type=click.Choice([c.value for c in CatchUp]),
    default=CatchUp.LATEST.value,
    help=(
        "times missed while no worker was up: fire the latest once, or each "
        f"(at most {CATCH_UP_LIMIT})"
    ),
)
@by_option
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def schedule_add(
    name: str,
    flow: str,
    cron: str,
    timezone: str,
    param_values: tuple[str, ...],
    catch_up: str,
    by: str | None,
    as_json: bool,
) -> None:
    """Add schedule NAME; exit 2 naming a bad flow, cron, timezone or parameter.

    Recorded in the audit trail (and as the schedule's creator) with --by.
    """
    state = current()
    added = api.add_schedule(
        name,
        flow,
        cron,
        timezone=timezone,
        params=_params(param_values),
        catch_up=catch_up,
        created_by=by or whoami(),
        settings=state.settings,
        registry=state.registry,
        source=AuditSource.CLI,
    )
    if as_json:
        print_json(added.as_json())
        return
    out.print(
        f"schedule {added.name}: {added.flow} at '{added.cron}' ({added.timezone}); "
        f"next {_when(added.next_fire_at)} UTC = {_when(added.next_fire_local)} {added.timezone}",
        highlight=False,
        markup=False,
    )


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def schedule_list(as_json: bool) -> None:
    """List schedules: calendar, parameters, next time (UTC and local), last fire, paused."""
    rows = api.list_schedules(current().settings)
    if as_json:
        print_json({"schedules": [s.as_json() for s in rows]})
        return
    if not rows:
        out.print("no schedules", highlight=False)
        return
    table = Table("name", "flow", "cron", "timezone", "params", "next (UTC)", "next (local)")
    # a job id is copied into `engine status`: folded, never cut short
    table.add_column("last fired (local)", overflow="fold")
    paused = any(s.paused for s in rows)
    if paused:  # only then: the usual list keeps its width
        table.add_column("paused (local)", overflow="fold")
    for s in rows:
        table.add_row(
            s.name,
            s.flow,
            s.cron + ("" if s.catch_up == CatchUp.LATEST else f" (catch-up {s.catch_up})"),
            s.timezone,
            json.dumps(s.params, sort_keys=True),
            _when(s.next_fire_at),
            _when(s.next_fire_local),
            _last(s),
            *([_paused(s, zone=False) if s.paused else ""] if paused else []),
        )
    print_table(table, markup=False, highlight=False)


@schedule.command("remove")
@click.argument("name")
@by_option
def schedule_remove(name: str, by: str | None) -> None:
    """Remove schedule NAME (the jobs it submitted stay); recorded in the audit trail."""
    api.remove_schedule(name, current().settings, actor=by or whoami(), source=AuditSource.CLI)
    out.print(f"schedule {name} removed", highlight=False)


@schedule.command("pause")
@click.argument("name")
@by_option
@reason_option
def schedule_pause(name: str, by: str | None, reason: str | None) -> None:
    """Pause schedule NAME: no worker fires it until it is resumed; audited.

    Pausing a paused schedule changes and records nothing.
    """
    settings = current().settings
    if api.pause_schedule(
        name, settings=settings, actor=by or whoami(), source=AuditSource.CLI, reason=reason
    ):
        out.print(f"schedule {name} paused", highlight=False, markup=False)
        return
    s = _one(name)
    out.print(
        f"schedule {name} is paused already ({_paused(s)}); nothing recorded",
        highlight=False,
        markup=False,
    )


@schedule.command("resume")
@click.argument("name")
@by_option
@reason_option
def schedule_resume(name: str, by: str | None, reason: str | None) -> None:
    """Resume schedule NAME from its next time after now; audited.

    The times that fell while it was paused are not fired, whatever its
    catch-up. Resuming an active schedule changes and records nothing.
    """
    settings = current().settings
    resumed = api.resume_schedule(
        name, settings=settings, actor=by or whoami(), source=AuditSource.CLI, reason=reason
    )
    s = _one(name)
    if resumed:
        out.print(
            f"schedule {name} resumed; next {_when(s.next_fire_at)} UTC = "
            f"{_when(s.next_fire_local)} {s.timezone}",
            highlight=False,
            markup=False,
        )
    else:
        out.print(f"schedule {name} is not paused; nothing recorded", highlight=False)


@schedule.command("run")
@click.argument("name")
@by_option
@reason_option
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def schedule_run(name: str, by: str | None, reason: str | None, as_json: bool) -> None:
    """Submit schedule NAME's flow with its parameters now; print the job id; audited.

    The flow's admission check decides as for a scheduled fire (a refusal
    exits 2). While an identical job is active, its id is printed and no
    second job is submitted. The schedule's calendar (and a pause) is untouched.
    """
    state = current()
    result = api.run_schedule_now(
        name,
        settings=state.settings,
        registry=state.registry,
        actor=by or whoami(),
        source=AuditSource.CLI,
        reason=reason,
    )
    if as_json:
        print_json({**result.as_json(), "schedule": name})
    elif result.created:
        out.print(
            f"schedule {name}: submitted {result.flow} job {result.job_id} ({result.status})",
            highlight=False,
        )
    else:
        out.print(
            f"schedule {name}: {result.flow} job {result.job_id} is already active "
            f"({result.status}, same parameters); not submitted again",
            highlight=False,
        )


def _one(name: str) -> Schedule:
    found = next((s for s in api.list_schedules(current().settings) if s.name == name), None)
    if found is None:  # removed in between
        raise BadInput(f"no schedule named {name!r}")
    return found


def _paused(s: Schedule, *, zone: bool = True) -> str:
    """When (local), by whom and why a paused schedule was paused."""
    when = "" if s.paused_at is None else _when(s.paused_at.astimezone(s.next_fire_local.tzinfo))
    return f"since {when}{f' {s.timezone}' if zone else ''} by {s.paused_by}" + (
        f": {s.paused_reason}" if s.paused_reason else ""
    )


def _when(t: datetime) -> str:
    return f"{t:%Y-%m-%d %H:%M}"


def _last(s: Schedule) -> str:
    """The last fire's outcome (its job, or why it has none), then a due time nobody fires."""
    lines = []
    if s.last_fired_for is None:
        lines.append("never")
    else:
        when = _when(s.last_fired_for.astimezone(s.next_fire_local.tzinfo))
        if s.last_outcome == "job":
            lines.append(f"{when} job {s.last_job_id}")
        else:  # refused or error (a fire recorded before outcomes were is a refusal)
            lines.append(f"{when} {s.last_outcome or 'refused'}: {s.last_error}")
    if s.unloaded:
        lines.append(f"due: no worker loads flow {s.flow}")
    return "\n".join(lines)
