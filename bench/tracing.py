"""Tracing's cost (issue 38): no-op steps/s with tracing off, then on with a local collector.

Off is the default (no ``OTEL_*`` settings): the engine imports nothing of
OpenTelemetry. On, the workers export over OTLP/HTTP (``OTEL_TRACES_EXPORTER=otlp``)
to an in-process receiver on 127.0.0.1 that decodes and counts every span it
is sent (a collector that keeps nothing), and the bench's own submits are
traced into it too, so each attempt is a child of its submit as in
production. Runs alternate off and on, each round starting with the next
variant; the medians and their ratios are printed, and the median of each
round's own ratio to that round's off (never asserted: the issue's figure
is "at most 3% off"), with the CPU each variant's worker
used per step, its exporter process's and the database backends' (less bent
by the machine's other load than steps/s: on this shared machine back-to-back
runs of one variant differ by up to 25% in steps/s), and their sum against
off's.

    BENCH_TRACING_JOBS=3000      noop jobs per run (3 steps each: 9,000 steps, ~4 s)
    BENCH_TRACING_ROUNDS=5       rounds of each variant
    BENCH_TRACING_CONCURRENCY=2  slots of the one worker process
    BENCH_TRACING_ATTEMPTS=5000  the tracing work of one attempt, timed in-process without
                                 the database (off, sampled out, recorded), first
    BENCH_TRACING_RATIO=0.1      also on with OTEL_TRACES_SAMPLER=parentbased_traceidratio
                                 at this ratio (what a busy fleet would run); 0 skips it
"""

from __future__ import annotations

import marshal
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from bench import throughput
from bench.common import emit, env_float, env_int, log
from engine import tracing
from engine.store import queries
from engine.store.rows import Claimed
from engine.tracing import NO_TRACES, Traces, otlp, statements
from engine.tracing.export import ProcessSink
from engine.tracing.wire import readable


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1 that counts the spans it is sent."""

    def __init__(self) -> None:
        self.spans = 0
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest.FromString(body)
                n = sum(
                    len(scope.spans)
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                )
                with collector._lock:
                    collector.spans += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def traced_submits(endpoint: str, ratio: float | None) -> Iterator[None]:
    """The bench's own submits traced into the collector (a submitting ERP API's), sampled
    at ``ratio`` (``None``: all)."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "bench-submit"}),
        sampler=None if ratio is None else ParentBased(TraceIdRatioBased(ratio)),
    )
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    )
    tracing.use(provider)
    try:
        yield
    finally:
        tracing.use(None)
        provider.shutdown()


def _claimed(traceparent: str | None) -> Claimed:
    return Claimed(
        id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        flow="noop",
        params={},
        step="a",
        fanout_key="",
        fingerprint="",
        attempt=1,
        max_attempts=3,
        token=uuid.uuid4(),
        lease_expires_at=datetime.now(UTC),
        item=None,
        reclaimed_from=None,
        traceparent=traceparent,
    )


def per_attempt_us(traces: Traces, traceparent: str | None, n: int, hooked: bool) -> float:
    """Microseconds of tracing work per attempt, without the database: the runner's calls for
    one attempt (made, current, its call, two engine statements, ended); ``hooked``: the
    statements through the psycopg hook (installed only when tracing is on)."""

    def bare(cursor: Any, query: str) -> None:
        return None

    execute = statements._traced(bare) if hooked else bare
    query = queries.load("step_runs")["step_claim_if_available"]
    claims = [_claimed(traceparent) for _ in range(n)]
    started = time.perf_counter()
    for claimed in claims:
        trace = traces.attempt(claimed, "bench")
        with trace.current():
            with trace.body():
                pass
            execute(None, query)
            execute(None, query)
        trace.ended("done")
    return (time.perf_counter() - started) / n * 1e6


