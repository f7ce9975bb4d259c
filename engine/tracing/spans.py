"""An attempt's span and a submit's, on OpenTelemetry (imported only when tracing is on).

The attempt's span is a child of the submit's (its ``traceparent``, read
from the job row by the claim) and linked to it, so a job's attempts, on
whichever worker and after whichever reclaim, are one trace. It begins when
the attempt's step first runs on its slot (:meth:`AttemptSpan.current`) and
ends with the attempt's outcome; its ``engine.fence`` says whether the fenced
checkpoint was accepted, refused (the lease token had changed) or not
reached. While the step itself runs (:meth:`AttemptSpan.body`) its
statements open no span each: the first one of a chunk opens the chunk's
span, which ``ctx.check()`` (or the call's end) closes with the count.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from engine.tracing.noop import AttemptTrace, Traces

if TYPE_CHECKING:
    from engine.store.rows import Claimed

__all__ = [
    "AttemptSpan",
    "SlotTraces",
    "annotate",
    "chunk_checked",
    "current_traceparent",
    "in_body",
    "submitting",
]

_PROPAGATOR = TraceContextTextMapPropagator()
# the attempt whose step is being called in this thread (its statements fold into chunks)
_body: ContextVar[AttemptSpan | None] = ContextVar("engine_tracing_body", default=None)

# what the fenced checkpoint came to, by the attempt's outcome
_FENCE = {"done": "accepted", "fenced": "refused"}
# outcomes that are the step's (or its data's) failure
_ERRORS = frozenset({"retried", "dead", "rejected", "charged"})


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


def in_body() -> AttemptSpan | None:
    """The attempt whose step's own call runs in this thread, if any."""
    return _body.get()


def chunk_checked() -> None:
    attempt = _body.get()
    if attempt is not None:
        attempt.close_chunk()


def _value(value: Any) -> str | bool | int | float:
    return value if isinstance(value, str | bool | int | float) else str(value)


class SlotTraces(Traces):
    """Makes an :class:`AttemptSpan` for each attempt of a slot."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def attempt(self, claimed: Claimed, worker: str) -> AttemptTrace:
        return AttemptSpan(self.tracer, claimed, worker)


class AttemptSpan(AttemptTrace):
    """One attempt's span (begun at its first run, ended with its outcome)."""

    def __init__(self, tracer: trace.Tracer, claimed: Claimed, worker: str) -> None:
        self.tracer = tracer
        self.claimed = claimed
        self.worker = worker
        self.span: Span | None = None
        self._ended = False
        # the heartbeat's thread may add an event while the slot's ends the span
        self._lock = threading.Lock()
        self._chunk: Span | None = None
        self._chunks = 0
        self._statements = 0

    def _begin(self) -> Span:
        claimed = self.claimed
        parent = None
        links: list[Link] = []
        if claimed.traceparent:
            parent = _PROPAGATOR.extract({"traceparent": claimed.traceparent})
            submit = trace.get_current_span(parent).get_span_context()
            if submit.is_valid:
                links.append(Link(submit, {"engine.link": "submit"}))
        span = self.tracer.start_span(
            f"{claimed.flow}.{claimed.step}",
            context=parent if parent is not None else otel_context.Context(),
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "engine.job.id": str(claimed.job_id),
                "engine.flow": claimed.flow,
                "engine.step": claimed.step,
                "engine.step_run.id": str(claimed.id),
                "engine.attempt": claimed.attempt,
                "engine.worker": self.worker,
            },
        )
        if claimed.fanout_key:
            span.set_attribute("engine.fanout_key", claimed.fanout_key)
        if claimed.reclaimed_from is not None:
            span.add_event("reclaimed", {"from": claimed.reclaimed_from})
        return span

    def current(self) -> AbstractContextManager[None]:
        return self._current()

    @contextmanager
    def _current(self) -> Iterator[None]:
        with self._lock:
            if self.span is None:
                self.span = self._begin()
            span = self.span
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield
        finally:
            otel_context.detach(token)

    def body(self) -> AbstractContextManager[None]:
        return self._body()

    @contextmanager
    def _body(self) -> Iterator[None]:
        token = _body.set(self)
        try:
            yield
        finally:
            _body.reset(token)
            self.close_chunk()

    def statement(self) -> None:
        """A statement of the step's own: counted in its chunk's span (opened if none is)."""
        if self._chunk is None and self.span is not None:
            self._chunks += 1
            self._chunk = self.tracer.start_span(
                f"chunk {self._chunks}",
                context=trace.set_span_in_context(self.span),
                attributes={"engine.chunk": self._chunks},
            )
            self._statements = 0
        self._statements += 1

    def close_chunk(self) -> None:
        chunk, self._chunk = self._chunk, None
        if chunk is not None:
            chunk.set_attribute("db.statements", self._statements)
            chunk.end()

    def event(self, name: str, detail: Mapping[str, Any]) -> None:
        with self._lock:
            if self.span is not None and not self._ended:
                self.span.add_event(
                    name, {k: _value(v) for k, v in detail.items() if v is not None}
                )

    def ended(self, kind: str, detail: str = "", *, lease_lost: str = "") -> None:
        with self._lock:
            span = self.span
            if span is None or self._ended:
                return
            self._ended = True
        if lease_lost:
            span.add_event("lease_lost", {"reason": lease_lost})
        span.set_attributes(
            {"engine.outcome": kind, "engine.fence": _FENCE.get(kind, "not reached")}
        )
        if kind in _ERRORS:
            span.set_status(Status(StatusCode.ERROR, detail[:500] or kind))
        span.end()
