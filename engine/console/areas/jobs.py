"""A job's page: its report drawn live, what it waits for, and the actions on it.

``/runs/<id>.html`` takes a whole id or a unique prefix (redirected to the
whole id). The page polls ``/runs/<id>/version`` (:class:`~engine.console.shared.VersionCache`:
one query per job and interval whatever the number of browsers) and fetches
``/runs/<id>/live`` when it changes. Cancel and retry need the operator's
permission, approve and reject the approver's; each goes through the same
engine function as its CLI command, audited with the signed-in user.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from engine.console.actions import CONSOLE, act, actor, form, parse_uuid, reason
from engine.console.areas.extensions import job_sections
from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import Console, NavEntry, shared
from engine.errors import BadInput, NoSuchJob
from engine.jobs import admin
from engine.jobs.lookup import job_version, resolve_job_id
from engine.reports.context import build_run_report
from engine.reports.render import render_run_html
from engine.retention.pruned import pruned_job
from engine.store import db
from engine.waits.inbox import awaiting_approval
from engine.waits.signals import operator_signal

__all__ = ["nav", "routes"]


def _resolve(c: Console, text: str) -> uuid.UUID:
    with db.connect(c.settings, autocommit=True) as conn:
        return resolve_job_id(conn, text)


def _live_context(c: Console, request: Request, job_id: uuid.UUID) -> dict[str, Any]:
    # the version first: a change after it is read shows as a newer version, never as a
    # page that claims to be current while drawing an older state
    with db.connect(c.settings, autocommit=True) as conn:
        version = job_version(conn, job_id)
        awaiting = awaiting_approval(conn, limit=50, job_id=job_id)
    report = build_run_report(c.read, job_id, c.registry)
    html = render_run_html(report, c.env, fragment=True)
    return {
        "job_id": str(job_id),
        "job_sections": job_sections(c, request, report),
        "report_html": Markup(html),  # noqa: S704 (rendered by our own autoescaping templates)
        "awaiting": awaiting,
        "active": report.status in ("pending", "running", "waiting"),
        # a rejected job is the data's decision: `engine retry` refuses it
        "retryable": report.status in ("failed", "cancelled") and not report.rejected,
        "version": version,
    }


@guarded(Permission.READ)
async def job_page(request: Request) -> Response:
    c = shared(request)
    text = request.path_params["job"]
    try:
        job_id = await run_in_threadpool(_resolve, c, text)
    except (BadInput, NoSuchJob) as exc:
        return PlainTextResponse(str(exc), status_code=404)
    if str(job_id) != text:
        return RedirectResponse(f"/runs/{job_id}.html", status_code=303)
    try:
        context = await run_in_threadpool(_live_context, c, request, job_id)
    except NoSuchJob as exc:
        pruned = await run_in_threadpool(pruned_job, c.settings, job_id)
        if pruned is None:
            return PlainTextResponse(str(exc), status_code=404)
        # retention pruned its rows: its summary, and where its report was stored
        return c.render(
            request,
            "console/job_pruned.html.j2",
            title=f"job {job_id} (pruned)",
            here="runs",
            job=pruned,
            params=json.dumps(pruned.params, sort_keys=True),
        )
    return c.render(
        request,
        "console/job.html.j2",
        title=f"job {job_id}",
        here="runs",
        refresh_ms=int(c.console.refresh_s * 1000),
        **context,
    )


@guarded(Permission.READ)
async def job_version_json(request: Request) -> Response:
    job_id = parse_uuid(request.path_params["job"])
    if job_id is None:
        return JSONResponse({"error": "not a job id"}, status_code=404)
    version = await run_in_threadpool(shared(request).versions.get, job_id)
    if version is None:
        return JSONResponse({"error": f"no job {job_id}"}, status_code=404)
    status = version.split(".", 1)[0]
    return JSONResponse({"version": version, "active": status in ("pending", "running")})


@guarded(Permission.READ)
async def job_live(request: Request) -> Response:
    c = shared(request)
    job_id = parse_uuid(request.path_params["job"])
    if job_id is None:
        return PlainTextResponse("not a job id", status_code=404)
    try:
        context = await run_in_threadpool(_live_context, c, request, job_id)
    except NoSuchJob as exc:
        return PlainTextResponse(str(exc), status_code=404)
    return c.render(request, "console/job_live.html.j2", **context)


JobWork = Callable[[Request, uuid.UUID, dict[str, str]], str]


def job_action(permission: Permission, work: JobWork) -> Callable[[Request], Awaitable[Response]]:
    """A POST on one job: its id from the path, ``work``'s outcome shown on its page."""

    @guarded(permission)
    async def endpoint(request: Request) -> Response:
        fields = await form(request)
        job_id = parse_uuid(request.path_params["job"])
        if job_id is None:
            return PlainTextResponse("not a job id", status_code=404)
        return await act(
            request, lambda: work(request, job_id, fields), f"/runs/{job_id}.html", fields
        )

    return endpoint


def cancel(request: Request, job_id: uuid.UUID, fields: dict[str, str]) -> str:
    settings = shared(request).settings
    admin.cancel(settings, job_id, reason(fields), actor=actor(request), source=CONSOLE)
    return f"job {job_id} cancelled"


def retry(request: Request, job_id: uuid.UUID, fields: dict[str, str]) -> str:
    done = admin.retry_job(
        shared(request).settings,
        job_id,
        actor=actor(request),
        source=CONSOLE,
        reason=reason(fields),
    )
    return f"job {job_id} retried: {done.step_runs} step run(s) run again"


def decide(request: Request, job_id: uuid.UUID, fields: dict[str, str]) -> str:
    """Approve or reject: the awaited signal with the decision, sent by the signed-in user."""
    decision, name, why = fields.get("decision", ""), fields.get("signal", ""), reason(fields)
    if decision not in ("approve", "reject"):
        raise BadInput(f"invalid decision {decision!r}; valid: approve, reject")
    # a reason (approve and reject alike) and who may approve: the engine's refusal, audited
    by = actor(request)
    data: dict[str, Any] = {"decision": decision, "by": by}
    if why:
        data["reason"] = why
    sent = operator_signal(
        job_id, name, data, settings=shared(request).settings, actor=by, source=CONSOLE
    )
    verb = "approved" if decision == "approve" else "rejected"
    return f"job {job_id} {verb}" + ("" if sent.created else " (already sent: nothing changed)")


nav: list[NavEntry] = []  # a job is reached from the runs, the approvals, the audit

routes = [
    Route("/runs/{job}.html", job_page, methods=["GET"]),
    Route("/runs/{job}/version", job_version_json, methods=["GET"]),
    Route("/runs/{job}/live", job_live, methods=["GET"]),
    Route("/runs/{job}/cancel", job_action(Permission.OPERATE, cancel), methods=["POST"]),
    Route("/runs/{job}/retry", job_action(Permission.OPERATE, retry), methods=["POST"]),
    Route("/runs/{job}/decide", job_action(Permission.APPROVE, decide), methods=["POST"]),
]
