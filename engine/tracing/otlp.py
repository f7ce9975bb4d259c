"""Records straight into an OTLP request, in the exporter process (tracing on only).

The SDK's OTLP exporter takes ``ReadableSpan`` objects and encodes each one
into protobuf messages through several layers of Python. Made from a record
(:func:`.wire.readable`) and then encoded that way, a step's spans cost the
exporter process about seven times what writing the request's bytes from the
record does (``bench/tracing.py`` prints both), and on a worker's machine
that CPU is the steps'. :func:`encode` writes the ``ExportTraceServiceRequest``
from the records themselves in protobuf's wire format: an attempt's,
a statement's or a chunk's span is its ids and times between byte strings
made once per flow, step, worker, outcome or statement name (the SDK's own
spans, a submit's, few, are built as protobuf messages). What it writes
parses to the message the SDK's ``encode_spans`` makes of
``[readable(r, resource) for r in records]`` (:func:`request`; a test holds
the two equal for every kind of record and attribute).

The exporters stay the SDK's: the exporter process (:mod:`.exporter`) lets
its OTLP/HTTP exporter send :func:`request` instead of encoding the spans.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as OtlpResource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.resources import Resource

from engine.tracing.wire import (
    ATTEMPT,
    CHUNK,
    ERRORS,
    FENCE,
    SCOPE,
    STATEMENT,
    SUBMIT_LINK,
    Record,
    statement_text,
)

__all__ = ["encode", "request"]

log = logging.getLogger(__name__)

# the span's flags as the SDK's encoder sets them: "has is_remote", and "is remote" for a
# span whose parent (or a link whose context) is remote
_LOCAL = 0x100
_REMOTE = 0x300
_ERROR = 2  # StatusCode.ERROR's value
_CACHED = 4096  # byte strings kept per cache (flows x steps x workers x outcomes, names)
_T = TypeVar("_T")


# -- protobuf's wire format: a field is its tag (number << 3 | type), then its value; the
# -- tags below are opentelemetry/proto/trace/v1/trace.proto's and common.proto's

_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack
_double = struct.Struct("<d").pack


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field (a string, bytes, a message)."""
    return tag + _varint(len(data)) + data


def _any(value: Any) -> dict[str, Any]:
    """An attribute's value as the SDK's encoder writes it (an ``AnyValue``'s fields)."""
    if isinstance(value, bool):
        return {"bool_value": value}
    if isinstance(value, str):
        return {"string_value": value}
    if isinstance(value, int):
        return {"int_value": value}
    if isinstance(value, float):
        return {"double_value": value}
    if isinstance(value, bytes):
        return {"bytes_value": value}
    if isinstance(value, Mapping):
        return {"kvlist_value": KeyValueList(values=_attributes(value))}
    if isinstance(value, Sequence):
        return {"array_value": ArrayValue(values=[AnyValue(**_any(v)) for v in value])}
    raise TypeError(f"an attribute of type {type(value).__name__} is not one OTLP carries")


def _attributes(attributes: Mapping[str, Any] | None) -> list[Any]:
    """The attributes' ``KeyValue`` messages, as the fields protobuf's constructors take."""
    out: list[Any] = []
    for key, value in (attributes or {}).items():
        try:
            out.append({"key": key, "value": _any(value)})
        except TypeError:
            # what the SDK's encoder does with it: logged, left out
            log.exception("attribute %r left out of its span", key)
    return out


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue`` message's bytes."""
    if isinstance(value, bool):
        said = b"\x10\x01" if value else b"\x10\x00"
    elif isinstance(value, str):
        said = _field(b"\x0a", value.encode())
    elif isinstance(value, int):
        said = b"\x18" + _varint(value & 0xFFFF_FFFF_FFFF_FFFF)  # int64: two's complement
    elif isinstance(value, float):
        said = b"\x21" + _double(value)
    else:
        made: bytes = KeyValue(key=key, value=AnyValue(**_any(value))).SerializeToString()
        return made
    return _field(b"\x0a", key.encode()) + _field(b"\x12", said)


def _attribute(tag: bytes, key: str, value: Any) -> bytes:
    """An attribute as the field ``tag`` of its span (event, link)."""
    return _field(tag, _key_value(key, value))


