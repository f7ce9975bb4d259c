"""Finished spans as compact records, and back into the SDK's ``ReadableSpan`` (tracing on only).

A traced worker records what it knows of an attempt, its engine statements
and its chunks as plain tuples of integers and strings (:mod:`.spans`,
:mod:`.statements`): ids, times, names, the claim's fields. Everything a
span is made of beyond that (its attribute dict, the ids as text, its name,
its link and status) is built from the record by :func:`readable`, in the
exporter process (:mod:`.exporter`), or in-process for a provider of the
caller's. The SDK's own spans (a submit's, a step's own) travel as a
:data:`SPAN` record, made at their end (:func:`wire_of`). Records marshal
cheaply (``marshal``: tuples, ints, strings, dicts), so a batch crosses to
the exporter process as one write.

Records, by their first item:

- ``(SPAN, trace_id, span_id, parent_id, flags, name, kind, start_ns, end_ns,
  attributes, events, links, status_code, status_description, scope,
  parent_remote)``: any span; ``kind`` and ``status_code`` the values of
  ``SpanKind`` and ``StatusCode``, ``scope`` the tracer's ``(name, version)``;
- ``(ATTEMPT, trace_id, span_id, parent_id, start_ns, end_ns, flow, step,
  job_id, step_run_id, attempt, worker, fanout_key, outcome, detail,
  events)``: a step attempt (the ids as ``uuid.UUID.int``; ``parent_id`` its
  submit's span, 0 untraced);
- ``(STATEMENT, trace_id, span_id, parent_id, start_ns, end_ns, name, text,
  error)``: an engine statement (``text`` ``None`` for a named query,
  ``error`` the exception's type name);
- ``(CHUNK, trace_id, span_id, parent_id, start_ns, end_ns, number,
  statements)``: a step's own statements between two checks.

``events`` are tuples of ``(name, time_ns, attributes)``; ``links`` of
``(trace_id, span_id, flags, attributes)``; ``parent_id`` 0 for a root.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

__all__ = [
    "ATTEMPT",
    "CHUNK",
    "ERRORS",
    "FENCE",
    "SCOPE",
    "SPAN",
    "STATEMENT",
    "SUBMIT_LINK",
    "Record",
    "readable",
    "statement_text",
    "wire_of",
]

Record = tuple[Any, ...]

SPAN, ATTEMPT, STATEMENT, CHUNK = range(4)
SCOPE = "erp-engine"  # the engine's tracer

# what the fenced checkpoint came to, by the attempt's outcome
FENCE = {"done": "accepted", "fenced": "refused"}
# outcomes that are the step's (or its data's) failure
ERRORS = frozenset({"retried", "dead", "rejected", "charged"})
SUBMIT_LINK = {"engine.link": "submit"}
_TEXT_MAX = 1000  # an unnamed statement's text on its span
_PREPARED = re.compile(r"EXECUTE\s+(\w+)")

_KINDS = {kind.value: kind for kind in SpanKind}
_CODES = {code.value: code for code in StatusCode}
_FLAGS = {0: TraceFlags(0), 1: TraceFlags(1)}
_UNSET = Status(StatusCode.UNSET)
_scopes: dict[tuple[str, str | None], InstrumentationScope] = {}


def statement_text(query: str) -> str:
    """An unnamed statement's text on its span (a prepared one's names only: a checkpoint's
    message binds its values client side)."""
    if query.lstrip().upper().startswith("EXECUTE"):
        return "; ".join(f"EXECUTE {name}" for name in _PREPARED.findall(query))
    return query[:_TEXT_MAX]


def _flags(value: int) -> TraceFlags:
    return _FLAGS.get(value) or TraceFlags(value)


def _scope(scope: tuple[str, str | None]) -> InstrumentationScope:
    scoped = _scopes.get(scope)
    if scoped is None:
        scoped = _scopes.setdefault(scope, InstrumentationScope(scope[0], scope[1]))
    return scoped


def _span(
    resource: Resource,
    trace_id: int,
    span_id: int,
    parent_id: int,
    name: str,
    kind: SpanKind,
    start: int,
    end: int,
    attributes: dict[str, Any],
    *,
    flags: int = 1,
    events: tuple[tuple[str, int, dict[str, Any]], ...] = (),
    links: tuple[tuple[int, int, int, dict[str, Any]], ...] = (),
    status: Status = _UNSET,
    scope: tuple[str, str | None] = (SCOPE, None),
    parent_remote: bool = False,
) -> ReadableSpan:
    trace_flags = _flags(flags)
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=trace_flags),
        parent=(
            SpanContext(trace_id, parent_id, is_remote=parent_remote, trace_flags=trace_flags)
            if parent_id
            else None
        ),
        resource=resource,
        attributes=attributes,
        events=[Event(n, a, timestamp=t) for n, t, a in events],
        links=[
            Link(SpanContext(t, s, is_remote=True, trace_flags=_flags(f)), a)
            for t, s, f, a in links
        ],
        kind=kind,
        status=status,
        start_time=start,
        end_time=end,
        instrumentation_scope=_scope(scope),
    )


def readable(record: Record, resource: Resource) -> ReadableSpan:
    """The SDK's span for ``record``, as its exporters take it."""
    what = record[0]
    if what == ATTEMPT:
        return _attempt(record, resource)
    if what == STATEMENT:
        # (what, trace id, span id, parent id, start, end, name, text, error)
        ids: tuple[int, int, int] = record[1:4]
        start, end, name, text, error = record[4:]
        attributes = {"db.system": "postgresql"}
        if text is None:
            attributes["db.query.summary"] = name
        else:
            attributes["db.statement"] = statement_text(text)
        status = _UNSET if error is None else Status(StatusCode.ERROR, error)
        return _span(resource, *ids, name, SpanKind.CLIENT, start, end, attributes, status=status)
    if what == CHUNK:
        # (what, trace id, span id, parent id, start, end, chunk number, statements)
        ids: tuple[int, int, int] = record[1:4]  # type: ignore[no-redef]
        start, end, number, statements = record[4:]
        attributes = {"engine.chunk": number, "db.statements": statements}
        return _span(resource, *ids, f"chunk {number}", SpanKind.INTERNAL, start, end, attributes)
    (
        _,
        trace_id,
        span_id,
        parent_id,
        flags,
        name,
        kind,
        start,
        end,
        attributes,
        events,
        links,
        code,
        description,
        scope,
        parent_remote,
    ) = record
    return _span(
        resource,
        trace_id,
        span_id,
        parent_id,
        name,
        _KINDS[kind],
        start,
        end,
        attributes,
        flags=flags,
        events=events,
        links=links,
        status=Status(_CODES[code], description) if code else _UNSET,
        scope=scope,
        parent_remote=parent_remote,
    )


