"""Users: the console's local users and their roles, for an admin (read-only).

What ``engine users list`` shows (never a password or its hash: only
whether there is one, and whether a name is locked out now). Users are
added, removed and changed with ``engine users``, on the command line: the
console's database role may not write them (migration 0026).
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.console.auth import guarded
from engine.console.roles import Permission
from engine.console.shared import NavEntry, shared
from engine.console.users import list_users

__all__ = ["nav", "routes"]


@guarded(Permission.ADMIN)
async def users_page(request: Request) -> Response:
    c = shared(request)
    rows = await run_in_threadpool(list_users, c.settings)
    return c.render(request, "console/users.html.j2", title="Users", here="users", rows=rows)


nav = [NavEntry("users", "Users", "/users", Permission.ADMIN)]

routes = [Route("/users", users_page, methods=["GET"])]
