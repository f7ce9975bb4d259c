"""The span exporter process: ``python -m engine.tracing.exporter``, started by a traced process.

It makes the SDK's exporters from the ``OTEL_*`` settings it inherits
(:func:`engine.tracing.setup.exporters`) and its resource as
``Resource.create`` does, says ``ready`` on stdout, then reads batches of
records (:mod:`.wire`) on stdin and exports each batch as it comes, on
the parent's behalf (:mod:`.export`): the OTLP/HTTP exporter sends the
request :mod:`.otlp` makes of the records, any other exporter the SDK's
spans made of them. A batch is a :class:`Records` sequence, which makes each
``ReadableSpan`` only when one is read (the console exporter, the gRPC one);
:func:`install` lets the OTLP/HTTP exporter, whose retries, headers,
compression and size limit stay its own, take the request :mod:`.otlp`
writes instead of encoding the spans again (where the SDK's exporter no
longer encodes through the name it replaces, nothing is replaced and the
SDK encodes as before). The end of stdin (the parent closed it, or died)
ends it, once what it read is exported. It ignores SIGINT and SIGTERM: a stop
signal to the whole process group must not lose the spans its parent is
still sending it.
"""

from __future__ import annotations

import logging
import marshal
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import overload

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan

from engine.errors import ConfigError
from engine.tracing.export import READY, read_frame
from engine.tracing.otlp import request
from engine.tracing.setup import exporters
from engine.tracing.wire import Record, readable

__all__ = ["Records", "install", "main"]

log = logging.getLogger("engine.tracing.exporter")


class Records(Sequence[ReadableSpan]):
    """One batch of records, as a sequence of the SDK's spans made when read (once each)."""

    def __init__(self, records: list[Record], resource: Resource) -> None:
        self.records = records
        self.resource = resource
        self._spans: list[ReadableSpan] | None = None

    def _made(self) -> list[ReadableSpan]:
        if self._spans is None:
            self._spans = [readable(record, self.resource) for record in self.records]
        return self._spans

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> ReadableSpan: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ReadableSpan]: ...

    def __getitem__(self, index: int | slice) -> ReadableSpan | Sequence[ReadableSpan]:
        return self._made()[index]

    def __iter__(self) -> Iterator[ReadableSpan]:
        return iter(self._made())


def install() -> bool:
    """The SDK's OTLP/HTTP span exporter, once made, takes a :class:`Records` batch's request
    from :func:`request`; any other batch it encodes as before. ``False``: no such exporter
    was made (its module is not loaded), or its module no longer encodes through
    ``encode_spans`` and is left as it is."""
    trace_exporter = sys.modules.get("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    sdk_encode = getattr(trace_exporter, "encode_spans", None)
    if sdk_encode is None or getattr(sdk_encode, "engine_records", False):
        return sdk_encode is not None

    def encode_spans(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        if isinstance(spans, Records):
            return request(spans.records, spans.resource)
        encoded: ExportTraceServiceRequest = sdk_encode(spans)
        return encoded

    encode_spans.engine_records = True  # type: ignore[attr-defined]
    trace_exporter.encode_spans = encode_spans  # type: ignore[union-attr]
    return True


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        made = exporters(os.environ)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    install()  # an OTLP/HTTP exporter encodes a batch from its records
    resource = Resource.create()
    sys.stdout.buffer.write(READY)
    sys.stdout.buffer.flush()
    # nobody reads its stdout after that: anything printed goes where its errors go
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    source = sys.stdin.buffer
    while (frame := read_frame(source)) is not None:
        # its parent's pipe: what it reads is what the parent wrote
        spans = Records(marshal.loads(frame), resource)  # noqa: S302
        for exporter in made:
            try:
                exporter.export(spans)
            except Exception:
                log.exception("exporting %d spans failed", len(spans))
    for exporter in made:
        exporter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
