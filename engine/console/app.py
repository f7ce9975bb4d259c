"""The console's web app: routes, pages and actions (Starlette, served by uvicorn).

Pages render from the database on each request with the reports' builders
and templates (``reports/console/``). Every action is a POST that goes
through the same engine function as its CLI command (``cancel``,
``retry_job``, ``replay``, ``purge``, ``operator_signal``, the schedules'
functions), with the signed-in user as the actor and ``console`` as the
source, so it is recorded in the audit trail in its own transaction and
refused the same way; the person sees the outcome on the page they came
from. Guards are :mod:`engine.console.auth`'s; the database work runs in
Starlette's thread pool (psycopg is synchronous here, like the rest of the
engine).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import store
from engine.config import Settings
from engine.console import sessions, users
from engine.console.auth import csrf_token, form_values, guarded
from engine.console.extension import ActionRequest, ConsolePage, PageRequest, Section
from engine.console.roles import Permission, allowed
from engine.console.settings import ConsoleSettings
from engine.console.throttle import SignInThrottle, Throttled
from engine.console.unavailable import DatabaseOutage
from engine.errors import BadInput, EngineError, NoSuchJob
from engine.flow.registry import Registry
from engine.infra.outage import is_outage
from engine.jobs import admin
from engine.jobs.audit import audit_trail
from engine.jobs.lookup import resolve_job_id
from engine.jobs.search import RunQuery, SearchField, parse_run_query, search_runs
from engine.reports.context import RunReport, build_run_report
from engine.reports.render import TEMPLATES_DIR, environment, render_run_html
from engine.schedules import schedules
from engine.store import db
from engine.store.read import sqlalchemy_engine
from engine.store.status import AuditSource
from engine.waits.inbox import Awaiting, awaiting_approval
from engine.waits.signals import operator_signal

__all__ = ["create_app"]

log = logging.getLogger(__name__)

CONSOLE = AuditSource.CONSOLE
_STATUSES = ["pending", "running", "waiting", "done", "failed", "cancelled"]


@dataclass
class _Cached:
    at: float
    version: str | None


class VersionCache:
    """A job's change token, read at most once per ``ttl_s`` per console process.

    However many browsers watch a job, the database answers one cheap query
    (:func:`engine.store.job_select_version`) per job and interval.
    """

    def __init__(self, settings: Settings, ttl_s: float) -> None:
        self.settings = settings
        self.ttl_s = ttl_s
        self._cache: dict[uuid.UUID, _Cached] = {}
        self._lock = threading.Lock()
        self.queries = 0  # read by tests: queries actually sent

    def get(self, job_id: uuid.UUID) -> str | None:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(job_id)
            if hit is not None and now - hit.at < self.ttl_s:
                return hit.version
            # hold the lock while reading: concurrent askers wait for one answer
            with db.connect(self.settings, autocommit=True) as conn:
                version = store.job_select_version(conn, job_id)
            self.queries += 1
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[job_id] = _Cached(now, version)
            return version


class SecurityHeaders:
    """Headers every answer carries: no framing, no sniffing, no caching, a strict CSP."""

    HEADERS = [
        (b"x-frame-options", b"DENY"),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"same-origin"),
        (b"cache-control", b"no-store"),
        (
            b"content-security-policy",
            b"default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; "
            b"img-src 'self' data:; connect-src 'self'; form-action 'self'; "
            b"frame-ancestors 'none'; base-uri 'none'",
        ),
    ]

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + self.HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Console:
    """What every handler shares: settings, templates, the registry's pages, a read engine."""

    def __init__(self, settings: Settings, console: ConsoleSettings, registry: Registry | None):
        self.settings = settings
        self.console = console
        self.registry = registry
        self.env: Environment = environment()
        self.env.filters["columns"] = _columns
        self.read: Engine = sqlalchemy_engine(settings)
        self.versions = VersionCache(settings, ttl_s=console.refresh_s)
        self.signins = SignInThrottle.from_settings(console)
        self.pages: dict[str, ConsolePage] = {
            p.name: p
            for p in (registry.console_pages if registry else [])
            if isinstance(p, ConsolePage)
        }

    def render(self, request: Request, template: str, **context: Any) -> HTMLResponse:
        user = getattr(request.state, "user", None)
        flash = request.session.pop("flash", None)
        html = self.env.get_template(template).render(
            user=user,
            csrf=csrf_token(request),
            flash=flash,
            extension_pages=list(self.pages.values()),
            inbox_count=context.pop("inbox_count", None),
            can_operate=user is not None and allowed(user.role, Permission.OPERATE),
            can_approve=user is not None and allowed(user.role, Permission.APPROVE),
            allowed=lambda p: user is not None and allowed(user.role, p),
            self_approval=self.settings.allow_self_approval,
            **context,
        )
        return HTMLResponse(html)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        if isinstance(row, dict):
            seen.update(dict.fromkeys(row))
    return list(seen)


