"""Metrics: counted where outcomes are decided, no-ops until enabled, lazily imported."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from engine.config import Settings
from engine.errors import ConfigError
from engine.infra import metrics
from engine.store.rows import Claimed


def claimed(step: str, reclaimed_from: str | None = None) -> Claimed:
    return Claimed(
        id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        flow="chain",
        params={},
        step=step,
        fanout_key="",
        fingerprint="f",
        attempt=1,
        max_attempts=3,
        token=uuid.uuid4(),
        lease_expires_at=datetime.now(UTC),
        item=None,
        reclaimed_from=reclaimed_from,
    )


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    metrics.enable(registry)
    try:
        yield registry
    finally:
        metrics.disable()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_metrics__each_outcome_counted_once_under_its_flow_and_step(
    registry: CollectorRegistry,
) -> None:
    b = claimed("b", reclaimed_from="host:1/0")
    metrics.step_started(b)
    metrics.step_ended(b, "retried", 0.5)
    metrics.step_started(claimed("b"))
    metrics.step_ended(claimed("b"), "done", 1.5)
    metrics.step_ended(claimed("c"), "dead", 0.1)
    metrics.step_ended(claimed("c"), "fenced", 0.1)
    metrics.step_ended(claimed("e"), "rejected", 0.2)
    metrics.dead_lettered(None, "d")
    labels = {"flow": "chain", "step": "b"}
    assert value(registry, "engine_steps_started_total", **labels) == 2
    assert value(registry, "engine_steps_reclaimed_total", **labels) == 1
    assert value(registry, "engine_steps_failed_total", **labels) == 1
    assert value(registry, "engine_steps_retried_total", **labels) == 1
    assert value(registry, "engine_steps_succeeded_total", **labels) == 1
    assert value(registry, "engine_steps_failed_total", flow="chain", step="c") == 1
    assert value(registry, "engine_steps_dead_lettered_total", flow="chain", step="c") == 1
    assert value(registry, "engine_steps_fenced_total", flow="chain", step="c") == 1
    assert value(registry, "engine_steps_dead_lettered_total", flow="", step="d") == 1
    rejected = {"flow": "chain", "step": "e"}
    assert value(registry, "engine_steps_rejected_total", **rejected) == 1
    assert value(registry, "engine_steps_failed_total", **rejected) == 1
    assert value(registry, "engine_steps_dead_lettered_total", **rejected) == 0
    assert value(registry, "engine_step_duration_seconds_sum", outcome="done", **labels) == 1.5


def test_metrics__outages_counted_and_database_up_follows_them(
    registry: CollectorRegistry,
) -> None:
    from engine.infra.outage import Outage

    outage = Outage(1.0)
    assert value(registry, "engine_database_up") == 1
    outage.failed(ConnectionError("gone"), "test")
    outage.failed(ConnectionError("still gone"), "test")  # the same outage
    assert value(registry, "engine_database_up") == 0
    assert value(registry, "engine_database_outages_total") == 1
    outage.recovered()
    assert value(registry, "engine_database_up") == 1


def test_metrics__disabled_records_nothing_and_raises_nothing() -> None:
    metrics.disable()
    metrics.step_started(claimed("a"))
    metrics.step_ended(claimed("a"), "done", 1.0)
    metrics.outage_started()


def test_metrics_serve__a_port_in_use_is_a_config_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"127\.0\.0\.1:{port}.*ENGINE_METRICS_PORT"):
            metrics.serve(Settings(), "127.0.0.1", port)
    metrics.disable()


def test_metrics__prometheus_client_not_imported_by_submit_or_the_worker_code() -> None:
    code = (
        "import sys, engine, engine.jobs.submit, engine.worker.worker, engine.infra.metrics\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
