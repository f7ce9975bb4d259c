"""Spans exported from a separate process (engine.tracing.export): what the worker hands over
arrives, nothing queued is lost on a clean shutdown, a full queue drops and counts.

The exporter process is the real one (``python -m engine.tracing.exporter``),
exporting over OTLP/HTTP to a receiver on 127.0.0.1 in this test that
decodes what it is sent.
"""

from __future__ import annotations

import marshal
import os
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.sdk.trace import TracerProvider

from engine.errors import ConfigError
from engine.tracing import wire
from engine.tracing.export import ExporterProcess, ForwardingProcessor, ProcessSink


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 keeping every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[OtlpSpan] = []
        self.services: set[str] = set()
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for attribute in resource.resource.attributes:
                        if attribute.key == "service.name":
                            received.services.add(attribute.value.string_value)
                    for scope in resource.scope_spans:
                        received.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.server.server_address[1]}",
            "OTEL_SERVICE_NAME": "export-test",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    received = Receiver()
    try:
        yield received
    finally:
        received.close()


JOB = uuid.UUID("6a1f0c8e-3b1d-4c1e-9a52-2f0c1d9e8b7a")


def attempt_span(i: int) -> wire.Record:
    """An attempt's span as a worker records it: a child of and linked to its submit."""
    return (
        wire.ATTEMPT,
        0xABC0 + i,  # its trace (the submit's)
        0x1000 + i,  # its span
        0x51,  # the submit's span
        1_000 + i,
        2_000 + i,
        "chain",
        str(i),
        JOB.int,
        uuid.uuid4().int,
        2,
        "worker-1/0",
        "",
        "done",
        "",
        (("reclaimed", 1_500, {"from": "dead-worker"}),),
    )


def test_export__spans_queued_reach_the_collector_from_the_exporter_process(
    receiver: Receiver,
) -> None:
    # nothing is sent before close() (a long delay, a batch larger than the spans)
    sink = ProcessSink(ExporterProcess(receiver.env()), batch=512, delay_s=600)
    for i in range(300):
        sink.put(attempt_span(i))
    # the SDK's own spans (a submit's) go the same way, through the forwarding processor
    provider = TracerProvider()
    provider.add_span_processor(ForwardingProcessor(sink))
    provider.get_tracer("test").start_span("submit chain").end()
    sink.close()  # a clean shutdown: all of it sent, exported, the process ended

    assert sink.dropped == 0
    assert len(receiver.spans) == 301
    assert receiver.services == {"export-test"}
    by_name = {s.name: s for s in receiver.spans}
    assert "submit chain" in by_name
    one = by_name["chain.7"]
    assert one.name == "chain.7"
    assert int.from_bytes(one.trace_id, "big") == 0xABC0 + 7
    assert int.from_bytes(one.parent_span_id, "big") == 0x51
    assert one.kind == OtlpSpan.SpanKind.SPAN_KIND_CONSUMER
    assert [(e.name, e.attributes[0].value.string_value) for e in one.events] == [
        ("reclaimed", "dead-worker")
    ]
    assert [int.from_bytes(link.span_id, "big") for link in one.links] == [0x51]
    attributes = {a.key: a.value for a in one.attributes}
    assert attributes["engine.job.id"].string_value == str(JOB)
    assert attributes["engine.fence"].string_value == "accepted"
    assert attributes["engine.attempt"].int_value == 2
    assert sink.process.proc.returncode == 0  # type: ignore[attr-defined]


class HeldPipe:
    """A pipe whose first send waits until released (the exporter process fell behind)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.batches: list[int] = []

    def send(self, data: bytes) -> None:
        self.entered.set()
        assert self.release.wait(30)
        self.batches.append(len(marshal.loads(data)))

    def close(self, timeout_s: float) -> None:
        return None


def test_export__a_full_queue_drops_and_counts_then_sends_the_rest_on_close() -> None:
    pipe = HeldPipe()
    sink = ProcessSink(pipe, max_queue=4, batch=2, delay_s=600)
    sink.put(attempt_span(0))
    sink.put(attempt_span(1))  # a batch: the sender takes both, and is held sending them
    assert pipe.entered.wait(30)
    for i in range(2, 9):  # 4 fit in the queue, 3 do not
        sink.put(attempt_span(i))
    assert sink.dropped == 3
    pipe.release.set()
    sink.close()
    assert sum(pipe.batches) == 6 and sink.dropped == 3


def test_export__a_gone_exporter_process_drops_and_counts_without_blocking(
    receiver: Receiver,
) -> None:
    process = ExporterProcess(receiver.env())
    sink = ProcessSink(process, batch=2, delay_s=600)
    process.proc.kill()
    process.proc.wait()
    sink.put(attempt_span(0))
    sink.put(attempt_span(1))  # a batch: its write finds the pipe closed
    sink.close()
    assert sink.dropped == 2 and receiver.spans == []


def test_export__an_exporter_the_settings_cannot_make_is_refused_before_any_process() -> None:
    from engine.tracing import setup

    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        setup.check({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        setup.check({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(ConfigError, match="span exporter process did not start"):
        ExporterProcess({**os.environ, "OTEL_TRACES_EXPORTER": "zipkin"})