def _flash(request: Request, text: str, *, ok: bool = True) -> None:
    request.session["flash"] = {"text": text, "kind": "ok" if ok else "bad"}


def _actor(request: Request) -> str:
    return str(request.state.user.name)


_LOCAL_PATH = re.compile(r"/(?![/\\])[^\s]*")


def local_path(target: str | None, default: str) -> str:
    """``target`` when it is a path of this console, else ``default``: never an open redirect.

    ``//host`` and ``/\\host`` are other hosts to a browser; so is anything not starting with ``/``.
    """
    return target if target and _LOCAL_PATH.fullmatch(target) else default


def _back(request: Request, default: str, form: dict[str, str] | None = None) -> RedirectResponse:
    return RedirectResponse(local_path((form or {}).get("back"), default), status_code=303)


async def _act(
    request: Request, work: Callable[[], str], back: str, form: dict[str, str]
) -> Response:
    """Run an action in the thread pool; its outcome (or refusal) shown on the page ``back``."""
    try:
        message = await run_in_threadpool(work)
    except (BadInput, NoSuchJob) as exc:
        _flash(request, f"refused: {exc}", ok=False)
    except EngineError as exc:
        if is_outage(exc):
            raise  # DatabaseOutage answers 503: there is no page to come back to
        _flash(request, f"not done: {exc}", ok=False)
    else:
        _flash(request, message)
    return _back(request, back, form)


def _job_id(c: Console, text: str) -> uuid.UUID:
    with db.connect(c.settings, autocommit=True) as conn:
        return resolve_job_id(conn, text)


