"""psycopg statements as child spans of the span current in their thread (tracing on only).

A small psycopg-level hook rather than opentelemetry-instrumentation-psycopg,
which works with psycopg 3 but instruments a connection through its
``cursor_factory``: the checkpoint's message is sent by a ``ClientCursor``
made directly (:mod:`engine.store.batch`) and would go unseen, and every
statement without a span around it (a worker's queue polls, its heartbeats)
would be a trace of its own. Here ``Cursor.execute`` (which every cursor
class and ``Connection.execute`` go through) records a span only under a
sampled attempt (a wire tuple, :mod:`.spans`) or a recording span of the
SDK's (a submit's), named by the store's named query when it is one (its
text is in its ``.sql`` file, not repeated on every span), and a step's own
statements are counted into its chunk's span instead
(:meth:`engine.tracing.spans.AttemptSpan.statement`).
Installed once per process, when tracing is switched on.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from engine.store.queries import name_of
from engine.tracing.spans import active
from engine.tracing.wire import statement_text

__all__ = ["install", "operation"]

_installed = False
_lock = threading.Lock()
_COMMENTS = re.compile(r"^(\s*--[^\n]*\n|\s+)*")
_CONTROL = frozenset(
    {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "START", "END", "SET", "DISCARD"}
)
# the engine's tracer (engine.tracing.switch's), set by install()
_tracer: trace.Tracer = trace.NoOpTracer()


def operation(query: str) -> str:
    """The statement's first word (``SELECT``, ``WITH``, ``EXECUTE``...), comments skipped."""
    text = _COMMENTS.sub("", query, count=1)
    return (text.split(None, 1) or ["SQL"])[0].upper()


def _recorded(text: str) -> tuple[str, str | None] | None:
    """A statement's span name and, unless it is a named block (its text is in its ``.sql``
    file), its text; ``None``: no span (a savepoint or another transaction control
    statement: a span each would double a step's spans)."""
    name = name_of(text)
    if name is not None:
        return name, None
    first = operation(text)
    if first in _CONTROL:
        return None
    return first, text


def _traced(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        attempt = active()
        if attempt is not None:
            if attempt.in_body:
                attempt.statement()
                return method(self, query, *args, **kwargs)
            if not attempt.sampled:
                return method(self, query, *args, **kwargs)
            recorded = _recorded(
                query if isinstance(query, str) else query.as_string(self.connection)
            )
            if recorded is None:
                return method(self, query, *args, **kwargs)
            started = time.time_ns()
            try:
                result = method(self, query, *args, **kwargs)
            except BaseException as exc:
                attempt.child(*recorded, started, type(exc).__name__)
                raise
            attempt.child(*recorded, started, None)
            return result
        if not trace.get_current_span().is_recording():
            return method(self, query, *args, **kwargs)
        recorded = _recorded(query if isinstance(query, str) else query.as_string(self.connection))
        if recorded is None:
            return method(self, query, *args, **kwargs)
        name, text = recorded
        attributes = {"db.system": "postgresql"}
        if text is None:
            attributes["db.query.summary"] = name
        else:
            attributes["db.statement"] = statement_text(text)
        with _tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes):
            return method(self, query, *args, **kwargs)

    return execute


def install(tracer: trace.Tracer) -> None:
    """``psycopg.Cursor.execute`` and ``executemany`` traced from now on: under an attempt into
    its span (:class:`~engine.tracing.spans.AttemptSpan`), under a span of the SDK's (a
    submit's) into ``tracer``."""
    global _installed, _tracer
    with _lock:
        _tracer = tracer
        if _installed:
            return
        for name in ("execute", "executemany"):
            setattr(psycopg.Cursor, name, _traced(getattr(psycopg.Cursor, name)))
        _installed = True
