"""Workers: every worker seen in the last hour, live, dead or stopped (the roster's)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.worker.roster import recent_workers

__all__ = ["nav", "routes"]


@guarded(Permission.READ)
async def workers_page(request: Request) -> Response:
    c = shared(request)
    rows = await run_in_threadpool(recent_workers, c.settings)
    return c.render(
        request,
        "console/workers.html.j2",
        title="Workers",
        here="workers",
        rows=rows,
        live_s=f"{c.settings.worker_live_s:g}",
    )


nav = [NavEntry("workers", "Workers", "/workers")]

routes = [Route("/workers", workers_page, methods=["GET"])]
