"""On or off, and the one tracer of the process: decided once, from the ``OTEL_*`` settings.

Off (``OTEL_TRACES_EXPORTER`` unset or ``none``, or ``OTEL_SDK_DISABLED=true``)
every function here returns at its first line and OpenTelemetry is never
imported. :func:`use` replaces the decision with a provider of the caller's
(the tests' in-memory exporter, the bench's collector).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from engine.errors import ConfigError
from engine.tracing.noop import NO_TRACES, Traces

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from engine.tracing.export import Sink
    from engine.tracing.spans import Recording

__all__ = [
    "chunk_checked",
    "enabled",
    "submit_span",
    "submitted",
    "trace_id",
    "traceparent",
    "traces",
    "use",
    "wanted",
]

_lock = threading.Lock()
_decided = False
_recording: Recording | None = None


def wanted(env: Mapping[str, str]) -> bool:
    """Do the ``OTEL_*`` settings in ``env`` ask for traces?"""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    return any(n != "none" for n in names)


def _current() -> Recording | None:
    global _decided, _recording
    if _decided:
        return _recording
    with _lock:
        if not _decided:
            if wanted(os.environ):
                try:
                    from engine.tracing import setup
                except ImportError as exc:
                    raise ConfigError(
                        f"OTEL_TRACES_EXPORTER={os.environ['OTEL_TRACES_EXPORTER']!r} asks for "
                        f"traces, but OpenTelemetry is not installed ({exc.name}): install "
                        "'erp-engine[tracing]', or unset OTEL_TRACES_EXPORTER (or set none)"
                    ) from exc
                _recording = setup.recording_from_env(os.environ)
            _decided = True
    return _recording


def enabled() -> bool:
    """Is this process tracing?"""
    return _current() is not None


def use(provider: TracerProvider | None, sink: Sink | None = None) -> None:
    """Trace into ``provider`` from now on, the attempts' spans through its processors (or
    into ``sink``); ``None``: decide from the settings again."""
    global _decided, _recording
    with _lock:
        if provider is None:
            _recording, _decided = None, False
            return
        from engine.tracing import setup
        from engine.tracing.export import ProviderSink

        _recording = setup.recording_of(provider, sink or ProviderSink(provider))
        _decided = True


def traces() -> Traces:
    """What makes a slot's attempt traces: the no-op one when tracing is off."""
    recording = _current()
    if recording is None:
        return NO_TRACES
    from engine.tracing.spans import SlotTraces

    return SlotTraces(recording)


@contextmanager
def submit_span(flow: str) -> Iterator[None]:
    """A submit of ``flow``: its span, current in the block (a child of the caller's)."""
    recording = _current()
    if recording is None:
        yield
        return
    from engine.tracing.spans import submitting

    with submitting(recording.tracer, flow):
        yield


def traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, for a job row; ``None`` untraced."""
    if _current() is None:
        return None
    from engine.tracing.spans import current_traceparent

    return current_traceparent()


def submitted(job_id: uuid.UUID, created: bool) -> None:
    """The current (submit) span names the job it wrote, or found already active."""
    if _current() is None:
        return
    from engine.tracing.spans import annotate

    annotate({"engine.job.id": str(job_id), "engine.job.created": created})


def chunk_checked() -> None:
    """A running step called ``ctx.check()``: its chunk's span, if one is open, ends."""
    if _recording is None:
        return
    from engine.tracing.spans import chunk_checked as checked

    checked()


def trace_id(parent: str | None) -> str | None:
    """The trace id (32 hex digits) of a W3C ``traceparent``; ``None`` for none."""
    if not parent:
        return None
    parts = parent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None