class _Made(dict[Any, _T]):
    """Byte strings made once each, at most :data:`_CACHED` of them (then made again)."""

    def __init__(self, make: Callable[..., _T]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: Any) -> _T:
        if len(self) >= _CACHED:
            self.clear()
        made = self[key] = self.make(*key)
        return made


_span_attribute: _Made[bytes] = _Made(lambda key, value: _attribute(b"\x4a", key, value))
_STATUS_UNSET = b"\x7a\x00"  # the SDK's encoder writes an empty status
_FLAGS_LOCAL = b"\x85\x01" + _fixed32(_LOCAL)
_FLAGS_REMOTE = b"\x85\x01" + _fixed32(_REMOTE)
_SUBMIT = b"".join(_attribute(b"\x22", k, v) for k, v in SUBMIT_LINK.items())
_DB = _span_attribute["db.system", "postgresql"]


def _error(message: str) -> bytes:
    return _field(b"\x7a", _field(b"\x12", message.encode()) + b"\x18" + _varint(_ERROR))


def _child(trace_id: int, span_id: int, parent_id: int) -> bytes:
    """A child span's ids (a statement's, a chunk's: their parent is the attempt)."""
    return (
        b"\x0a\x10"
        + trace_id.to_bytes(16, "big")
        + b"\x12\x08"
        + span_id.to_bytes(8, "big")
        + b"\x22\x08"
        + parent_id.to_bytes(8, "big")
    )


def _times(start: int, end: int) -> bytes:
    return b"\x39" + _fixed64(start) + b"\x41" + _fixed64(end)


def _events(events: Sequence[tuple[str, int, Mapping[str, Any]]]) -> bytes:
    return b"".join(
        _field(
            b"\x5a",
            b"\x09"
            + _fixed64(at)
            + _field(b"\x12", name.encode())
            + b"".join(_attribute(b"\x1a", k, v) for k, v in attributes.items()),
        )
        for name, at, attributes in events
    )


def _attempt_parts(flow: str, step: str, worker: str, outcome: str) -> tuple[bytes, bytes, bytes]:
    """What an attempt's span shares with the flow's other attempts: its name and kind, then
    the attributes before its step run's id, then those after its attempt's number (the
    attributes in the order the SDK's span has them)."""
    return (
        _field(b"\x2a", f"{flow}.{step}".encode())
        + b"\x30"
        + _varint(Span.SpanKind.SPAN_KIND_CONSUMER),
        _span_attribute["engine.flow", flow] + _span_attribute["engine.step", step],
        _span_attribute["engine.worker", worker]
        + _span_attribute["engine.outcome", outcome]
        + _span_attribute["engine.fence", FENCE.get(outcome, "not reached")],
    )


_attempts: _Made[tuple[bytes, bytes, bytes]] = _Made(_attempt_parts)


def _attempt(record: Record) -> bytes:
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
    trace = trace_id.to_bytes(16, "big")
    head, flow_step, after = _attempts[flow, step, worker, outcome]
    parts = [
        b"\x0a\x10",
        trace,
        b"\x12\x08",
        span_id.to_bytes(8, "big"),
        head,
        _times(start, end),
        _attribute(b"\x4a", "engine.job.id", str(uuid.UUID(int=job_id))),
        flow_step,
        _attribute(b"\x4a", "engine.step_run.id", str(uuid.UUID(int=step_run_id))),
        _span_attribute["engine.attempt", attempt],
        after,
    ]
    if fanout_key:
        parts.append(_attribute(b"\x4a", "engine.fanout_key", fanout_key))
    if events:
        parts.append(_events(events))
    parts.append(_error(detail[:500] or outcome) if outcome in ERRORS else _STATUS_UNSET)
    if parent_id:
        # a child of its submit's span, and linked to it
        parent = parent_id.to_bytes(8, "big")
        link = b"\x0a\x10" + trace + b"\x12\x08" + parent + _SUBMIT + b"\x35" + _fixed32(_REMOTE)
        parts += (b"\x22\x08", parent, _field(b"\x6a", link), _FLAGS_REMOTE)
    else:
        parts.append(_FLAGS_LOCAL)
    return b"".join(parts)


def _named(name: str) -> bytes:
    """A named statement's name, kind and attributes."""
    return (
        _field(b"\x2a", name.encode())
        + b"\x30"
        + _varint(Span.SpanKind.SPAN_KIND_CLIENT)
        + _DB
        + _span_attribute["db.query.summary", name]
    )