def overhead(n: int) -> None:
    """The tracing work one attempt costs in a worker's process, off, sampled out and
    recorded: its spans queued and marshalled for the exporter process, which is not run."""
    base = per_attempt_us(NO_TRACES, None, n, hooked=False)
    emit("tracing", "work_per_attempt_off", base, "us")
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    discard = _Discard()
    sink = ProcessSink(discard, max_queue=n * 4, delay_s=0.2)
    sampled_out = "00-" + "1" * 32 + "-" + "2" * 16 + "-00"
    recorded = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    tracing.use(provider, sink)
    try:
        out = per_attempt_us(tracing.traces(), sampled_out, n, hooked=True)
        emit("tracing", "work_per_attempt_sampled_out", out, "us")
        on = per_attempt_us(tracing.traces(), recorded, n, hooked=True)
        emit("tracing", "work_per_attempt_recorded", on, "us")
    finally:
        tracing.use(None)
        sink.close()
        provider.shutdown()
    log(
        f"tracing work per attempt (no database, {n} attempts): off {base:.1f} us, "
        f"sampled out {out:.1f} us, recorded with 3 spans {on:.1f} us "
        f"(its spans marshalled in {discard.sent} batches for the exporter process)"
    )
    encoding(discard.batches, n)


def encoding(batches: list[bytes], attempts: int) -> None:
    """The exporter process's work per attempt to make the OTLP request of what it was sent:
    the SDK's spans made of the records and encoded by the SDK, against the request made of
    the records themselves (engine.tracing.otlp, what it does)."""
    resource = Resource.create({"service.name": "bench-worker"})
    records = [marshal.loads(data) for data in batches]
    started = time.perf_counter()
    for batch in records:
        encode_spans([readable(r, resource) for r in batch]).SerializePartialToString()
    sdk = (time.perf_counter() - started) / attempts * 1e6
    started = time.perf_counter()
    for batch in records:
        otlp.request(batch, resource).SerializePartialToString()
    direct = (time.perf_counter() - started) / attempts * 1e6
    emit("tracing", "exporter_encode_per_attempt_sdk_spans", sdk, "us")
    emit("tracing", "exporter_encode_per_attempt_records", direct, "us")
    log(
        f"the exporter process's OTLP encoding per attempt (3 spans): from the SDK's spans "
        f"{sdk:.1f} us, from the records {direct:.1f} us ({sdk / direct:.1f}x less)"
    )


class _Discard:
    """An exporter process that is not there: each batch is marshalled, then kept."""

    def __init__(self) -> None:
        self.sent = 0
        self.batches: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent += 1
        self.batches.append(data)

    def close(self, timeout_s: float) -> None:
        return None


