"""Sign-in and sign-out, the pages' one script and icon: the routes reached signed out.

A sign-in is throttled by address before any password is hashed and every
refusal answers alike (:data:`engine.console.users.REFUSED`); a good one
starts a fresh session kept on the server (:mod:`engine.console.sessions`),
so a copy of the old cookie is worth nothing.
"""

from __future__ import annotations

import logging
import secrets

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from engine.console import sessions, users
from engine.console.actions import flash, local_path
from engine.console.auth import csrf_token, form_values, guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.console.throttle import Throttled
from engine.reports.render import TEMPLATES_DIR

__all__ = ["nav", "routes"]

log = logging.getLogger(__name__)

_SCRIPT = (TEMPLATES_DIR / "console" / "console.js").read_text(encoding="utf-8")
_ICON = (TEMPLATES_DIR / "console" / "favicon.svg").read_text(encoding="utf-8")


async def signin_page(request: Request) -> Response:
    c = shared(request)
    next_ = request.query_params.get("next", "/")
    return c.render(
        request, "console/signin.html.j2", title="Sign in", next=next_, alb=c.console.alb
    )


async def signin(request: Request) -> Response:
    c = shared(request)
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
            c.settings,
            c.console,
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
        flash(request, users.REFUSED, ok=False)
        return RedirectResponse("/signin", status_code=303)
    c.signins.signed_in(address)
    # a fresh session (new id, new CSRF token) at each sign-in, kept on the server
    await run_in_threadpool(sessions.start, c.settings, c.console, request.session, user)
    log.info("console: %s signed in (%s)", user.name, user.role)
    return RedirectResponse(local_path(fields.get("next"), "/"), 303)


@guarded(Permission.READ)
async def signout(request: Request) -> Response:
    # ended on the server: a copy of the cookie is refused
    await run_in_threadpool(sessions.end, shared(request).settings, request.session)
    return RedirectResponse("/signin", status_code=303)


async def console_js(request: Request) -> Response:
    return Response(_SCRIPT, media_type="text/javascript")


async def favicon(request: Request) -> Response:
    # /favicon.ico too: what a browser asks for by itself (an SVG is what it gets)
    return Response(_ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


nav: list[NavEntry] = []  # reached signed out, or from the user's name in the nav

routes = [
    Route("/signin", signin_page, methods=["GET"]),
    Route("/signin", signin, methods=["POST"]),
    Route("/signout", signout, methods=["POST"]),
    Route("/console.js", console_js, methods=["GET"]),
    Route("/favicon.svg", favicon, methods=["GET"]),
    Route("/favicon.ico", favicon, methods=["GET"]),
]