_statements: _Made[bytes] = _Made(_named)


def _statement(record: Record) -> bytes:
    _, trace_id, span_id, parent_id, start, end, name, text, error = record
    if text is None:
        said = _statements[(name,)]
    else:
        said = (
            _field(b"\x2a", name.encode())
            + b"\x30"
            + _varint(Span.SpanKind.SPAN_KIND_CLIENT)
            + _DB
            + _attribute(b"\x4a", "db.statement", statement_text(text))
        )
    return b"".join(
        (
            _child(trace_id, span_id, parent_id),
            said,
            _times(start, end),
            _STATUS_UNSET if error is None else _error(error),
            _FLAGS_LOCAL,
        )
    )


def _chunk(record: Record) -> bytes:
    _, trace_id, span_id, parent_id, start, end, number, statements = record
    return b"".join(
        (
            _child(trace_id, span_id, parent_id),
            _field(b"\x2a", f"chunk {number}".encode()),
            b"\x30",
            _varint(Span.SpanKind.SPAN_KIND_INTERNAL),
            _times(start, end),
            _span_attribute["engine.chunk", number],
            _attribute(b"\x4a", "db.statements", statements),
            _STATUS_UNSET,
            _FLAGS_LOCAL,
        )
    )


def _sdk_span(record: Record) -> bytes:
    """One of the SDK's own spans (a submit's, a step's own), few: built as a message."""
    (
        _,
        trace_id,
        span_id,
        parent_id,
        _flags,
        name,
        kind,
        start,
        end,
        attributes,
        events,
        links,
        code,
        description,
        _scope,
        parent_remote,
    ) = record
    span = Span(
        trace_id=trace_id.to_bytes(16, "big"),
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent_id.to_bytes(8, "big") if parent_id else b"",
        name=name,
        kind=kind + 1,  # the SDK's SpanKind counts from 0, OTLP's from 1 (0: unspecified)
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=_attributes(attributes),
        events=[
            Span.Event(name=n, time_unix_nano=t, attributes=_attributes(a)) for n, t, a in events
        ],
        links=[
            Span.Link(
                trace_id=t.to_bytes(16, "big"),
                span_id=s.to_bytes(8, "big"),
                attributes=_attributes(a),
                flags=_REMOTE,
            )
            for t, s, _f, a in links
        ],
        # the SDK's Status keeps a description for an error only
        status=Status(code=code, message=description),
        flags=_REMOTE if parent_id and parent_remote else _LOCAL,
    )
    data: bytes = span.SerializeToString()
    return data


_ENCODERS: dict[int, Callable[[Record], bytes]] = {
    ATTEMPT: _attempt,
    STATEMENT: _statement,
    CHUNK: _chunk,
}


def encode(records: Sequence[Record], resource: Resource) -> bytes:
    """The OTLP request for ``records``, serialized: one resource, its spans by scope (the
    engine's, and each SDK span's own) in the order the SDK's encoder puts them."""
    if not records:
        return b""
    scopes: dict[tuple[str, str | None], list[bytes]] = {}
    engine: list[bytes] | None = None
    for record in records:
        encoded = _ENCODERS.get(record[0])
        if encoded is not None:
            if engine is None:
                engine = scopes.setdefault((SCOPE, None), [])
            engine.append(_field(b"\x12", encoded(record)))
        else:
            scopes.setdefault(record[14], []).append(_field(b"\x12", _sdk_span(record)))
    resource_spans = [
        _field(
            b"\x0a", OtlpResource(attributes=_attributes(resource.attributes)).SerializeToString()
        )
    ]
    for (name, version), spans in scopes.items():
        scope = InstrumentationScope(name=name, version=version or "").SerializeToString()
        resource_spans.append(_field(b"\x12", _field(b"\x0a", scope) + b"".join(spans)))
    if resource.schema_url:
        resource_spans.append(_field(b"\x1a", resource.schema_url.encode()))
    return _field(b"\x0a", b"".join(resource_spans))


def request(records: Sequence[Record], resource: Resource) -> ExportTraceServiceRequest:
    """:func:`encode`'s request as the SDK's message (what its exporter serializes)."""
    made: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(
        encode(records, resource)
    )
    return made
