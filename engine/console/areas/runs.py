"""Runs: the search over every job, newest first, a page at a time (``engine runs``'s).

The filters are the search API's (:func:`engine.jobs.search.parse_run_query`);
a bad one is shown above an empty table, never answered with an error page.
"""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.config import Settings
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.errors import BadInput
from engine.jobs.search import RunPage, RunQuery, SearchField, parse_run_query, search_runs
from engine.store import db
from engine.waits.inbox import awaiting_count

__all__ = ["nav", "routes"]

STATUSES = ["pending", "running", "waiting", "done", "failed", "cancelled"]


def _search(settings: Settings, query: RunQuery) -> tuple[RunPage | None, str | None, int]:
    """A page of runs (or why not), and how many steps wait for a signal (the nav's count)."""
    with db.connect(settings, autocommit=True) as conn:
        try:
            page, error = search_runs(conn, query), None
        except BadInput as exc:
            page, error = None, str(exc)
        return page, error, awaiting_count(conn)


@guarded(Permission.READ)
async def runs_page(request: Request) -> Response:
    c = shared(request)
    registry = c.registry
    # the search fields the flow modules add (a domain's own words: the ERP's period, store)
    fields = [f for f in (registry.search_fields if registry else []) if isinstance(f, SearchField)]
    flows = sorted(registry.names()) if registry else []
    values = {k: v for k, v in request.query_params.items() if v}
    error = None
    try:
        query = parse_run_query(values, fields)
    except BadInput as exc:
        query, error = RunQuery(), str(exc)
    page, refused, waiting = await run_in_threadpool(_search, c.settings, query)
    base = {k: v for k, v in values.items() if k != "before"}
    next_href = None
    if page and page.next_before:
        next_href = "/?" + urlencode({**base, "before": page.next_before})
    return c.render(
        request,
        "console/runs.html.j2",
        title="Runs",
        here="runs",
        counts={"approvals": waiting},
        q=query,
        search_fields=fields,
        field_values=values,
        searchable={n: registry.get(n).searchable for n in flows} if registry else {},
        rows=page.rows if page else [],
        error=refused or error,
        flows=flows,
        statuses=STATUSES,
        next_href=next_href,
        first_href=("/?" + urlencode(base)) if "before" in values else None,
    )


nav = [NavEntry("runs", "Runs", "/")]

routes = [
    Route("/", runs_page, methods=["GET"]),
    Route("/index.html", runs_page, methods=["GET"]),
]
