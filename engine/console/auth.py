"""Who is asking, and whether they may: sessions, the ALB's header, CSRF, permissions.

Every route but the sign-in page and the stylesheet is wrapped by
:func:`guarded`: without a session (or a verified load balancer header) a
page answers ``303`` to the sign-in page and anything else ``401``; a role
without the route's permission gets ``403``; a POST without the session's
CSRF token (a hidden field, compared in constant time) gets ``403`` before
its handler runs, so nothing changes. Sessions are Starlette's signed
cookies (HttpOnly, SameSite=Strict, ``Secure`` with
``ENGINE_CONSOLE_SECURE_COOKIE``) holding the user's name, role and CSRF
token; a session older than ``ENGINE_CONSOLE_SESSION_HOURS`` is refused.
A user removed or demoted takes effect at their next request: the role is
read from the database on each one (one primary-key read); a changed
password ends the sessions signed in with the old one.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from engine.console import oidc, users
from engine.console.roles import Permission, Role, allowed
from engine.console.users import User

__all__ = ["CSRF_FIELD", "csrf_token", "current_user", "guarded"]

log = logging.getLogger(__name__)

CSRF_FIELD = "csrf"
Handler = Callable[[Request], Awaitable[Response]]


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made on first use)."""
    token = request.session.get(CSRF_FIELD)
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session[CSRF_FIELD] = token
    return token


def _session_user(request: Request) -> User | None:
    s = request.session
    name, started = s.get("user"), s.get("started")
    if not isinstance(name, str) or not isinstance(started, (int, float)):
        return None
    console = request.app.state.console
    if time.time() - started > console.session_hours * 3600:
        s.clear()
        return None
    found = users.account(request.app.state.settings, name)
    via = str(s.get("via", "password"))
    if via == "password" and (found is None or s.get("pw") != found.password_changed):
        s.clear()  # removed, or their password changed, since signing in: sign in again
        return None
    role = found.role if found is not None else console.oidc_role if via == "oidc" else None
    if role is None:
        s.clear()  # removed since signing in
        return None
    return User(name=name, role=role, via=via)


def _alb_user(request: Request) -> User | None:
    console = request.app.state.console
    token = request.headers.get(oidc.HEADER)
    if not console.alb or not token:
        return None
    claims = oidc.verify_alb_token(console, token)  # OidcRefused: the caller answers 401
    name = str(claims.get("email") or claims.get("sub"))
    found = users.account(request.app.state.settings, name)
    role = found.role if found is not None else console.oidc_role
    if role is None:
        raise oidc.OidcRefused(f"{name} is not a console user (engine users add)")
    return User(name=name, role=Role(role), via="oidc")


def current_user(request: Request) -> User | None:
    """The signed-in user, from the load balancer's header (when configured) or the session."""
    user = _alb_user(request)
    if user is not None:
        if request.session.get("user") != user.name:
            request.session.clear()
            request.session.update(user=user.name, started=time.time(), via="oidc")
        return user
    return _session_user(request)


def _refuse(request: Request, status: int, message: str) -> Response:
    if status == 401 and request.method == "GET":
        return RedirectResponse(f"/signin?next={request.url.path}", status_code=303)
    return PlainTextResponse(message, status_code=status)


def guarded(permission: Permission) -> Callable[[Handler], Handler]:
    """Wrap a route: a user with ``permission``; on POST, the session's CSRF token."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            try:
                user = await run_in_threadpool(current_user, request)
            except oidc.OidcRefused as exc:
                log.warning("console: load balancer header refused: %s", exc)
                return PlainTextResponse(f"refused: {exc}", status_code=401)
            if user is None:
                return _refuse(request, 401, "sign in first: POST /signin")
            if not allowed(user.role, permission):
                return _refuse(
                    request, 403, f"{user.name} ({user.role}) may not do this: needs {permission}"
                )
            if request.method == "POST":
                form = await request.form()
                sent = form.get(CSRF_FIELD)
                expected = request.session.get(CSRF_FIELD)
                if not (
                    isinstance(sent, str)
                    and isinstance(expected, str)
                    and secrets.compare_digest(sent, expected)
                ):
                    return _refuse(request, 403, "refused: missing or wrong CSRF token; reload")
            request.state.user = user
            return await handler(request)

        return endpoint

    return wrap


def form_values(form: Any) -> dict[str, str]:
    """A POSTed form's text fields, the CSRF token left out."""
    return {k: v for k, v in form.items() if isinstance(v, str) and k != CSRF_FIELD}
