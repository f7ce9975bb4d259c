"""Audit: the latest entries of the audit trail, who did what, from where, and why."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.config import Settings
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.jobs.audit import audit_trail

__all__ = ["nav", "routes"]


def _rows(settings: Settings) -> list[dict[str, Any]]:
    return [
        {**e.__dict__, "detail_text": json.dumps(e.detail, sort_keys=True) if e.detail else ""}
        for e in audit_trail(settings, limit=200)
    ]


@guarded(Permission.READ)
async def audit_page(request: Request) -> Response:
    c = shared(request)
    rows = await run_in_threadpool(_rows, c.settings)
    return c.render(request, "console/audit.html.j2", title="Audit", here="audit", rows=rows)


nav = [NavEntry("audit", "Audit", "/audit")]

routes = [Route("/audit", audit_page, methods=["GET"])]
