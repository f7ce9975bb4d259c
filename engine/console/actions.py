"""How an action answers: its outcome (or refusal) flashed on the page the person came from.

Every action is a POST that runs one engine function in Starlette's thread
pool (:func:`act`) with the signed-in user as the actor (:func:`actor`) and
``console`` as the audit source (:data:`CONSOLE`). A refusal
(:class:`~engine.errors.BadInput`, :class:`~engine.errors.NoSuchJob`) and an
engine error are shown as such; an outage of the database is not caught, so
:class:`~engine.console.unavailable.DatabaseOutage` answers ``503``. The
page to come back to is a path of this console (:func:`local_path`), never
an open redirect.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from engine.console.auth import form_values
from engine.errors import BadInput, EngineError, NoSuchJob
from engine.infra.outage import is_outage
from engine.store.status import AuditSource

__all__ = [
    "CONSOLE",
    "act",
    "actor",
    "back",
    "flash",
    "form",
    "local_path",
    "parse_uuid",
    "reason",
]

CONSOLE = AuditSource.CONSOLE

_LOCAL_PATH = re.compile(r"/(?![/\\])[^\s]*")


def local_path(target: str | None, default: str) -> str:
    """``target`` when it is a path of this console, else ``default``: never an open redirect.

    ``//host`` and ``/\\host`` are other hosts to a browser; so is anything not starting with ``/``.
    """
    return target if target and _LOCAL_PATH.fullmatch(target) else default


def flash(request: Request, text: str, *, ok: bool = True) -> None:
    """A message shown once, on the next page drawn for this session."""
    request.session["flash"] = {"text": text, "kind": "ok" if ok else "bad"}


def actor(request: Request) -> str:
    """The signed-in user's name (set by the guard)."""
    return str(request.state.user.name)


async def form(request: Request) -> dict[str, str]:
    """The POSTed form's text fields, without the CSRF token."""
    return form_values(await request.form())


def reason(fields: dict[str, str]) -> str | None:
    """The form's ``reason``, ``None`` when blank."""
    return (fields.get("reason") or "").strip() or None


def parse_uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def back(request: Request, default: str, fields: dict[str, str] | None = None) -> RedirectResponse:
    """To the form's ``back`` when it is a local path, else to ``default``."""
    return RedirectResponse(local_path((fields or {}).get("back"), default), status_code=303)


async def act(
    request: Request, work: Callable[[], str], default: str, fields: dict[str, str]
) -> Response:
    """Run an action in the thread pool; its outcome (or refusal) shown on the page it came from."""
    try:
        message = await run_in_threadpool(work)
    except (BadInput, NoSuchJob) as exc:
        flash(request, f"refused: {exc}", ok=False)
    except EngineError as exc:
        if is_outage(exc):
            raise  # DatabaseOutage answers 503: there is no page to come back to
        flash(request, f"not done: {exc}", ok=False)
    else:
        flash(request, message)
    return back(request, default, fields)
