"""An attempt's span and a submit's (imported only when tracing is on).

The attempt's span is a child of the submit's (its ``traceparent``, read
from the job row by the claim) and linked to it, so a job's attempts, on
whichever worker and after whichever reclaim, are one trace. It begins when
the attempt's step first runs on its slot (:meth:`AttemptSpan.current`) and
ends with the attempt's outcome; its ``engine.fence`` says whether the fenced
checkpoint was accepted, refused (the lease token had changed) or not
reached. While the step itself runs (:meth:`AttemptSpan.body`) its
statements open no span each: the first one of a chunk opens the chunk's
span, which ``ctx.check()`` (or the call's end) closes with the count.

An attempt is the hot path of a traced worker, so its span and its
statements' are not the SDK's ``Span`` objects (a lock, an attribute copy
and a processor call each, 112-139 us of an attempt's work as measured in
``bench/tracing.py``): an attempt records its ids and times and, at its end,
hands one wire tuple per span (:mod:`.wire`) to the process's sink
(:mod:`.export`), which exports them from another process. The sampler is
the provider's (``OTEL_TRACES_SAMPLER``), asked once per attempt; a sampled
out attempt records nothing. While the step's own code runs, the attempt's
span is OpenTelemetry's current one, so a step's own spans and the jobs it
submits join its trace.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
)
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from engine.tracing.export import Sink
from engine.tracing.noop import AttemptTrace, Traces
from engine.tracing.wire import ATTEMPT, CHUNK, STATEMENT

if TYPE_CHECKING:
    from engine.store.rows import Claimed

__all__ = [
    "AttemptSpan",
    "Recording",
    "SlotTraces",
    "active",
    "annotate",
    "chunk_checked",
    "current_traceparent",
    "submitting",
]

_PROPAGATOR = TraceContextTextMapPropagator()
# the attempt running on this thread (its statements are its child spans, or its chunks')
_active: ContextVar[AttemptSpan | None] = ContextVar("engine_tracing_attempt", default=None)

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_bits = random.getrandbits
_now = time.time_ns


class Recording:
    """What a traced process records into: the SDK's tracer (the submit's span, a step's
    own), the sink its finished spans go to, and the sampler an attempt asks."""

    def __init__(self, tracer: trace.Tracer, sink: Sink, sampler: Sampler) -> None:
        self.tracer = tracer
        self.sink = sink
        self.sampler = sampler
        # the SDK's default and its ratio variant: a remote parent's flag decides, as
        # ParentBased would (without building a context to ask it)
        self.follows_parent = (
            isinstance(sampler, ParentBased)
            and getattr(sampler, "_remote_parent_sampled", None) is ALWAYS_ON
            and getattr(sampler, "_remote_parent_not_sampled", None) is ALWAYS_OFF
        )

    def sampled(self, trace_id: int, parent_id: int, flags: int, claimed: Claimed) -> bool:
        if parent_id and self.follows_parent:
            return bool(flags & 1)
        parent = None
        if parent_id:
            remote = SpanContext(trace_id, parent_id, is_remote=True, trace_flags=TraceFlags(flags))
            parent = trace.set_span_in_context(NonRecordingSpan(remote))
        name = f"{claimed.flow}.{claimed.step}"
        decided = self.sampler.should_sample(parent, trace_id, name, SpanKind.CONSUMER)
        return decided.decision is Decision.RECORD_AND_SAMPLE


def _parsed(parent: str | None) -> tuple[int, int, int]:
    """A W3C ``traceparent``'s trace id, span id and flags; zeros when there is none."""
    if parent:
        parts = parent.split("-")
        if len(parts) >= 4 and len(parts[1]) == 32 and len(parts[2]) == 16:
            try:
                return int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
            except ValueError:
                pass
    return 0, 0, 0


def current_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def annotate(attributes: Mapping[str, str | bool | int]) -> None:
    trace.get_current_span().set_attributes(dict(attributes))


@contextmanager
def submitting(tracer: trace.Tracer, flow: str) -> Iterator[None]:
    with tracer.start_as_current_span(
        f"submit {flow}", kind=SpanKind.PRODUCER, attributes={"engine.flow": flow}
    ):
        yield


def active() -> AttemptSpan | None:
    """The attempt running on this thread, if any."""
    return _active.get()


def chunk_checked() -> None:
    attempt = _active.get()
    if attempt is not None and attempt.in_body:
        attempt.close_chunk()


def _value(value: Any) -> str | bool | int | float:
    return value if isinstance(value, str | bool | int | float) else str(value)


