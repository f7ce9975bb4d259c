"""Metrics: what a worker did, in Prometheus text, for ``engine worker --metrics-port N``.

Counted where the outcome is decided: a slot's executor counts a step run it
starts (and whether it reclaimed it from a lapsed lease) and how its attempt
ended (succeeded, failed then retried or dead-lettered, fenced, cancelled),
with the attempt's duration; the heartbeat counts renewals and lost leases;
the sweeper counts the dead letters it makes; :mod:`engine.infra.outage` counts
outages and keeps ``engine_database_up``. ``engine_queue_lag_seconds`` is the
age of the oldest claimable step run, read from the database every
``sweep_interval_s`` by a thread of the metrics server.

``prometheus_client`` is imported only by :func:`enable`: until then every
recording function is a no-op, so code that never serves metrics (the API
side's install, tests that run workers in threads) needs neither the library
nor a registry. Labels are ``flow`` and ``step`` (names from the flow
declarations, never values from a job), and ``outcome`` on the duration.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import store
from engine.config import Settings
from engine.errors import ConfigError
from engine.store import db

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from engine.store.rows import Claimed

__all__ = [
    "Metrics",
    "MetricsServer",
    "dead_lettered",
    "disable",
    "enable",
    "lease_lost",
    "lease_renewed",
    "outage_ended",
    "outage_started",
    "serve",
    "step_ended",
    "step_started",
]

log = logging.getLogger(__name__)

# from a quick step to a 10-minute costing step and past it
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 3600)
_STEP = ("flow", "step")


class Metrics:
    """The engine's metric objects, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = _STEP) -> Counter:
            return Counter(name, doc, labels, namespace="engine", registry=registry)

        self.started = counter("steps_started", "step run attempts started by this worker")
        self.reclaimed = counter(
            "steps_reclaimed", "step runs claimed from an expired lease of another attempt"
        )
        self.succeeded = counter("steps_succeeded", "attempts that committed their checkpoint")
        self.failed = counter(
            "steps_failed", "attempts whose step raised (then retried, dead or rejected)"
        )
        self.retried = counter("steps_retried", "failed attempts scheduled for a retry")
        self.dead_lettered = counter(
            "steps_dead_lettered", "step runs dead-lettered (attempts exhausted, permanent failure)"
        )
        self.rejected = counter(
            "steps_rejected", "step runs that refused their input data (Reject): no dead letter"
        )
        self.fenced = counter(
            "steps_fenced", "attempts refused at commit: their lease was taken (LeaseLost)"
        )
        self.cancelled = counter("steps_cancelled", "attempts stopped by their job's cancellation")
        self.duration = Histogram(
            "step_duration_seconds",
            "duration of a step run attempt, by how it ended",
            (*_STEP, "outcome"),
            namespace="engine",
            registry=registry,
            buckets=_DURATION_BUCKETS,
        )
        self.renewals = counter("lease_renewals", "leases renewed by the heartbeat")
        self.losses = counter("lease_losses", "leases the heartbeat found lost")
        self.outages = counter("database_outages", "times PostgreSQL became unreachable", ())
        self.database_up = Gauge(
            "database_up",
            "1 while PostgreSQL answers, 0 during an outage",
            namespace="engine",
            registry=registry,
        )
        self.queue_lag = Gauge(
            "queue_lag_seconds",
            "age of the oldest step run claimable now (0: none waiting)",
            namespace="engine",
            registry=registry,
        )
        self.database_up.set(1)


_current: Metrics | None = None
_lock = threading.Lock()


def enable(registry: CollectorRegistry | None = None) -> Metrics:
    """Start counting into ``registry`` (a new one, with the process's own metrics, if None)."""
    global _current
    from prometheus_client import (
        CollectorRegistry,
        PlatformCollector,
        ProcessCollector,
        disable_created_metrics,
    )

    # a *_created series per counter doubles the output and tells a scraper nothing
    # a restart (process_start_time_seconds) does not
    disable_created_metrics()  # type: ignore[no-untyped-call]
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    with _lock:
        _current = Metrics(registry)
        return _current