def _attempt(record: Record, resource: Resource) -> ReadableSpan:
    (
        _,
        trace_id,
        span_id,
        parent_id,
        start,
        end,
        flow,
        step,
        job_id,
        step_run_id,
        attempt,
        worker,
        fanout_key,
        outcome,
        detail,
        events,
    ) = record
    attributes: dict[str, Any] = {
        "engine.job.id": str(uuid.UUID(int=job_id)),
        "engine.flow": flow,
        "engine.step": step,
        "engine.step_run.id": str(uuid.UUID(int=step_run_id)),
        "engine.attempt": attempt,
        "engine.worker": worker,
        "engine.outcome": outcome,
        "engine.fence": FENCE.get(outcome, "not reached"),
    }
    if fanout_key:
        attributes["engine.fanout_key"] = fanout_key
    status = Status(StatusCode.ERROR, detail[:500] or outcome) if outcome in ERRORS else _UNSET
    return _span(
        resource,
        trace_id,
        span_id,
        parent_id,
        f"{flow}.{step}",
        SpanKind.CONSUMER,
        start,
        end,
        attributes,
        events=events,
        links=((trace_id, parent_id, 1, SUBMIT_LINK),) if parent_id else (),
        status=status,
        parent_remote=True,
    )


def wire_of(span: ReadableSpan) -> Record:
    """``span`` (one of the SDK's, ended) as a :data:`SPAN` record."""
    context = span.get_span_context()
    assert context is not None, "an SDK span has its context"
    parent = span.parent
    scope = span.instrumentation_scope
    status = span.status
    return (
        SPAN,
        context.trace_id,
        context.span_id,
        parent.span_id if parent is not None else 0,
        int(context.trace_flags),
        span.name,
        span.kind.value,
        span.start_time,
        span.end_time,
        dict(span.attributes or {}),
        tuple((e.name, e.timestamp, dict(e.attributes or {})) for e in span.events),
        tuple(
            (
                link.context.trace_id,
                link.context.span_id,
                int(link.context.trace_flags),
                dict(link.attributes or {}),
            )
            for link in span.links
        ),
        status.status_code.value,
        status.description,
        (scope.name, scope.version) if scope is not None else ("", None),
        bool(parent is not None and parent.is_remote),
    )