def run() -> None:
    overhead(env_int("BENCH_TRACING_ATTEMPTS", 5000))
    jobs = env_int("BENCH_TRACING_JOBS", 3000)
    rounds = max(1, env_int("BENCH_TRACING_ROUNDS", 5))
    concurrency = env_int("BENCH_TRACING_CONCURRENCY", 2)
    ratio = env_float("BENCH_TRACING_RATIO", 0.1)
    timeout_s = env_float("BENCH_TIMEOUT_S", 150)
    rates: dict[str, list[float]] = {}
    # each round's rate of a variant over that round's off: a slow minute of the shared
    # machine slows both sides of a ratio, where it would move one median and not the other
    paired: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # the worker's CPU per step (its exporter's apart)
    child_cpu: dict[str, list[float]] = {}
    all_cpu: dict[str, list[float]] = {}
    with Collector() as collector:
        traced = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "bench-worker",
        }
        variants: list[tuple[str, dict[str, str], float | None]] = [
            ("off", {"OTEL_TRACES_EXPORTER": "none"}, None),
            ("on", traced, None),
        ]
        if ratio > 0:
            sampled = {
                **traced,
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": str(ratio),
            }
            variants.append((f"on_sampled_{ratio:g}", sampled, ratio))
        for n in range(1, rounds + 1):
            # each round starts with the next variant: none always runs first (or last)
            # in a round, when the machine's other load swings from one minute to the next
            shift = (n - 1) % len(variants)
            ordered = variants[shift:] + variants[:shift]
            names = ", ".join(v for v, _, _ in ordered)
            log(f"tracing: round {n} of {rounds} ({jobs} jobs each: {names})")
            this_round: dict[str, float] = {}
            for variant, env, sampled_at in ordered:
                name = f"tracing/{variant}"
                if variant == "off":
                    result = throughput.run(jobs, 1, concurrency, timeout_s, env=env, name=name)
                else:
                    with traced_submits(collector.endpoint, sampled_at):
                        result = throughput.run(jobs, 1, concurrency, timeout_s, env=env, name=name)
                if result.steps_per_s is not None:
                    rates.setdefault(variant, []).append(result.steps_per_s)
                    this_round[variant] = result.steps_per_s
                if result.cpu_us_per_step is not None and result.child_cpu_us_per_step is not None:
                    cpu.setdefault(variant, []).append(result.cpu_us_per_step)
                    child_cpu.setdefault(variant, []).append(result.child_cpu_us_per_step)
                    if result.db_cpu_us_per_step is not None:
                        # the CPU a step cost everything it ran on: the worker, its exporter
                        # and the database's backends (the machine's other load left out)
                        total = (
                            result.cpu_us_per_step
                            + result.child_cpu_us_per_step
                            + result.db_cpu_us_per_step
                        )
                        all_cpu.setdefault(variant, []).append(total)
            if "off" in this_round:
                for variant, rate in this_round.items():
                    if variant != "off":
                        paired.setdefault(variant, []).append(rate / this_round["off"])
        spans = collector.spans
    emit("tracing", "spans_received", spans, "spans")
    off = rates.get("off")
    for variant, values in rates.items():
        median = statistics.median(values)
        emit("tracing", f"{variant}_steps_per_s_median", median, "steps/s")
        if off and variant != "off":
            ratio_off = median / statistics.median(off)
            emit("tracing", f"{variant}_over_off", ratio_off, "x")
            log(
                f"tracing {variant}: {median:.0f} steps/s against {statistics.median(off):.0f} "
                f"off: {ratio_off:.3f}x ({(1 - ratio_off) * 100:+.1f}% off; the issue's "
                "figure: at most 3%)"
            )
    for variant, ratios in paired.items():
        median = statistics.median(ratios)
        emit("tracing", f"{variant}_over_off_paired_median", median, "x")
        log(
            f"tracing {variant}: the median of the rounds' own ratios {median:.3f}x "
            f"({(1 - median) * 100:+.1f}% off; each round: "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + ")"
        )
    off_cpu = statistics.median(cpu["off"]) if cpu.get("off") else None
    for variant, values in cpu.items():
        median = statistics.median(values)
        exporter = statistics.median(child_cpu[variant])
        emit("tracing", f"{variant}_worker_cpu_per_step_median", median, "us")
        emit("tracing", f"{variant}_exporter_cpu_per_step_median", exporter, "us")
        if off_cpu and variant != "off":
            emit("tracing", f"{variant}_worker_cpu_over_off", median / off_cpu, "x")
            log(
                f"tracing {variant}: the worker's CPU per step {median:.0f} us against "
                f"{off_cpu:.0f} us off ({median / off_cpu:.3f}x); its exporter process "
                f"{exporter:.0f} us per step"
            )
    off_all = statistics.median(all_cpu["off"]) if all_cpu.get("off") else None
    for variant, values in all_cpu.items():
        median = statistics.median(values)
        emit("tracing", f"{variant}_all_cpu_per_step_median", median, "us")
        if off_all and variant != "off":
            emit("tracing", f"{variant}_all_cpu_over_off", median / off_all, "x")
            log(
                f"tracing {variant}: a step's CPU, worker + exporter + database backends, "
                f"{median:.0f} us against {off_all:.0f} us off ({median / off_all:.3f}x, "
                f"{(median / off_all - 1) * 100:+.1f}%)"
            )
    log(f"tracing: the local collector received {spans} spans")
