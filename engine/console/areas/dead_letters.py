"""Dead letters: the messages no worker could take, and their replay or purge (operators).

The same functions as ``engine dead-letters replay`` and ``purge``, audited
with the signed-in user.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.console.actions import CONSOLE, act, actor, form, reason
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.jobs import admin

__all__ = ["nav", "routes"]

BACK = "/dead-letters"


@guarded(Permission.READ)
async def dead_letters_page(request: Request) -> Response:
    c = shared(request)
    rows = await run_in_threadpool(admin.dead_letters, c.settings, 200)
    return c.render(
        request,
        "console/dead_letters.html.j2",
        title="Dead letters",
        here="dead-letters",
        rows=rows,
        flows=sorted(c.registry.names()) if c.registry else [],
    )


@guarded(Permission.OPERATE)
async def replay_dead_letter(request: Request) -> Response:
    settings = shared(request).settings
    fields = await form(request)
    dl_id = int(request.path_params["id"])

    def work() -> str:
        why = reason(fields)
        return admin.replay(settings, dl_id, actor=actor(request), source=CONSOLE, reason=why)

    return await act(request, work, BACK, fields)


@guarded(Permission.OPERATE)
async def purge_dead_letters(request: Request) -> Response:
    settings = shared(request).settings
    fields = await form(request)

    def work() -> str:
        n = admin.purge(settings, actor=actor(request), source=CONSOLE, reason=reason(fields))
        return f"{n} dead letter(s) purged"

    return await act(request, work, BACK, fields)


nav = [NavEntry("dead-letters", "Dead letters", BACK)]

routes = [
    Route("/dead-letters", dead_letters_page, methods=["GET"]),
    Route("/dead-letters/{id:int}/replay", replay_dead_letter, methods=["POST"]),
    Route("/dead-letters/purge", purge_dead_letters, methods=["POST"]),
]