def disable() -> None:
    """Stop counting (the recording functions are no-ops again)."""
    global _current
    with _lock:
        _current = None


# -- recording: called where each outcome is decided --------------------------------------


def step_started(claimed: Claimed) -> None:
    """A slot starts an attempt of ``claimed`` (a reclaim when it took a lapsed lease)."""
    m = _current
    if m is None:
        return
    m.started.labels(claimed.flow, claimed.step).inc()
    if claimed.reclaimed_from is not None:
        m.reclaimed.labels(claimed.flow, claimed.step).inc()


def step_ended(claimed: Claimed, outcome: str, seconds: float) -> None:
    """How the attempt ended: done, retried, dead, rejected, fenced or cancelled (Outcome.kind)."""
    m = _current
    if m is None:
        return
    labels = (claimed.flow, claimed.step)
    m.duration.labels(*labels, outcome).observe(seconds)
    if outcome == "done":
        m.succeeded.labels(*labels).inc()
    elif outcome in ("retried", "dead"):
        m.failed.labels(*labels).inc()
        (m.retried if outcome == "retried" else m.dead_lettered).labels(*labels).inc()
    elif outcome == "rejected":
        m.failed.labels(*labels).inc()
        m.rejected.labels(*labels).inc()
    elif outcome == "fenced":
        m.fenced.labels(*labels).inc()
    elif outcome == "cancelled":
        m.cancelled.labels(*labels).inc()


def dead_lettered(flow: str | None, step: str) -> None:
    """A step run dead-lettered outside an attempt (the sweeper: its last lease lapsed)."""
    m = _current
    if m is not None:
        m.dead_lettered.labels(flow or "", step).inc()


def lease_renewed(claimed: Claimed) -> None:
    m = _current
    if m is not None:
        m.renewals.labels(claimed.flow, claimed.step).inc()


def lease_lost(claimed: Claimed) -> None:
    m = _current
    if m is not None:
        m.losses.labels(claimed.flow, claimed.step).inc()


def outage_started() -> None:
    m = _current
    if m is not None:
        m.outages.inc()
        m.database_up.set(0)


def outage_ended() -> None:
    m = _current
    if m is not None:
        m.database_up.set(1)


# -- serving ------------------------------------------------------------------------------


@dataclass
class MetricsServer:
    """The HTTP endpoint (``/metrics``, any path) and the queue-lag poller behind it."""

    host: str
    port: int
    _server: Any
    _poller: _QueueLagPoller

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._poller.stop()
        self._server.shutdown()
        self._server.server_close()


class _QueueLagPoller:
    """Reads the queue lag every ``interval_s`` on a connection of its own; outlives outages."""

    def __init__(self, settings: Settings, gauge: Any, interval_s: float) -> None:
        self._settings = settings
        self._gauge = gauge
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-queue-lag", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = db.connect(self._settings, autocommit=True)
                self._gauge.set(store.step_select_queue_lag(conn))
            except Exception:
                # an outage is counted by the worker's loops; the gauge keeps its last value
                log.debug("queue lag not read", exc_info=True)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(self._interval_s)
        if conn is not None:
            conn.close()


def serve(settings: Settings, host: str, port: int) -> MetricsServer:
    """Count, and serve the metrics on ``host:port`` (0: a free port) until closed."""
    from prometheus_client import start_http_server

    metrics = _current or enable()
    try:
        server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); choose another "
            "ENGINE_METRICS_PORT (0 picks a free one) or ENGINE_METRICS_HOST"
        ) from exc
    poller = _QueueLagPoller(settings, metrics.queue_lag, settings.sweep_interval_s)
    poller.start()
    return MetricsServer(host, int(server.server_port), server, poller)
