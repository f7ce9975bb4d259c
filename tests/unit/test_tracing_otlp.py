"""The exporter process's OTLP request made from records (engine.tracing.otlp) is the request
the SDK's encoder makes of the same spans, for every kind of record a worker sends."""

from __future__ import annotations

import uuid

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import trace_exporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.span import NonRecordingSpan

from engine.tracing import otlp, wire
from engine.tracing.exporter import Records, install

RESOURCE = Resource.create({"service.name": "otlp-test", "deployment.environment": "test"})
JOB = uuid.UUID("6a1f0c8e-3b1d-4c1e-9a52-2f0c1d9e8b7a")
RUN = uuid.UUID("0c3e5b1a-77d2-4f0e-8b61-1d2c3e4f5a6b")


def attempt(
    outcome: str, *, parent: int = 0x51, detail: str = "", fanout_key: str = ""
) -> wire.Record:
    return (
        wire.ATTEMPT,
        0xABC0,
        0x1000 + len(outcome) + len(detail),
        parent,
        1_000,
        2_000,
        "costing",
        "post",
        JOB.int,
        RUN.int,
        2,
        "worker-1/0",
        fanout_key,
        outcome,
        detail,
        (
            ("reclaimed", 1_100, {"from": "dead-worker"}),
            # an event's attributes: what AttemptSpan.event keeps (str, bool, int, float)
            (
                "lease_lost",
                1_900,
                {"reason": "lease expired", "late_ms": 12, "late_s": 0.012, "renewed": False},
            ),
            ("heartbeat", 1_950, {"drift_ms": -3, "ok": True, "worker": ""}),
        ),
    )


def sdk_records() -> list[wire.Record]:
    """Spans of the SDK's own (a submit's, a step's own), as the forwarding processor sends
    them: every attribute type, events, links, each status, a remote parent."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("erp.api", "2.1")
    other = provider.get_tracer("engine-test")
    remote = SpanContext(0xFEED, 0xBEEF, is_remote=True, trace_flags=TraceFlags(1))
    with tracer.start_as_current_span(
        "submit costing",
        kind=SpanKind.PRODUCER,
        attributes={
            "engine.flow": "costing",
            "count": 3,
            "ratio": 0.25,
            "flag": True,
            "stores": ["S01", "S02"],
            "sizes": [1, 2],
        },
        links=[Link(remote, {"why": "batch"})],
    ) as span:
        span.add_event("queued", {"at": "outbox", "n": 2})
        span.set_status(Status(StatusCode.OK, "ignored"))
        with other.start_as_current_span("inner") as inner:
            inner.set_status(Status(StatusCode.ERROR, "boom"))
    with tracer.start_as_current_span(
        "remote child", context=set_span_in_context(NonRecordingSpan(remote))
    ):
        pass
    provider.shutdown()
    return [wire.wire_of(s) for s in exporter.get_finished_spans()]


def every_kind() -> list[wire.Record]:
    return [
        attempt("done"),
        attempt("fenced", fanout_key="store:S01"),
        attempt("retried", detail="ValueError: store S01 has no price for 4711"),
        attempt("dead"),  # an error without a detail: the outcome is its message
        attempt("released", parent=0),  # no submit's trace: a root
        (wire.STATEMENT, 0xABC0, 0x2001, 0x1004, 1_200, 1_300, "step_checkpoint", None, None),
        (wire.STATEMENT, 0xABC0, 0x2002, 0x1004, 1_300, 1_400, "SELECT", "SELECT 1", None),
        (
            wire.STATEMENT,
            0xABC0,
            0x2003,
            0x1004,
            1_400,
            1_500,
            "EXECUTE",
            "EXECUTE a(1); EXECUTE b(2)",
            "SerializationFailure",
        ),
        (wire.STATEMENT, 0xABC0, 0x2004, 0x1004, 1_500, 1_600, "UPDATE", "x" * 3000, None),
        (wire.CHUNK, 0xABC0, 0x3001, 0x1004, 1_600, 1_700, 2, 41),
        *sdk_records(),
    ]


def test_request__equals_the_sdks_encoding_of_the_same_spans() -> None:
    records = every_kind()
    sdk = encode_spans([wire.readable(r, RESOURCE) for r in records])
    ours = otlp.request(records, RESOURCE)
    # message for message (the spans by scope in the SDK's order), not only the bytes' size
    assert [
        (scope.scope.name, [s.name for s in scope.spans])
        for scope in ours.resource_spans[0].scope_spans
    ] == [
        (scope.scope.name, [s.name for s in scope.spans])
        for scope in sdk.resource_spans[0].scope_spans
    ]
    for mine, theirs in zip(
        ours.resource_spans[0].scope_spans, sdk.resource_spans[0].scope_spans, strict=True
    ):
        for a, b in zip(mine.spans, theirs.spans, strict=True):
            assert a == b, f"{a.name}:\n{a}\nagainst the SDK's\n{b}"
    assert ours == sdk


def test_request__of_no_records_is_the_sdks_empty_request() -> None:
    assert otlp.request([], RESOURCE) == encode_spans([])


def test_records__read_as_the_sdks_spans_once_and_only_when_read() -> None:
    records = every_kind()
    batch = Records(records, RESOURCE)
    assert len(batch) == len(records)
    assert batch._spans is None  # the OTLP/HTTP exporter never makes them
    first = list(batch)
    assert [s.name for s in first] == [wire.readable(r, RESOURCE).name for r in records]
    assert batch[0] is first[0]


def test_install__the_http_exporter_takes_a_batchs_request_and_encodes_other_spans_as_before() -> (
    None
):
    sdk_encode = trace_exporter.encode_spans
    try:
        assert install()
        hooked = trace_exporter.encode_spans
        assert hooked is not sdk_encode
        assert install()  # twice: the same hook, not one around the other
        assert trace_exporter.encode_spans is hooked
        records = every_kind()
        assert hooked(Records(records, RESOURCE)) == otlp.request(records, RESOURCE)
        spans = [wire.readable(r, RESOURCE) for r in records]
        assert hooked(spans) == sdk_encode(spans)
    finally:
        trace_exporter.encode_spans = sdk_encode
