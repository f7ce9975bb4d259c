"""The pages a domain package adds (:mod:`engine.console.extension`): ``/x/<name>``.

A page's view returns sections the console draws with its own templates;
its forms POST to ``/x/<name>/<action>``, allowed to a role with the
action's permission (checked here, whatever the form showed). A page that
names flows in ``job_flows`` adds its sections to those jobs' pages
(:func:`job_sections`). Each page gets a nav entry of its own
(:class:`~engine.console.shared.Console` makes them).
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from engine.console.actions import act, actor, form
from engine.console.auth import guarded
from engine.console.extension import ActionRequest, ConsolePage, PageRequest, Section
from engine.console.roles import Permission, allowed
from engine.console.shared import Console, NavEntry, shared
from engine.errors import BadInput
from engine.reports.context import RunReport

__all__ = ["job_sections", "nav", "routes"]


@guarded(Permission.READ)
async def extension_page(request: Request) -> Response:
    c = shared(request)
    page = c.pages.get(request.path_params["page"])
    if page is None:
        return PlainTextResponse("no such page", status_code=404)
    query = dict(request.query_params)
    error = None
    try:
        sections = await run_in_threadpool(
            page.view, PageRequest(c.settings, query, actor(request))
        )
    except BadInput as exc:
        sections, error = [], str(exc)
    return c.render(
        request,
        "console/extension.html.j2",
        title=page.title,
        here=f"x/{page.name}",
        page=page,
        sections=sections,
        query=query,
        error=error,
    )


@guarded(Permission.READ)
async def extension_action(request: Request) -> Response:
    c = shared(request)
    page = c.pages.get(request.path_params["page"])
    action = page.actions.get(request.path_params["action"]) if page else None
    if page is None or action is None:
        return PlainTextResponse("no such action", status_code=404)
    user = request.state.user
    if not allowed(user.role, action.permission):
        return PlainTextResponse(
            f"{user.name} ({user.role}) may not do this: needs {action.permission}", 403
        )
    fields = await form(request)
    back = f"/x/{page.name}" + (f"?{urlencode(_query_of(page, fields))}" if fields else "")
    return await act(
        request, lambda: action.run(ActionRequest(c.settings, fields, user.name)), back, fields
    )


def job_sections(
    c: Console, request: Request, report: RunReport
) -> list[tuple[ConsolePage, list[Section]]]:
    """The sections the domain's pages add to this job's page (those naming its flow)."""
    pages = [p for p in c.pages.values() if p.job_view is not None and report.flow in p.job_flows]
    if not pages:
        return []
    query = {"job": report.job_id, "flow": report.flow}
    for name, value in report.params:
        decoded = json.loads(value)
        query.setdefault(name, decoded if isinstance(decoded, str) else value)
    shown: list[tuple[ConsolePage, list[Section]]] = []
    for page in pages:
        assert page.job_view is not None
        try:
            sections = page.job_view(PageRequest(c.settings, query, actor(request)))
        except BadInput as exc:
            sections = [Section(page.title, text=f"refused: {exc}")]
        shown.append((page, sections))
    return shown


def _query_of(page: ConsolePage, fields: dict[str, str]) -> dict[str, str]:
    """The page's query fields the form carried (so the page comes back as it was)."""
    return {f.name: fields[f.name] for f in page.query_fields if fields.get(f.name)}


nav: list[NavEntry] = []  # one per page, made from the registry's pages

routes = [
    Route("/x/{page}", extension_page, methods=["GET"]),
    Route("/x/{page}/{action}", extension_action, methods=["POST"]),
]
