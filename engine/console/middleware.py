"""The console's ASGI middleware: HTTP requests only, every other scope passed through."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HttpMiddleware", "SecurityHeaders"]


class HttpMiddleware:
    """Wraps ``app``; :meth:`http` handles an HTTP request, any other scope goes straight on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class SecurityHeaders(HttpMiddleware):
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

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + self.HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)
