"""Where finished spans go: a separate exporter process, or a provider of the caller's.

Switched on by the ``OTEL_*`` settings, a process hands its finished spans
(records, :mod:`.wire`) to :class:`ProcessSink`: a bounded queue that a
thread drains in batches, one marshalled write each, into the stdin of a child
process (``python -m engine.tracing.exporter``) that makes the SDK's spans
again and exports them with the SDK's exporters as the settings say. The
OTLP encoding and the HTTP calls, which a ``BatchSpanProcessor`` would run
on a thread competing with the steps for the interpreter, run on another
core. When the queue is full (the exporter fell behind) a span is dropped
and counted, as the ``BatchSpanProcessor`` does; :meth:`ProcessSink.close`
(at exit, or when tracing is switched again) sends what is queued, closes
the pipe and waits for the exporter to export it. A worker killed outright
loses what it had queued, and the exporter still exports what it received.

A provider of the caller's (the tests' in-memory exporter, an ERP API that
traces with its own SDK) gets each span in-process instead, through its
span processors (:class:`ProviderSink`).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import marshal
import os
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Protocol

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from engine.errors import ConfigError
from engine.tracing.wire import Record, readable, wire_of

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = [
    "ExporterProcess",
    "ForwardingProcessor",
    "Pipe",
    "ProcessSink",
    "ProviderSink",
    "Sink",
    "read_frame",
]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
READY = b"ready\n"


class Sink(Protocol):
    """Takes finished spans (records)."""

    def put(self, span: Record) -> None: ...

    def close(self) -> None: ...


class ProviderSink:
    """Each span to ``provider``'s span processors, in-process (a provider of the caller's)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        # the SDK's own spans call this same processor at their end (Span.end)
        self._processor = provider._active_span_processor
        self._resource = provider.resource

    def put(self, span: Record) -> None:
        self._processor.on_end(readable(span, self._resource))

    def close(self) -> None:
        return None


class Pipe(Protocol):
    """Where a :class:`ProcessSink` sends its batches (an :class:`ExporterProcess`)."""

    def send(self, data: bytes) -> None: ...

    def close(self, timeout_s: float) -> None: ...


def read_frame(source: IO[bytes]) -> bytes | None:
    """One frame of the pipe (its length, then its bytes); ``None`` at its end."""
    header = source.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = source.read(size)
    return body if len(body) == size else None


class ExporterProcess:
    """The child process that exports the spans it reads on its stdin (:mod:`.exporter`)."""

    def __init__(self, env: Mapping[str, str] | None = None, start_timeout_s: float = 60.0) -> None:
        # its settings are the parent's (``env``: the parent's environment by default)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine.tracing.exporter"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=None if env is None else dict(env),
            close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._out = self.proc.stdin.fileno()
        # up and its exporters made before the first span: a worker's first steps do not
        # share the machine with its import
        ready, _, _ = select.select([self.proc.stdout], [], [], start_timeout_s)
        line = self.proc.stdout.readline() if ready else b""
        self.proc.stdout.close()
        if line != READY:
            self.proc.kill()
            code = self.proc.wait()
            raise ConfigError(
                f"the span exporter process did not start (exit {code}); its error is above"
            )

    def send(self, data: bytes) -> None:
        """One frame to the exporter (blocks while its pipe is full; the GIL is released)."""
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self._out, view) :]

    def close(self, timeout_s: float) -> None:
        """The pipe closed: the exporter exports what it read, then exits."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):  # the exporter died: nothing more to send
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("the span exporter process did not finish in %g s: killed", timeout_s)
            self.proc.kill()
            self.proc.wait()


class ProcessSink:
    """Spans queued (bounded), sent in batches to an :class:`ExporterProcess` by a thread."""

    def __init__(
        self,
        process: Pipe,
        *,
        max_queue: int = 2048,
        batch: int = 512,
        delay_s: float = 5.0,
        close_timeout_s: float = 30.0,
    ) -> None:
        self.process = process
        self.max_queue = max_queue
        self.batch = batch
        self.delay_s = delay_s
        self.close_timeout_s = close_timeout_s
        # appended by the slots' threads, taken by the sender's (a deque: no lock for either)
        self._queue: collections.deque[Record] = collections.deque()
        self.dropped = 0
        self._broken = False  # the exporter process is gone
        self._lock = threading.Lock()  # the drop count, and close()
        self._wake = threading.Event()
        self._closing = False
        self._closed = False
        self._thread = threading.Thread(target=self._send_loop, name="span-export", daemon=True)
        self._thread.start()

    def put(self, span: Record) -> None:
        queue = self._queue
        if len(queue) >= self.max_queue or self._broken:
            self._drop(1)
            return
        queue.append(span)
        if len(queue) >= self.batch and not self._wake.is_set():
            self._wake.set()

    def _drop(self, n: int) -> None:
        with self._lock:
            first = not self.dropped
            self.dropped += n
        if first and not self._broken:
            log.warning(
                "span queue full (%d): the exporter process is behind; spans are dropped "
                "and counted until it catches up",
                self.max_queue,
            )

    def _send_loop(self) -> None:
        queue = self._queue
        while True:
            self._wake.wait(self.delay_s)
            self._wake.clear()
            closing = self._closing
            while queue:
                spans = [queue.popleft() for _ in range(min(len(queue), self.batch))]
                try:
                    self.process.send(marshal.dumps(spans))
                except OSError:
                    # the exporter is gone (killed): this batch and what follows are dropped
                    self._broken = True
                    log.warning("the span exporter process is gone: spans are dropped")
                    self._drop(len(spans))
                    return
            if closing:
                return

    def flush(self) -> None:
        """What is queued now, sent soon (not waited for)."""
        self._wake.set()

    def close(self) -> None:
        """What is queued sent, the pipe closed, the exporter process waited for."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing = True
        self._wake.set()
        self._thread.join(self.close_timeout_s)
        if left := len(self._queue):
            self._queue.clear()
            self._drop(left)
        self.process.close(self.close_timeout_s)
        if self.dropped:
            log.warning("%d spans were dropped on their way to the exporter", self.dropped)


class ForwardingProcessor(SpanProcessor):
    """The SDK's spans (a submit's, a step's own) into a :class:`Sink` at their end: the
    record made, nothing more."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self.sink.put(wire_of(span))

    def shutdown(self) -> None:
        self.sink.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
