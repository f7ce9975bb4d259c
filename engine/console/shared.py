"""What every area of the console shares: settings, templates, the nav, a read engine.

One :class:`Console` per app, built by :func:`engine.console.app.create_app`
and kept in ``app.state.shared``; a handler finds it with :func:`shared`
(and the settings in ``request.app.state``, as :mod:`engine.console.auth`
does). :meth:`Console.render` draws a page in ``base.html.j2`` with the nav,
which is data: each area module declares its :class:`NavEntry` (label,
path, the permission needed to see it) beside its routes, the pages a
domain package adds get one each, and the template shows the entries the
signed-in user's role allows.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import HTMLResponse

from engine.config import Settings
from engine.console import formats
from engine.console.auth import csrf_token
from engine.console.extension import ConsolePage
from engine.console.roles import Permission, allowed
from engine.console.settings import ConsoleSettings
from engine.console.throttle import SignInThrottle
from engine.flow.registry import Registry
from engine.jobs.lookup import job_version
from engine.reports.render import environment
from engine.store import db
from engine.store.read import sqlalchemy_engine

__all__ = ["Console", "NavEntry", "VersionCache", "shared"]


@dataclass(frozen=True)
class NavEntry:
    """A link of the top nav: ``key`` is what a page passes as ``here`` to be shown current."""

    key: str
    label: str
    path: str
    permission: Permission = Permission.READ


@dataclass
class _Cached:
    at: float
    version: str | None


class VersionCache:
    """A job's change token, read at most once per ``ttl_s`` per console process.

    However many browsers watch a job, the database answers one cheap query
    (:func:`engine.jobs.lookup.job_version`) per job and interval.
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
                version = job_version(conn, job_id)
            self.queries += 1
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[job_id] = _Cached(now, version)
            return version


class Console:
    """What every handler shares: settings, templates, the nav, the registry's pages."""

    def __init__(
        self,
        settings: Settings,
        console: ConsoleSettings,
        registry: Registry | None,
        nav: Sequence[NavEntry],
    ) -> None:
        self.settings = settings
        self.console = console
        self.registry = registry
        self.env: Environment = environment()
        self.env.filters["columns"] = _columns
        formats.install(self.env)  # moments in the viewer's zone, short ids, typed cells
        self.read: Engine = sqlalchemy_engine(settings)
        self.versions = VersionCache(settings, ttl_s=console.refresh_s)
        self.signins = SignInThrottle.from_settings(console)
        self.pages: dict[str, ConsolePage] = {
            p.name: p
            for p in (registry.console_pages if registry else [])
            if isinstance(p, ConsolePage)
        }
        # the areas' entries, then one per page the domain adds
        self.nav: list[NavEntry] = [
            *nav,
            *(NavEntry(f"x/{p.name}", p.title, f"/x/{p.name}") for p in self.pages.values()),
        ]

    def render(self, request: Request, template: str, **context: Any) -> HTMLResponse:
        """``template`` drawn for the signed-in user (``here``: the nav entry that is current)."""
        user = getattr(request.state, "user", None)
        flash = request.session.pop("flash", None)

        def may(p: Permission) -> bool:
            return user is not None and allowed(user.role, p)

        html = self.env.get_template(template).render(
            user=user,
            csrf=csrf_token(request),
            flash=flash,
            nav=[n for n in self.nav if may(n.permission)],
            counts=context.pop("counts", {}),
            here=context.pop("here", None),
            can_operate=may(Permission.OPERATE),
            can_approve=may(Permission.APPROVE),
            allowed=may,
            self_approval=self.settings.allow_self_approval,
            **context,
        )
        return HTMLResponse(html)


def shared(request: Request) -> Console:
    """The app's :class:`Console`."""
    console: Console = request.app.state.shared
    return console


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        if isinstance(row, dict):
            seen.update(dict.fromkeys(row))
    return list(seen)