def create_app(
    settings: Settings | None = None,
    console: ConsoleSettings | None = None,
    registry: Registry | None = None,
) -> Starlette:
    """The console as an ASGI app (``engine console`` serves it with uvicorn).

    Every connection it opens takes ``console.role`` (ENGINE_CONSOLE_ROLE,
    default engine_console: migration 0026), as the worker takes its own.
    """
    settings = settings or Settings()
    console = console or ConsoleSettings()
    if console.role:
        settings = settings.model_copy(update={"session_role": console.role})
    console.check_alb()  # the load balancer's sign-in only with its signer, issuer, client
    c = Console(settings, console, registry)
    secret = (
        console.secret.get_secret_value() if console.secret is not None else secrets.token_hex(32)
    )

    # -- sign-in ---------------------------------------------------------------------------

    async def signin_page(request: Request) -> Response:
        next_ = request.query_params.get("next", "/")
        return c.render(
            request, "console/signin.html.j2", title="Sign in", next=next_, alb=console.alb
        )

    async def signin(request: Request) -> Response:
        form = await request.form()
        fields = form_values(form)
        sent = form.get("csrf")
        if not (isinstance(sent, str) and secrets.compare_digest(sent, csrf_token(request))):
            return PlainTextResponse("refused: missing or wrong CSRF token; reload", 403)
        name, password = fields.get("name", ""), fields.get("password", "")
        address = c.signins.address(request)
        try:  # throttled before any hash; every refusal answered alike (users.REFUSED)
            c.signins.admit(address)
            user = await run_in_threadpool(
                users.sign_in,
                settings,
                console,
                name,
                password,
                address=address,
                hashing=lambda: c.signins.hashing(address),
            )
        except (users.SignInRefused, Throttled) as exc:
            if isinstance(exc, users.SignInRefused):  # the throttle logs its own, once a minute
                log.warning(
                    "console: sign-in of %r from %s refused: %s", name[:130], address, exc.reason
                )
            _flash(request, users.REFUSED, ok=False)
            return RedirectResponse("/signin", status_code=303)
        c.signins.signed_in(address)
        # a fresh session (new id, new CSRF token) at each sign-in, kept on the server
        await run_in_threadpool(sessions.start, settings, console, request.session, user)
        log.info("console: %s signed in (%s)", user.name, user.role)
        return RedirectResponse(local_path(fields.get("next"), "/"), 303)

    @guarded(Permission.READ)
    async def signout(request: Request) -> Response:
        await run_in_threadpool(sessions.end, settings, request.session)  # a copy is refused
        return RedirectResponse("/signin", status_code=303)

    script = (TEMPLATES_DIR / "console" / "console.js").read_text(encoding="utf-8")

    async def console_js(request: Request) -> Response:
        return Response(script, media_type="text/javascript")

    # -- pages -----------------------------------------------------------------------------

    def _inbox_count() -> int:
        with db.connect(settings, autocommit=True) as conn:
            return store.step_count_awaiting_signal(conn)

    # the search fields the flow modules add (the ERP's period, store, document)
    fields = [f for f in (registry.search_fields if registry else []) if isinstance(f, SearchField)]

    @guarded(Permission.READ)
    async def runs_page(request: Request) -> Response:
        values = {k: v for k, v in request.query_params.items() if v}
        error = None
        try:
            query = parse_run_query(values, fields)
        except BadInput as exc:
            query, error = RunQuery(), str(exc)

        def work() -> Any:
            with db.connect(settings, autocommit=True) as conn:
                return search_runs(conn, query)

        try:
            page = await run_in_threadpool(work)
        except BadInput as exc:
            error = str(exc)
            page = None
        rows = page.rows if page else []
        base = {k: v for k, v in values.items() if k not in ("before",)}
        next_href = None
        if page and page.next_before:
            next_href = "/?" + urlencode({**base, "before": page.next_before})
        first_href = ("/?" + urlencode(base)) if "before" in values else None
        flows = sorted(registry.names()) if registry else []
        return c.render(
            request,
            "console/runs.html.j2",
            title="Runs",
            nav="runs",
            q=query,
            search_fields=fields,
            field_values=values,
            searchable={n: registry.get(n).searchable for n in flows} if registry else {},
            rows=rows,
            error=error,
            flows=flows,
            statuses=_STATUSES,
            next_href=next_href,
            first_href=first_href,
            inbox_count=await run_in_threadpool(_inbox_count),
        )

    def _live_context(request: Request, job_id: uuid.UUID) -> dict[str, Any]:
        # the version first: a change after it is read shows as a newer version, never as a
        # page that claims to be current while drawing an older state
        with db.connect(settings, autocommit=True) as conn:
            version = store.job_select_version(conn, job_id)
            awaiting = awaiting_approval(conn, limit=50, job_id=job_id)
        report = build_run_report(c.read, job_id, registry)
        return {
            "job_id": str(job_id),
            "job_sections": _job_sections(c, request, report),
            "report_html": _markup(render_run_html(report, c.env, fragment=True)),
            "awaiting": awaiting,
            "active": report.status in ("pending", "running", "waiting"),
            # a rejected job is the data's decision: `engine retry` refuses it
            "retryable": report.status in ("failed", "cancelled") and not report.rejected,
            "version": version,
        }

    @guarded(Permission.READ)
    async def job_page(request: Request) -> Response:
        text = request.path_params["job"]
        try:
            job_id = await run_in_threadpool(_job_id, c, text)
        except (BadInput, NoSuchJob) as exc:
            return PlainTextResponse(str(exc), status_code=404)
        if str(job_id) != text:
            return RedirectResponse(f"/runs/{job_id}.html", status_code=303)
        try:
            context = await run_in_threadpool(_live_context, request, job_id)
        except NoSuchJob as exc:
            return PlainTextResponse(str(exc), status_code=404)
        return c.render(
            request,
            "console/job.html.j2",
            title=f"job {job_id}",
            nav="runs",
            refresh_ms=int(console.refresh_s * 1000),
            **context,
        )

    @guarded(Permission.READ)
    async def job_version(request: Request) -> Response:
        job_id = _uuid(request.path_params["job"])
        if job_id is None:
            return JSONResponse({"error": "not a job id"}, status_code=404)
        version = await run_in_threadpool(c.versions.get, job_id)
        if version is None:
            return JSONResponse({"error": f"no job {job_id}"}, status_code=404)
        status = version.split(".", 1)[0]
        return JSONResponse({"version": version, "active": status in ("pending", "running")})

    @guarded(Permission.READ)
    async def job_live(request: Request) -> Response:
        job_id = _uuid(request.path_params["job"])
        if job_id is None:
            return PlainTextResponse("not a job id", status_code=404)
        try:
            context = await run_in_threadpool(_live_context, request, job_id)
        except NoSuchJob as exc:
            return PlainTextResponse(str(exc), status_code=404)
        return c.render(request, "console/job_live.html.j2", **context)

    @guarded(Permission.READ)
    async def approvals_page(request: Request) -> Response:
        def work() -> list[Awaiting]:
            with db.connect(settings, autocommit=True) as conn:
                return awaiting_approval(conn, limit=100)

        awaiting = await run_in_threadpool(work)
        return c.render(
            request,
            "console/approvals.html.j2",
            title="Approvals",
            nav="approvals",
            awaiting=awaiting,
            inbox_count=len(awaiting),
        )

    @guarded(Permission.READ)
    async def dead_letters_page(request: Request) -> Response:
        rows = await run_in_threadpool(admin.dead_letters, settings, 200)
        return c.render(
            request,
            "console/dead_letters.html.j2",
            title="Dead letters",
            nav="dead-letters",
            rows=rows,
        )

    @guarded(Permission.READ)
    async def schedules_page(request: Request) -> Response:
        listed = await run_in_threadpool(schedules.list_schedules, settings)
        rows = [
            {
                "name": s.name,
                "flow": s.flow,
                "cron": s.cron,
                "timezone": s.timezone,
                "params_text": json.dumps(s.params, sort_keys=True),
                "next_at": s.next_fire_at,
                "last_text": _last_fire(s),
                "paused": s.paused,
                "paused_by": s.paused_by,
                "paused_reason": s.paused_reason,
            }
            for s in listed
        ]
        return c.render(
            request, "console/schedules.html.j2", title="Schedules", nav="schedules", rows=rows
        )

    @guarded(Permission.READ)
    async def workers_page(request: Request) -> Response:
        def work() -> list[dict[str, Any]]:
            with db.connect(settings, autocommit=True) as conn:
                return store.worker_select_recent(conn, live_s=settings.worker_live_s)

        rows = await run_in_threadpool(work)
        return c.render(
            request,
            "console/workers.html.j2",
            title="Workers",
            nav="workers",
            rows=rows,
            live_s=f"{settings.worker_live_s:g}",
        )

    @guarded(Permission.READ)
    async def audit_page(request: Request) -> Response:
        entries = await run_in_threadpool(lambda: audit_trail(settings, limit=200))
        rows = [
            {**e.__dict__, "detail_text": json.dumps(e.detail, sort_keys=True) if e.detail else ""}
            for e in entries
        ]
        return c.render(request, "console/audit.html.j2", title="Audit", nav="audit", rows=rows)

    @guarded(Permission.READ)
    async def extension_page(request: Request) -> Response:
        page = c.pages.get(request.path_params["page"])
        if page is None:
            return PlainTextResponse("no such page", status_code=404)
        query = dict(request.query_params)
        error = None
        try:
            sections = await run_in_threadpool(
                page.view, PageRequest(settings, query, _actor(request))
            )
        except BadInput as exc:
            sections, error = [], str(exc)
        return c.render(
            request,
            "console/extension.html.j2",
            title=page.title,
            nav=f"x/{page.name}",
            page=page,
            sections=sections,
            query=query,
            error=error,
        )

    # -- actions ---------------------------------------------------------------------------

    async def _form(request: Request) -> dict[str, str]:
        return form_values(await request.form())

    def _reason(form: dict[str, str]) -> str | None:
        return (form.get("reason") or "").strip() or None

    def job_action(
        permission: Permission, work: Callable[[Request, uuid.UUID, dict[str, str]], str]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A POST on one job: its id from the path, ``work``'s outcome shown on its page."""

        @guarded(permission)
        async def endpoint(request: Request) -> Response:
            form = await _form(request)
            job_id = _uuid(request.path_params["job"])
            if job_id is None:
                return PlainTextResponse("not a job id", status_code=404)
            return await _act(
                request, lambda: work(request, job_id, form), f"/runs/{job_id}.html", form
            )

        return endpoint

    def cancel(request: Request, job_id: uuid.UUID, form: dict[str, str]) -> str:
        admin.cancel(settings, job_id, _reason(form), actor=_actor(request), source=CONSOLE)
        return f"job {job_id} cancelled"

    def retry(request: Request, job_id: uuid.UUID, form: dict[str, str]) -> str:
        done = admin.retry_job(
            settings, job_id, actor=_actor(request), source=CONSOLE, reason=_reason(form)
        )
        return f"job {job_id} retried: {done.step_runs} step run(s) run again"

    def decide(request: Request, job_id: uuid.UUID, form: dict[str, str]) -> str:
        """Approve or reject: the awaited signal with the decision, sent by the signed-in user."""
        decision, name, reason = form.get("decision", ""), form.get("signal", ""), _reason(form)
        if decision not in ("approve", "reject"):
            raise BadInput(f"invalid decision {decision!r}; valid: approve, reject")
        # a reason (approve and reject alike) and who may approve: the engine's refusal, audited
        data: dict[str, Any] = {"decision": decision, "by": _actor(request)}
        if reason:
            data["reason"] = reason
        sent = operator_signal(
            job_id, name, data, settings=settings, actor=_actor(request), source=CONSOLE
        )
        verb = "approved" if decision == "approve" else "rejected"
        return f"job {job_id} {verb}" + ("" if sent.created else " (already sent: nothing changed)")

    @guarded(Permission.OPERATE)
    async def replay_dead_letter(request: Request) -> Response:
        form = await _form(request)
        dl_id = int(request.path_params["id"])
        return await _act(
            request,
            lambda: admin.replay(
                settings, dl_id, actor=_actor(request), source=CONSOLE, reason=_reason(form)
            ),
            "/dead-letters",
            form,
        )

    @guarded(Permission.OPERATE)
    async def purge_dead_letters(request: Request) -> Response:
        form = await _form(request)

        def work() -> str:
            n = admin.purge(settings, actor=_actor(request), source=CONSOLE, reason=_reason(form))
            return f"{n} dead letter(s) purged"

        return await _act(request, work, "/dead-letters", form)

    @guarded(Permission.OPERATE)
    async def schedule_action(request: Request) -> Response:
        form = await _form(request)
        name, action = request.path_params["name"], request.path_params["action"]
        actor = _actor(request)

        def work() -> str:
            if action == "pause":
                changed = schedules.pause_schedule(
                    name, settings=settings, actor=actor, source=CONSOLE, reason=_reason(form)
                )
                return f"schedule {name} " + ("paused" if changed else "was already paused")
            if action == "resume":
                changed = schedules.resume_schedule(
                    name, settings=settings, actor=actor, source=CONSOLE
                )
                return f"schedule {name} " + ("resumed" if changed else "was not paused")
            if action == "run":
                sent = schedules.run_schedule_now(
                    name, settings=settings, registry=registry, actor=actor, source=CONSOLE
                )
                if not sent.created:
                    return f"schedule {name}: job {sent.job_id} is already active; not submitted"
                return f"schedule {name} submitted job {sent.job_id}"
            raise BadInput(f"invalid schedule action {action!r}; valid: pause, resume, run")

        return await _act(request, work, "/schedules", form)

    @guarded(Permission.READ)
    async def extension_action(request: Request) -> Response:
        page = c.pages.get(request.path_params["page"])
        action = page.actions.get(request.path_params["action"]) if page else None
        if page is None or action is None:
            return PlainTextResponse("no such action", status_code=404)
        user = request.state.user
        if not allowed(user.role, action.permission):
            return PlainTextResponse(
                f"{user.name} ({user.role}) may not do this: needs {action.permission}", 403
            )
        form = await _form(request)
        back = f"/x/{page.name}" + (f"?{urlencode(_query_of(page, form))}" if form else "")
        return await _act(
            request, lambda: action.run(ActionRequest(settings, form, user.name)), back, form
        )

    routes = [
        Route("/signin", signin_page, methods=["GET"]),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", signout, methods=["POST"]),
        Route("/console.js", console_js, methods=["GET"]),
        Route("/", runs_page, methods=["GET"]),
        Route("/index.html", runs_page, methods=["GET"]),
        Route("/runs/{job}.html", job_page, methods=["GET"]),
        Route("/runs/{job}/version", job_version, methods=["GET"]),
        Route("/runs/{job}/live", job_live, methods=["GET"]),
        Route("/runs/{job}/cancel", job_action(Permission.OPERATE, cancel), methods=["POST"]),
        Route("/runs/{job}/retry", job_action(Permission.OPERATE, retry), methods=["POST"]),
        Route("/runs/{job}/decide", job_action(Permission.APPROVE, decide), methods=["POST"]),
        Route("/approvals", approvals_page, methods=["GET"]),
        Route("/dead-letters", dead_letters_page, methods=["GET"]),
        Route("/dead-letters/{id:int}/replay", replay_dead_letter, methods=["POST"]),
        Route("/dead-letters/purge", purge_dead_letters, methods=["POST"]),
        Route("/schedules", schedules_page, methods=["GET"]),
        Route("/schedules/{name}/{action}", schedule_action, methods=["POST"]),
        Route("/workers", workers_page, methods=["GET"]),
        Route("/audit", audit_page, methods=["GET"]),
        Route("/x/{page}", extension_page, methods=["GET"]),
        Route("/x/{page}/{action}", extension_action, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            # inside the headers, outside everything that reads the database (the guard too)
            Middleware(DatabaseOutage),
            Middleware(
                SessionMiddleware,
                secret_key=secret,
                session_cookie="engine_console",
                max_age=int(console.session_hours * 3600),
                same_site="strict",
                https_only=console.secure_cookie is not False,  # unset: Secure
            ),
        ],
        lifespan=_lifespan(c),
    )
    app.state.settings = settings
    app.state.console = console
    app.state.shared = c
    return app


def _job_sections(
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
            sections = page.job_view(PageRequest(c.settings, query, _actor(request)))
        except BadInput as exc:
            sections = [Section(page.title, text=f"refused: {exc}")]
        shown.append((page, sections))
    return shown


def _query_of(page: ConsolePage, form: dict[str, str]) -> dict[str, str]:
    """The page's query fields the form carried (so the page comes back as it was)."""
    return {f.name: form[f.name] for f in page.query_fields if form.get(f.name)}


def _lifespan(c: Console) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        c.read.dispose()

    return lifespan


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _markup(html: str) -> Any:
    from markupsafe import Markup

    return Markup(html)  # noqa: S704 (rendered by our own autoescaping templates)


def _last_fire(s: schedules.Schedule) -> str:
    if s.last_fired_at is None:
        return "never"
    what = s.last_outcome or ""
    return f"{s.last_fired_at:%Y-%m-%d %H:%M} {what}".strip()