class SlotTraces(Traces):
    """Makes an :class:`AttemptSpan` for each attempt of a slot."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording

    def attempt(self, claimed: Claimed, worker: str) -> AttemptTrace:
        return AttemptSpan(self.recording, claimed, worker)


class AttemptSpan(AttemptTrace):
    """One attempt's span (begun at its first run, ended with its outcome), recorded as
    :mod:`.wire` records: its own at its end, its statements' and chunks' at theirs."""

    def __init__(self, recording: Recording, claimed: Claimed, worker: str) -> None:
        self.recording = recording
        self.put = recording.sink.put
        self.claimed = claimed
        self.worker = worker
        self.begun = False
        self.sampled = False
        self.in_body = False
        self.trace_id = self.span_id = self.parent_id = 0
        self.started = 0
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self._ended = False
        # the heartbeat's thread may add an event while the slot's ends the span
        self._lock = threading.Lock()
        self._tokens: list[Token[AttemptSpan | None]] = []
        self._context: SpanContext | None = None
        self._chunk_id = 0
        self._chunk_started = 0
        self._chunks = 0
        self._statements = 0

    def _begin(self) -> None:
        claimed = self.claimed
        trace_id, parent_id, flags = _parsed(claimed.traceparent)
        if not trace_id:
            trace_id, parent_id, flags = _bits(128) or 1, 0, 1
        self.trace_id, self.parent_id = trace_id, parent_id
        self.span_id = _bits(64) or 1
        self.sampled = self.recording.sampled(trace_id, parent_id, flags, claimed)
        self.started = _now()
        if claimed.reclaimed_from is not None:
            self.events.append(("reclaimed", self.started, {"from": claimed.reclaimed_from}))
        self.begun = True

    def context(self) -> SpanContext:
        """Its span's context, for OpenTelemetry (made when asked: a child's submit)."""
        if self._context is None:
            self._context = SpanContext(
                self.trace_id,
                self.span_id,
                is_remote=False,
                trace_flags=_SAMPLED if self.sampled else _NOT_SAMPLED,
            )
        return self._context

    # current(): the attempt is this thread's while in the block (its statements its children)
    def current(self) -> AbstractContextManager[None]:
        return self

    def __enter__(self) -> None:
        if not self.begun:
            with self._lock:
                if not self.begun:
                    self._begin()
        self._tokens.append(_active.set(self))

    def __exit__(self, *exc: object) -> None:
        _active.reset(self._tokens.pop())

    def body(self) -> AbstractContextManager[None]:
        return _Body(self)

    def child(self, name: str, text: str | None, started: int, error: str | None) -> None:
        """An engine statement of this attempt ran from ``started`` until now: its span."""
        self.put(
            (
                STATEMENT,
                self.trace_id,
                _bits(64) or 1,
                self.span_id,
                started,
                _now(),
                name,
                text,
                error,
            )
        )

    def statement(self) -> None:
        """A statement of the step's own: counted in its chunk's span (opened if none is)."""
        if not self._chunk_id and self.sampled:
            self._chunks += 1
            self._chunk_id = _bits(64) or 1
            self._chunk_started = _now()
            self._statements = 0
        self._statements += 1

    def close_chunk(self) -> None:
        chunk, self._chunk_id = self._chunk_id, 0
        if chunk:
            self.put(
                (
                    CHUNK,
                    self.trace_id,
                    chunk,
                    self.span_id,
                    self._chunk_started,
                    _now(),
                    self._chunks,
                    self._statements,
                )
            )

    def event(self, name: str, detail: Mapping[str, Any]) -> None:
        with self._lock:
            if self.begun and self.sampled and not self._ended:
                self.events.append(
                    (name, _now(), {k: _value(v) for k, v in detail.items() if v is not None})
                )

    def ended(self, kind: str, detail: str = "", *, lease_lost: str = "") -> None:
        with self._lock:
            if not self.begun or self._ended:
                return
            self._ended = True
        if not self.sampled:
            return
        ended = _now()
        if lease_lost:
            self.events.append(("lease_lost", ended, {"reason": lease_lost}))
        claimed = self.claimed
        self.put(
            (
                ATTEMPT,
                self.trace_id,
                self.span_id,
                self.parent_id,
                self.started,
                ended,
                claimed.flow,
                claimed.step,
                claimed.job_id.int,
                claimed.id.int,
                claimed.attempt,
                self.worker,
                claimed.fanout_key,
                kind,
                detail,
                tuple(self.events),
            )
        )


class _AttemptView(NonRecordingSpan):
    """OpenTelemetry's current span while a step's own code runs: the attempt running on
    the thread (one shared object; the attempt's ids are read when asked)."""

    def get_span_context(self) -> SpanContext:
        attempt = _active.get()
        if attempt is None or not attempt.begun:
            return INVALID_SPAN_CONTEXT
        return attempt.context()


# made once: a slot's thread has nothing else in its OpenTelemetry context
_VIEW = trace.set_span_in_context(_AttemptView(INVALID_SPAN_CONTEXT), otel_context.Context())


class _Body:
    """The step's own call: its statements fold into chunks, and the attempt's span is
    OpenTelemetry's current one (a step's own spans, the jobs it submits, join its trace)."""

    __slots__ = ("attempt", "token")

    def __init__(self, attempt: AttemptSpan) -> None:
        self.attempt = attempt
        self.token: object = None

    def __enter__(self) -> None:
        self.attempt.in_body = True
        self.token = otel_context.attach(_VIEW)

    def __exit__(self, *exc: object) -> None:
        attempt = self.attempt
        attempt.in_body = False
        otel_context.detach(self.token)  # type: ignore[arg-type]
        attempt.close_chunk()
