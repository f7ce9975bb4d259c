"""The span exporter process: ``python -m engine.tracing.exporter``, started by a traced process.

It makes the SDK's exporters from the ``OTEL_*`` settings it inherits
(:func:`engine.tracing.setup.exporters`) and its resource as
``Resource.create`` does, says ``ready`` on stdout, then reads batches of
records (:mod:`.wire`) on stdin and exports each batch as it comes, on
the parent's behalf (:mod:`.export`): the OTLP/HTTP exporter sends the
request :mod:`.otlp` makes of the records, any other exporter the SDK's
spans made of them. The end of stdin (the parent closed
it, or died) ends it, once what it read is exported. It ignores SIGINT and
SIGTERM: a stop signal to the whole process group must not lose the spans
its parent is still sending it.
"""

from __future__ import annotations

import logging
import marshal
import os
import signal
import sys

from opentelemetry.sdk.resources import Resource

from engine.errors import ConfigError
from engine.tracing.export import READY, read_frame
from engine.tracing.otlp import Records, install
from engine.tracing.setup import exporters

log = logging.getLogger("engine.tracing.exporter")


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
