"""Traces from submit to checkpoint: spans collected with the SDK's in-memory exporter.

The tracer is switched on in-process with :func:`engine.tracing.use` (what
``OTEL_TRACES_EXPORTER`` does for a worker or ``engine submit``); workers run
in threads on the PostgreSQL transport. ``tests/sqs/test_sqs_tracing.py``
does the same over SQS; the off-by-default and ``OTEL_*`` switches are
checked in subprocesses here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
from harness import (
    ROOT,
    SUPPORT,
    engine_cli,
    fast_settings,
    flows_registry,
    run_of,
    thread_worker,
    wait_job_ended,
    wait_until,
    worker_env,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine import submit, tracing
from engine.config import Settings
from engine.flow.registry import Registry
from engine.reports.context import build_run_report
from engine.reports.render import render_run_html
from engine.runner import claim
from engine.store.read import sqlalchemy_engine
from engine.transports.message import StepMessage


def attempts_of(exporter: InMemorySpanExporter, job_id: uuid.UUID) -> list[ReadableSpan]:
    return sorted(
        (
            s
            for s in exporter.get_finished_spans()
            if (s.attributes or {}).get("engine.job.id") == str(job_id)
            and s.name.startswith("chain.")
        ),
        key=lambda s: s.start_time or 0,
    )


def submit_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "submit chain"]
    return span


def children_of(exporter: InMemorySpanExporter, span: ReadableSpan) -> list[ReadableSpan]:
    assert span.context is not None
    return [
        s
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == span.context.span_id
    ]


def test_tracing__a_jobs_attempts_are_spans_linked_to_its_submit(
    settings: Settings, conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    fast = fast_settings(settings, concurrency=1)
    job = submit("chain", {"n": 1}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"

    submitted = submit_span(spans)
    assert submitted.context is not None
    assert (submitted.attributes or {})["engine.job.id"] == str(job.job_id)
    # the submit's context is on the job row, and its statements are its children
    row = conn.execute("SELECT traceparent FROM engine_jobs WHERE id = %s", (job.job_id,))
    parent = row.fetchone()["traceparent"]  # type: ignore[index]
    assert tracing.trace_id(parent) == format(submitted.context.trace_id, "032x")
    statements = {s.name for s in children_of(spans, submitted)}
    assert "job_insert_if_absent" in statements, statements

    attempts = attempts_of(spans, job.job_id)
    assert [s.name for s in attempts] == ["chain.a", "chain.b", "chain.c"]
    for span in attempts:
        attrs = span.attributes or {}
        assert attrs["engine.flow"] == "chain"
        assert attrs["engine.attempt"] == 1
        assert attrs["engine.fence"] == "accepted"
        assert attrs["engine.outcome"] == "done"
        assert span.context is not None and span.parent is not None
        # one trace: a child of the submit's span, and linked to it
        assert span.context.trace_id == submitted.context.trace_id
        assert span.parent.span_id == submitted.context.span_id
        assert [link.context.span_id for link in span.links] == [submitted.context.span_id]
        children = children_of(spans, span)
        # the step's own statements (its effect through ctx.conn): one chunk's span
        chunks = [c for c in children if c.name.startswith("chunk")]
        assert len(chunks) == 1 and (chunks[0].attributes or {})["db.statements"] >= 1
        # the engine's statements are child spans of their own, named by their query
        engine = [c.name for c in children if not c.name.startswith("chunk")]
        assert engine
    # the run report shows the trace id
    report = build_run_report(sqlalchemy_engine(fast), job.job_id, flows_registry())
    assert report.trace_id == format(submitted.context.trace_id, "032x")
    assert report.trace_id in render_run_html(report)


def test_tracing__a_reclaimed_attempt_records_the_reclaim(
    settings: Settings, conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    fast = fast_settings(settings, concurrency=1)
    job = submit("chain", {"n": 2}, settings=fast, registry=flows_registry())
    first = run_of(conn, job.job_id, "a")
    # a worker claimed step a and died: its lease lapses (time moved by ageing the row)
    message = StepMessage(job_id=job.job_id, step_run_id=first["id"])
    dead = claim(conn, message, "dead-worker", 30.0, flows_registry().runnable())
    assert not isinstance(dead, str) and getattr(dead, "attempt", None) == 1
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        (first["id"],),
    )
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"

    (a,) = [s for s in attempts_of(spans, job.job_id) if s.name == "chain.a"]
    assert (a.attributes or {})["engine.attempt"] == 2
    reclaims = [e for e in a.events if e.name == "reclaimed"]
    assert [dict(e.attributes or {}) for e in reclaims] == [{"from": "dead-worker"}]
    assert a.context is not None
    assert a.context.trace_id == submit_span(spans).context.trace_id  # type: ignore[union-attr]


def test_tracing__a_lost_lease_and_its_reclaim_are_span_events(
    settings: Settings, conn: psycopg.Connection[Any], spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    fast = fast_settings(settings, concurrency=1, heartbeat_s=0.2)
    hold = str(tmp_path / "hold")
    job = submit("chain", {"n": 4, "hold_file": hold}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        wait_until(lambda: Path(hold + ".started").exists(), what="step b held")
        # its lease lapsed and was taken meanwhile (the token changed): the heartbeat
        # finds it lost, the step stops at its next ctx.check(), the sweeper has it
        # announced again and the slot reclaims it for attempt 2 (not held)
        conn.execute(
            "UPDATE engine_step_runs SET lease_token = gen_random_uuid(), "
            "lease_expires_at = clock_timestamp() - interval '1 s' "
            "WHERE job_id = %s AND step = 'b'",
            (job.job_id,),
        )
        assert wait_job_ended(conn, job.job_id) == "done"

    first, second = [s for s in attempts_of(spans, job.job_id) if s.name == "chain.b"]
    assert (first.attributes or {})["engine.fence"] == "refused"
    assert "lease_lost" in [e.name for e in first.events]
    assert "fenced" in [e.name for e in first.events]
    assert (second.attributes or {})["engine.attempt"] == 2
    assert (second.attributes or {})["engine.fence"] == "accepted"
    assert [e.name for e in second.events if e.name == "reclaimed"] == ["reclaimed"]
    # the held step checked its lease every 20 ms: still one chunk (one statement)
    chunks = [c for c in children_of(spans, first) if c.name.startswith("chunk")]
    assert len(chunks) == 1


def _python(settings: Settings, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in worker_env(settings).items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def result_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return dict(json.loads(line.removeprefix("RESULT ")))


_RUN_A_JOB = f"""
import json, sys
sys.path[:0] = [{str(SUPPORT)!r}, {str(ROOT)!r}]
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended
from engine import store, submit
from engine.config import Settings
from engine.store import db
settings = fast_settings(Settings(), concurrency=1)
job = submit("chain", {{"n": 3}}, settings=settings, registry=flows_registry())
with db.connect(settings, autocommit=True) as conn, thread_worker(settings):
    status = wait_job_ended(conn, job.job_id)
    row = conn.execute("SELECT traceparent FROM engine_jobs WHERE id = %s", (job.job_id,))
    parent = row.fetchone()["traceparent"]
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print("RESULT", json.dumps({{"status": status, "traceparent": parent, "loaded": loaded}}))
"""


def test_tracing__off_by_default_nothing_is_imported_and_no_context_is_stored(
    settings: Settings,
) -> None:
    done = _python(settings, _RUN_A_JOB)
    assert done.returncode == 0, done.stderr[-3000:]
    result = result_of(done)
    assert result == {"status": "done", "traceparent": None, "loaded": []}


def test_tracing__otel_settings_switch_it_on_for_a_process(settings: Settings) -> None:
    # the console exporter, as OTEL_TRACES_EXPORTER=console asks; its spans on stdout
    done = _python(
        settings, _RUN_A_JOB, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="erp-test"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = result_of(done)
    assert result["status"] == "done" and result["loaded"]
    trace_id = tracing.trace_id(result["traceparent"])
    assert trace_id is not None
    # on stderr: a command's --json answer on stdout stays machine-readable
    assert '"name": "submit chain"' in done.stderr and '"name": "chain.c"' in done.stderr
    assert f'"trace_id": "0x{trace_id}"' in done.stderr
    assert '"service.name": "erp-test"' in done.stderr


def test_tracing__engine_submit_traces_with_the_otel_settings(settings: Settings) -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "console",
        "ENGINE_FLOW_MODULES": "testflows",
        "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT)]),
    }
    done = engine_cli(settings, "submit", "chain", "--n", "5", "--json", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)  # nothing but its answer on stdout
    with psycopg.connect(settings.database_url.get_secret_value()) as conn:  # type: ignore[union-attr]
        row = conn.execute(
            "SELECT traceparent FROM engine_jobs WHERE id = %s", (answer["job_id"],)
        ).fetchone()
    assert row is not None and row[0] is not None
    assert f'"trace_id": "0x{tracing.trace_id(row[0])}"' in done.stderr
    assert '"name": "submit chain"' in done.stderr


def test_tracing__an_exporter_not_known_is_named_with_the_valid_ones(settings: Settings) -> None:
    done = _python(settings, _RUN_A_JOB, OTEL_TRACES_EXPORTER="zipkin")
    assert done.returncode != 0
    assert "OTEL_TRACES_EXPORTER='zipkin'" in done.stderr and "otlp, console, none" in done.stderr


def test_tracing__the_switch_reads_the_settings_as_the_sdk_does() -> None:
    assert not tracing.switch.wanted({})
    assert not tracing.switch.wanted({"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.switch.wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing.switch.wanted({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})
    assert tracing.trace_id("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01") == "ab" * 16
    assert tracing.trace_id(None) is None


def test_tracing__a_child_job_submitted_by_a_step_joins_the_attempts_trace(
    settings: Settings, conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    modules = ["testflows", "childflows"]
    fast = fast_settings(settings, concurrency=2, flow_modules=modules)
    registry = Registry.load(modules)
    job = submit("brood", {"children": 1}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"

    finished = spans.get_finished_spans()
    (root,) = [s for s in finished if s.name == "submit brood"]
    assert root.context is not None
    spawns = [s for s in finished if s.name == "brood.spawn"]
    assert spawns and all((s.attributes or {})["engine.job.id"] == str(job.job_id) for s in spawns)
    # the kid was submitted by spawn's own code: its job row carries that attempt's context,
    # so the kid's attempt is a child of spawn's span, in the brood's trace
    (kid_work,) = [s for s in finished if s.name == "kid.work"]
    assert kid_work.context is not None and kid_work.parent is not None
    assert kid_work.context.trace_id == root.context.trace_id
    assert kid_work.parent.span_id in {s.context.span_id for s in spawns if s.context}
