"""Who is asking, and whether they may: sessions, the ALB's header, CSRF, permissions.

Every route but the sign-in page and the stylesheet is wrapped by
:func:`guarded`: without a live session (or a verified load balancer header)
a page answers ``303`` to the sign-in page and anything else ``401``; a role
without the route's permission gets ``403``; a POST without the session's
CSRF token (a hidden field, compared in constant time) gets ``403`` before
its handler runs, so nothing changes.

Sessions are kept on the server (:mod:`engine.console.sessions`): the
cookie carries only a random session id and the CSRF token, and each request
checks the session's row, so sign-out, a password change, a role change and
a user's removal end it at the next request, as do
``ENGINE_CONSOLE_SESSION_IDLE_MINUTES`` without a request and
``ENGINE_CONSOLE_SESSION_HOURS`` after sign-in. The cookie is HttpOnly,
SameSite=Strict and ``Secure`` (plain http only when ``engine console``
binds a loopback address, which it says at start).

With the load balancer's sign-in (:mod:`engine.console.oidc`), a request
carrying its header is that person's whatever the cookie says: a verified
token of someone else starts a new session, one of the same person moves
the session's end to the token's expiry; a session made from a token ends
when the token does.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from engine.console import oidc, sessions, users
from engine.console.roles import Permission, Role, allowed
from engine.console.users import User

__all__ = ["CSRF_FIELD", "csrf_token", "current_user", "guarded"]

log = logging.getLogger(__name__)

CSRF_FIELD = "csrf"
# what a live job page asks by itself (console.js): not a sign of the person, for the idle clock
POLLING = ("/version", "/live")
Handler = Callable[[Request], Awaitable[Response]]


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made on first use)."""
    token = request.session.get(CSRF_FIELD)
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session[CSRF_FIELD] = token
    return token


def _alb_user(request: Request) -> User | None:
    """The person the load balancer's header names (verified), their session started or extended."""
    console = request.app.state.console
    token = request.headers.get(oidc.HEADER)
    if not console.alb or not token:
        return None
    settings = request.app.state.settings
    verified = oidc.verify_alb_token(console, token)  # OidcRefused: the caller answers 401
    found = users.account(settings, verified.name)
    role = found.role if found is not None else console.oidc_role
    if role is None:
        raise oidc.OidcRefused(f"{verified.name} is not a console user (engine users add)")
    user = User(name=verified.name, role=Role(role), via="oidc")
    session = sessions.resume(settings, console, request.session)
    if session is not None and session.user == user:
        if session.token_expires_at is None or session.token_expires_at < verified.expires_at:
            sessions.extend_token(settings, request.session, user.name, verified.expires_at)
    else:
        sessions.start(
            settings, console, request.session, user, token_expires_at=verified.expires_at
        )
    return user


def current_user(request: Request) -> User | None:
    """The signed-in user: the load balancer's header (when configured), else a live session."""
    user = _alb_user(request)
    if user is not None:
        return user
    app = request.app.state
    polling = request.url.path.endswith(POLLING)
    session = sessions.resume(app.settings, app.console, request.session, seen=not polling)
    return None if session is None else session.user


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
