"""Logs: one configuration for every command, readable lines or one JSON object per line.

:func:`configure` is called once by the ``engine`` group, before any command
runs. ``--log-format json`` (``ENGINE_LOG_FORMAT=json``) writes one JSON object
per line with ``ts``, ``level``, ``logger``, ``message``, the context fields of
:data:`CONTEXT_FIELDS` that apply and ``exc`` (the traceback) when there is one;
``text`` writes today's readable lines, the context appended in brackets.

The context lives in a :class:`contextvars.ContextVar`: the worker binds its
id for the life of a thread (:func:`bind`), a slot binds the step run it
executes for the length of it (:func:`step_run`), and threads started through
:func:`inheriting` begin with their creator's context (a new thread otherwise
begins with none). Only the fields named here are ever written: ids, names and
numbers, never a step's inputs or outputs. The :class:`~engine.infra.secrets.SecretsFilter`
is installed on every handler and runs before the formatter, so what it masks
(message, arguments, traceback) is masked in both formats.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any, Literal

from pydantic import SecretStr

from engine.infra.secrets import SecretsFilter

if TYPE_CHECKING:
    from engine.store.rows import Claimed

__all__ = [
    "CONTEXT_FIELDS",
    "ContextFilter",
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "active_format",
    "bind",
    "bound",
    "configure",
    "current",
    "inheriting",
    "step_run",
]

LogFormat = Literal["text", "json"]

# in the order they are written; a record's own attribute (logging's extra=) wins
CONTEXT_FIELDS = (
    "job_id",
    "flow",
    "step",
    "step_run_id",
    "attempt",
    "worker",
    "lease_owner",
)

_OURS = "engine_logs_handler"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "engine_log_context", default=MappingProxyType({})
)


_active_format: LogFormat = "text"


def active_format() -> LogFormat:
    """The format :func:`configure` set last (``text`` before any call)."""
    return _active_format


def current() -> dict[str, object]:
    """The context fields bound in this thread now."""
    return dict(_context.get())


def bind(**fields: object) -> None:
    """Add ``fields`` to this thread's context for the rest of its life (or of its context)."""
    _context.set({**_context.get(), **fields})


@contextlib.contextmanager
def bound(**fields: object) -> Iterator[None]:
    """``fields`` in the context for the block; the previous context after it."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def step_run(claimed: Claimed, lease_owner: str) -> contextlib.AbstractContextManager[None]:
    """The context of one attempt of a step run, held under ``lease_owner``'s lease."""
    return bound(
        job_id=str(claimed.job_id),
        flow=claimed.flow,
        step=claimed.step,
        step_run_id=str(claimed.id),
        attempt=claimed.attempt,
        lease_owner=lease_owner,
    )


def inheriting(target: Callable[[], None]) -> Callable[[], None]:
    """``target`` run in a copy of the caller's context: a thread that starts with it."""
    context = contextvars.copy_context()

    def run() -> None:
        context.run(target)

    return run


def _fields(record: logging.LogRecord) -> dict[str, object]:
    found: Mapping[str, object] = getattr(record, "engine_context", None) or {}
    fields = {k: found[k] for k in CONTEXT_FIELDS if found.get(k) is not None}
    for key in CONTEXT_FIELDS:  # given with extra={...} at the call
        value = record.__dict__.get(key)
        if value is not None:
            fields[key] = value
    return fields


class ContextFilter(logging.Filter):
    """Copies the emitting thread's context onto the record (handlers may format it later)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "engine_context"):
            record.engine_context = _context.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line.

    The standard library's :mod:`json` rather than python-json-logger: the
    fields are a fixed, short list (no arbitrary ``extra`` is written, so
    nothing a caller attaches leaks), and the API install gains no dependency.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Today's readable line, with the context that applies appended: ``[job=... step=...]``."""

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802  logging's name
        line = super().formatMessage(record)
        fields = _fields(record)
        if not fields:
            return line
        return f"{line} [{' '.join(f'{k}={v}' for k, v in fields.items())}]"


def configure(
    level: str | int = "WARNING",
    log_format: LogFormat = "text",
    database_url: str | None = None,
    stream: IO[str] | None = None,
) -> logging.Handler | None:
    """Send every log record to one handler on ``stream`` (stderr), in ``log_format``.

    The handler masks the secrets of :class:`~engine.infra.secrets.SecretsFilter` (the
    password of ``database_url`` and the AWS keys of the environment), then adds
    the context; botocore's DEBUG requests included, as they propagate to root.
    A second call replaces the handler of the first. As ``logging.basicConfig``
    does, a root logger that already has handlers of someone else (an embedding
    program, pytest) keeps them, only filtered, unless ``stream`` is given;
    ``None`` is returned then.
    """
    global _active_format
    _active_format = log_format
    root = logging.getLogger()
    root.setLevel(level.upper() if isinstance(level, str) else level)
    secrets = SecretsFilter(SecretStr(database_url) if database_url else None)
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
    if root.handlers and stream is None:
        for other in root.handlers:
            other.addFilter(secrets)
            other.addFilter(ContextFilter())
        return None
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _OURS, True)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(secrets)
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    return handler
