"""Approvals: every step waiting for a signal now, with what it published for the approver.

The decision itself is a job's action (``POST /runs/<id>/decide``,
:mod:`engine.console.areas.jobs`); this page comes back after it.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.config import Settings
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.store import db
from engine.waits.inbox import Awaiting, awaiting_approval

__all__ = ["nav", "routes"]


def _inbox(settings: Settings) -> list[Awaiting]:
    with db.connect(settings, autocommit=True) as conn:
        return awaiting_approval(conn, limit=100)


@guarded(Permission.READ)
async def approvals_page(request: Request) -> Response:
    c = shared(request)
    awaiting = await run_in_threadpool(_inbox, c.settings)
    return c.render(
        request,
        "console/approvals.html.j2",
        title="Approvals",
        here="approvals",
        awaiting=awaiting,
        counts={"approvals": len(awaiting)},
    )


nav = [NavEntry("approvals", "Approvals", "/approvals")]

routes = [Route("/approvals", approvals_page, methods=["GET"])]
