"""Audit: the entries of the audit trail, who did what, from where, and why; filtered.

The filters are :func:`engine.jobs.audit.audit_trail`'s: who (exact), the
action (exact), and a period of days (``from`` and ``to``, inclusive, UTC).
A bad one is shown alone, with what would be valid, never above a table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.config import Settings
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.errors import BadInput
from engine.jobs.audit import Audited, audit_trail

__all__ = ["nav", "routes"]

LIMIT = 200

ACTIONS = (
    "cancel",
    "retry",
    "replay",
    "purge",
    "signal",
    "signal_refused",
    "self_approval",
    "schedule_add",
    "schedule_remove",
    "schedule_pause",
    "schedule_resume",
    "schedule_run",
    "close",
    "reopen",
    "requeue",
    "redate",
    "threshold",
)
"""The actions offered in the filter (any other word is accepted as typed)."""


@dataclass(frozen=True)
class AuditFilter:
    actor: str | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def _day(name: str, text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise BadInput(f"invalid {name} {text!r}; valid: a day as YYYY-MM-DD") from None


def parse_filter(query: dict[str, str]) -> AuditFilter:
    """The page's query as filters; :class:`BadInput` naming a bad day."""
    actor = (query.get("actor") or "").strip() or None
    action = (query.get("action") or "").strip() or None
    first = (query.get("from") or "").strip()
    last = (query.get("to") or "").strip()
    since = datetime.combine(_day("from", first), datetime.min.time(), UTC) if first else None
    until = None
    if last:
        until = datetime.combine(_day("to", last) + timedelta(days=1), datetime.min.time(), UTC)
    if since and until and until <= since:
        raise BadInput(f"invalid period: to {last} is before from {first}")
    return AuditFilter(actor, action, since, until)


def why(e: Audited) -> str:
    """The entry's reason; an older decision's is in its signal's data."""
    if e.reason:
        return e.reason
    data = e.detail.get("data") if isinstance(e.detail, dict) else None
    found = data.get("reason") if isinstance(data, dict) else None
    return found if isinstance(found, str) else ""


def _rows(settings: Settings, f: AuditFilter) -> list[dict[str, Any]]:
    entries = audit_trail(
        settings,
        actor=f.actor,
        action=f.action,
        since=f.since,
        until=f.until,
        limit=LIMIT,
    )
    return [
        {
            **e.__dict__,
            "why": why(e),
            "detail_text": json.dumps(e.detail, sort_keys=True) if e.detail else "",
        }
        for e in entries
    ]


@guarded(Permission.READ)
async def audit_page(request: Request) -> Response:
    c = shared(request)
    query = {k: v for k, v in request.query_params.items() if v}
    error, rows = None, []
    try:
        rows = await run_in_threadpool(_rows, c.settings, parse_filter(query))
    except BadInput as exc:
        error = str(exc)
    return c.render(
        request,
        "console/audit.html.j2",
        title="Audit",
        here="audit",
        rows=rows,
        error=error,
        query=query,
        actions=ACTIONS,
        limit=LIMIT,
    )


nav = [NavEntry("audit", "Audit", "/audit")]

routes = [Route("/audit", audit_page, methods=["GET"])]
