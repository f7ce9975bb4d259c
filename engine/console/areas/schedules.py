"""Schedules: each one's next and last firing, and pause, resume, run now (operators).

The same functions as ``engine schedules pause``, ``resume`` and ``run``,
audited with the signed-in user.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.console.actions import CONSOLE, act, actor, form, reason
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import Console, NavEntry, shared
from engine.errors import BadInput
from engine.schedules import schedules

__all__ = ["nav", "routes"]

BACK = "/schedules"


def _row(s: schedules.Schedule) -> dict[str, Any]:
    return {
        "name": s.name,
        "flow": s.flow,
        "cron": s.cron,
        "timezone": s.timezone,
        "params_text": json.dumps(s.params, sort_keys=True),
        "next_at": s.next_fire_at,
        "last_at": s.last_fired_at,
        "last_outcome": s.last_outcome,
        "paused": s.paused,
        "paused_by": s.paused_by,
        "paused_reason": s.paused_reason,
    }


@guarded(Permission.READ)
async def schedules_page(request: Request) -> Response:
    c = shared(request)
    listed = await run_in_threadpool(schedules.list_schedules, c.settings)
    rows = [_row(s) for s in listed]
    return c.render(
        request, "console/schedules.html.j2", title="Schedules", here="schedules", rows=rows
    )


def _do(c: Console, name: str, action: str, by: str, fields: dict[str, str]) -> str:
    """The action with the form's reason, as ``engine schedule pause|resume|run --reason``."""
    settings, why = c.settings, reason(fields)
    if action == "pause":
        changed = schedules.pause_schedule(
            name, settings=settings, actor=by, source=CONSOLE, reason=why
        )
        return f"schedule {name} " + ("paused" if changed else "was already paused")
    if action == "resume":
        changed = schedules.resume_schedule(
            name, settings=settings, actor=by, source=CONSOLE, reason=why
        )
        return f"schedule {name} " + ("resumed" if changed else "was not paused")
    if action == "run":
        sent = schedules.run_schedule_now(
            name, settings=settings, registry=c.registry, actor=by, source=CONSOLE, reason=why
        )
        if not sent.created:
            return f"schedule {name}: job {sent.job_id} is already active; not submitted"
        return f"schedule {name} submitted job {sent.job_id}"
    raise BadInput(f"invalid schedule action {action!r}; valid: pause, resume, run")


@guarded(Permission.OPERATE)
async def schedule_action(request: Request) -> Response:
    c = shared(request)
    fields = await form(request)
    name, action = request.path_params["name"], request.path_params["action"]
    by = actor(request)
    return await act(request, lambda: _do(c, name, action, by, fields), BACK, fields)


nav = [NavEntry("schedules", "Schedules", BACK)]

routes = [
    Route("/schedules", schedules_page, methods=["GET"]),
    Route("/schedules/{name}/{action}", schedule_action, methods=["POST"]),
]
