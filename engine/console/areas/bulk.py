"""Bulk actions (operators): a filter's frozen preview, shown, then applied with a reason.

The same API as ``engine retry|cancel|dlq replay|dlq purge FILTER --dry-run`` and
``--apply PREVIEW`` (:mod:`engine.jobs.bulk`): the runs page and the dead letters
page each have a form that writes a preview (POST ``/bulk/preview``); its page
(``/bulk/ID``) shows the count by flow and state and a sample before its Apply
button (POST ``/bulk/ID/apply``, a reason required), which acts on that set only
and says what it skipped. Audited per item with the signed-in user.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from engine.console.actions import CONSOLE, act, actor, flash, form, local_path
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import shared
from engine.errors import BadInput, EngineError
from engine.jobs import bulk
from engine.jobs.bulk.filtering import ACTIONS, BulkFilter, parse_when
from engine.jobs.search import parse_pair

__all__ = ["nav", "routes"]

_SHOWN_SKIPS = 5


def _filter(fields: dict[str, str]) -> BulkFilter:
    def given(name: str) -> str | None:
        return (fields.get(name) or "").strip() or None

    since, until = given("since"), given("until")
    return BulkFilter(
        flow=given("flow"),
        state=given("state"),
        error=given("error"),
        since=None if since is None else parse_when("since", since),
        until=None if until is None else parse_when("until", until),
        tags=() if given("tag") is None else (parse_pair("tag", given("tag") or ""),),
        params=() if given("param") is None else (parse_pair("param", given("param") or ""),),
    )


@guarded(Permission.OPERATE)
async def preview_bulk(request: Request) -> Response:
    settings = shared(request).settings
    fields = await form(request)
    action = fields.get("action", "")
    back = local_path(fields.get("back"), "/dead-letters" if action in ("replay", "purge") else "/")

    def work() -> bulk.BulkPreview:
        if action not in ACTIONS:
            raise BadInput(f"bad bulk action {action!r}: one of {', '.join(ACTIONS)}")
        return bulk.preview(settings, action, _filter(fields), actor=actor(request))

    try:
        made = await run_in_threadpool(work)
    except BadInput as exc:
        flash(request, f"refused: {exc}", ok=False)
        return RedirectResponse(back, status_code=303)
    except EngineError as exc:
        flash(request, f"not done: {exc}", ok=False)
        return RedirectResponse(back, status_code=303)
    return RedirectResponse(f"/bulk/{made.id}", status_code=303)


def _preview_id(request: Request) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(request.path_params["id"]))
    except ValueError:
        return None


@guarded(Permission.OPERATE)
async def preview_page(request: Request) -> Response:
    c = shared(request)
    preview_id = _preview_id(request)
    made: bulk.BulkPreview | None = None
    error = None
    if preview_id is None:
        error = f"bad preview id {request.path_params['id']!r}"
    else:
        try:
            made = await run_in_threadpool(bulk.show, c.settings, preview_id)
        except BadInput as exc:
            error = str(exc)
    return c.render(
        request,
        "console/bulk.html.j2",
        title="Bulk preview",
        here="runs" if made is None or made.action in ("retry", "cancel") else "dead-letters",
        p=made,
        error=error,
    )


@guarded(Permission.OPERATE)
async def apply_bulk(request: Request) -> Response:
    settings = shared(request).settings
    fields = await form(request)
    preview_id = _preview_id(request)
    here = f"/bulk/{request.path_params['id']}"

    def work() -> str:
        if preview_id is None:
            raise BadInput(f"bad preview id {request.path_params['id']!r}")
        done = bulk.apply(
            settings,
            preview_id,
            reason=fields.get("reason") or "",
            actor=actor(request),
            source=CONSOLE,
        )
        return _said(done)

    return await act(request, work, here, fields)


def _said(done: bulk.BulkApplied) -> str:
    text = (
        f"{done.action} done for {len(done.done)} item(s); {len(done.skipped)} skipped "
        f"(changed since the preview), {len(done.refused)} refused"
    )
    if done.left():
        text += f"; {done.left()}"
    listed: list[Any] = [*done.skipped, *done.refused][:_SHOWN_SKIPS]
    if listed:
        text += ": " + "; ".join(f"{s.id} ({s.why})" for s in listed)
    return text


nav: list[Any] = []

routes = [
    Route("/bulk/preview", preview_bulk, methods=["POST"]),
    Route("/bulk/{id}", preview_page, methods=["GET"]),
    Route("/bulk/{id}/apply", apply_bulk, methods=["POST"]),
]
