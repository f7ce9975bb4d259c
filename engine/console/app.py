"""The console's web app, assembled: the areas' routes, the middleware, the shared state.

Pages render from the database on each request with the reports' builders
and templates (``reports/console/``). Every action is a POST that goes
through the same engine function as its CLI command, with the signed-in
user as the actor and ``console`` as the source, so it is recorded in the
audit trail in its own transaction and refused the same way; the person
sees the outcome on the page they came from (:mod:`.actions`). Each area
(runs, a job, approvals, dead letters, schedules, workers, audit, users,
sign-in, the domain's pages) is a module of :mod:`.areas` with its handlers,
routes and nav entry; what they share is a :class:`~.shared.Console` in
``app.state.shared``. Guards are :mod:`engine.console.auth`'s; the database
work runs in Starlette's thread pool (psycopg is synchronous here, like the
rest of the engine).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware

from engine.config import Settings
from engine.console import areas
from engine.console.middleware import SecurityHeaders
from engine.console.settings import ConsoleSettings
from engine.console.shared import Console
from engine.console.unavailable import DatabaseOutage
from engine.flow.registry import Registry

__all__ = ["create_app"]


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
    c = Console(settings, console, registry, areas.NAV)
    secret = (
        console.secret.get_secret_value() if console.secret is not None else secrets.token_hex(32)
    )
    app = Starlette(
        routes=areas.routes(),
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


def _lifespan(c: Console) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        c.read.dispose()

    return lifespan
