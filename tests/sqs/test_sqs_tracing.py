"""Over SQS (moto in process) a job's attempts join its submit's trace, as on PostgreSQL.

SQS carries only the step run's ids: each claim reads the submit's
``traceparent`` from the job row (migration 0033), so the context crosses
the outbox, the relay's publish and the queue without riding in a message.
"""

from __future__ import annotations

from typing import Any

import psycopg
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine import submit
from engine.config import Settings


def test_sqs_tracing__the_queue_carries_the_submits_context_to_each_attempt(
    settings: Settings,
    conn: psycopg.Connection[Any],
    transports: Any,
    spans: InMemorySpanExporter,
) -> None:
    fast = fast_settings(settings, concurrency=1)
    job = submit(
        "chain", {"n": 1}, settings=fast, registry=flows_registry(), publisher=transports()
    )
    with thread_worker(fast, transport=transports()):
        assert wait_job_ended(conn, job.job_id) == "done"

    finished = spans.get_finished_spans()
    (submitted,) = [s for s in finished if s.name == "submit chain"]
    assert submitted.context is not None
    attempts = [
        s
        for s in finished
        if s.name.startswith("chain.")
        and (s.attributes or {}).get("engine.job.id") == str(job.job_id)
    ]
    assert sorted(s.name for s in attempts) == ["chain.a", "chain.b", "chain.c"]
    for span in attempts:
        assert span.context is not None and span.parent is not None
        assert span.context.trace_id == submitted.context.trace_id
        assert span.parent.span_id == submitted.context.span_id
        assert (span.attributes or {})["engine.fence"] == "accepted"
