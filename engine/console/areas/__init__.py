"""The console's areas: one module each, its handlers, its route list and its nav entries.

Each area module exports ``routes`` (Starlette routes, module-level handlers
each wrapped by :func:`engine.console.auth.guarded` but the sign-in's) and
``nav`` (its :class:`~engine.console.shared.NavEntry`, if it has one); the
app gathers them (:func:`routes`, :data:`NAV`) in the order of :data:`AREAS`,
which is the nav's. Adding a page touches its module (added here), its
template (``reports/console/``) and its test (``tests/console/``).
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from engine.console.areas import (
    approvals,
    audit,
    bulk,
    dead_letters,
    extensions,
    jobs,
    runs,
    schedules,
    signin,
    users,
    workers,
)
from engine.console.shared import NavEntry

__all__ = ["AREAS", "NAV", "routes"]

AREAS = (
    signin,
    runs,
    jobs,
    approvals,
    dead_letters,
    bulk,
    schedules,
    workers,
    audit,
    users,
    extensions,
)

NAV: list[NavEntry] = [entry for area in AREAS for entry in area.nav]


def routes() -> list[BaseRoute]:
    """Every area's routes, in order."""
    return [route for area in AREAS for route in area.routes]
