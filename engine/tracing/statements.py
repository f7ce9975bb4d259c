"""psycopg statements as child spans of the span current in their thread (tracing on only).

A small psycopg-level hook rather than opentelemetry-instrumentation-psycopg,
which works with psycopg 3 but instruments a connection through its
``cursor_factory``: the checkpoint's message is sent by a ``ClientCursor``
made directly (:mod:`engine.store.batch`) and would go unseen, and every
statement without a span around it (a worker's queue polls, its heartbeats)
would be a trace of its own. Here ``Cursor.execute`` (which every cursor
class and ``Connection.execute`` go through) opens a span only under a
recording one, named by the store's named query when it is one (its text is
in its ``.sql`` file, not repeated on every span), and a step's own
statements are counted into its chunk's span instead
(:meth:`engine.tracing.spans.AttemptSpan.statement`).
Installed once per process, when tracing is switched on.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from engine.store.queries import name_of
from engine.tracing.spans import in_body

__all__ = ["install", "operation"]

_installed = False
_lock = threading.Lock()
_COMMENTS = re.compile(r"^(\s*--[^\n]*\n|\s+)*")
_PREPARED = re.compile(r"EXECUTE\s+(\w+)")
_CONTROL = frozenset(
    {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "START", "END", "SET", "DISCARD"}
)
_TEXT_MAX = 1000  # an unnamed statement's text on its span
# the engine's tracer (engine.tracing.switch's), set by install()
_tracer: trace.Tracer = trace.NoOpTracer()


def operation(query: str) -> str:
    """The statement's first word (``SELECT``, ``WITH``, ``EXECUTE``...), comments skipped."""
    text = _COMMENTS.sub("", query, count=1)
    return (text.split(None, 1) or ["SQL"])[0].upper()


def _text(query: str) -> str:
    if query.lstrip().upper().startswith("EXECUTE"):
        # a checkpoint's message binds its values client side: name the statements only
        return "; ".join(f"EXECUTE {name}" for name in _PREPARED.findall(query))
    return query[:_TEXT_MAX]


def _described(text: str) -> tuple[str, dict[str, str]] | None:
    """A statement's span name and attributes: a named block's name (its text is in its
    ``.sql`` file), else its first word and its text; ``None``: no span (a savepoint or
    another transaction control statement: a span each would double a step's spans)."""
    name = name_of(text)
    if name is not None:
        return name, {"db.system": "postgresql", "db.query.summary": name}
    first = operation(text)
    if first in _CONTROL:
        return None
    return first, {"db.system": "postgresql", "db.statement": _text(text)}


def _traced(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        attempt = in_body()
        if attempt is not None:
            attempt.statement()
            return method(self, query, *args, **kwargs)
        if not trace.get_current_span().is_recording():
            return method(self, query, *args, **kwargs)
        described = _described(
            query if isinstance(query, str) else query.as_string(self.connection)
        )
        if described is None:
            return method(self, query, *args, **kwargs)
        name, attributes = described
        with _tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes):
            return method(self, query, *args, **kwargs)

    return execute


def install(tracer: trace.Tracer) -> None:
    """``psycopg.Cursor.execute`` and ``executemany`` traced into ``tracer`` from now on."""
    global _installed, _tracer
    with _lock:
        _tracer = tracer
        if _installed:
            return
        for name in ("execute", "executemany"):
            setattr(psycopg.Cursor, name, _traced(getattr(psycopg.Cursor, name)))
        _installed = True
