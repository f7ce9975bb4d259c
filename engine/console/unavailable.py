"""An outage of the database, said as one: ``503`` and a sentence, never a bare ``500``.

Every page and action reads the database (the guard itself reads the
signed-in user), so while PostgreSQL cannot be reached any of them fails,
wherever the failure happens: in the guard, in a handler, in a middleware
inside this one. :class:`DatabaseOutage` wraps the whole app (inside
:class:`~engine.console.middleware.SecurityHeaders`, so the answer carries the same
headers as any other) and turns such a failure (:func:`engine.infra.outage.is_outage`:
a refused or lost connection, a server shutting down) into ``503 Service
Unavailable`` with :data:`UNREACHABLE`, a ``Retry-After`` and one log line
naming the request and the masked reason, without a traceback. The text
never carries the driver's message (it may name the server). Any other
error still answers ``500`` with the headers and goes on to the server,
which logs it once with its traceback.
"""

from __future__ import annotations

import logging

from starlette.types import Message, Receive, Scope, Send

from engine.console.middleware import HttpMiddleware
from engine.infra.outage import is_outage
from engine.infra.secrets import mask_url

__all__ = ["UNREACHABLE", "DatabaseOutage"]

log = logging.getLogger(__name__)

UNREACHABLE = "the engine's database is unreachable; try again in a moment"
_FAILED = "the console could not answer this request; its log says why"
RETRY_AFTER_S = 5


class DatabaseOutage(HttpMiddleware):
    """ASGI middleware: a database outage answers ``503``; see the module docstring."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as exc:
            if started:
                raise  # too late to answer otherwise: the server ends the response
            if is_outage(exc):
                log.warning(
                    "console: %s %s answered 503: the database is unreachable (%s)",
                    scope.get("method", "?"),
                    scope.get("path", "?"),
                    _reason(exc),
                )
                await _answer(send, 503, UNREACHABLE, retry_after=True)
                return
            await _answer(send, 500, _FAILED, retry_after=False)
            raise


def _reason(exc: BaseException) -> str:
    """The error's first line, any URL in it masked: for the log, never for the page."""
    text = mask_url(str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def _answer(send: Send, status: int, text: str, *, retry_after: bool) -> None:
    body = f"{text}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    if retry_after:
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
