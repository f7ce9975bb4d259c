"""``engine worker``: run step runs until told to stop."""

from __future__ import annotations

import logging
from typing import Any

import click

from engine.cli.output import err
from engine.cli.state import current
from engine.errors import Unhealthy
from engine.infra import logs
from engine.worker.worker import Worker

__all__ = ["worker"]

log = logging.getLogger(__name__)


@click.command()
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=None,
    help="step runs at once (threads, one connection each) [env ENGINE_CONCURRENCY]",
)
@click.option(
    "--transport",
    type=click.Choice(["postgres", "sqs"]),
    default=None,
    help="how ready step runs arrive [env ENGINE_TRANSPORT]",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="serve Prometheus metrics on this port; 0 picks a free one [env ENGINE_METRICS_PORT]",
)
@click.option(
    "--metrics-host",
    default=None,
    help="address of the metrics port (0.0.0.0 in a container) [env ENGINE_METRICS_HOST; "
    "default 127.0.0.1]",
)
@click.option(
    "--check",
    is_flag=True,
    help=(
        "check, then exit: settings, heartbeat/lease/visibility, flows, database reachable "
        "and migrated, queue reachable, alert sinks configured (the container's health check)"
    ),
)
def worker(
    concurrency: int | None,
    transport: str | None,
    metrics_port: int | None,
    metrics_host: str | None,
    check: bool,
) -> int | None:
    """Run step runs until SIGTERM/SIGINT (then finish or release them; exit 0).

    Every connection of the worker takes ENGINE_WORKER_ROLE (no DDL, no UPDATE or
    DELETE of posted journal lines); admin commands keep the login's role.
    """
    given = {
        "concurrency": concurrency,
        "transport": transport,
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
    }
    updates: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if check:
        _check(updates)
        return None
    state = current()
    if state.settings.worker_role:
        updates["session_role"] = state.settings.worker_role
    settings = state.settings.model_copy(update=updates)
    w = Worker(settings, state.registry)
    w.install_signal_handlers()
    served = None
    if settings.metrics_port is not None:
        from engine.infra import metrics

        served = metrics.serve(settings, settings.metrics_host, settings.metrics_port)
    role = f"role {settings.session_role}" if settings.session_role else "the login's role"
    banner = (
        f"worker {w.worker_id}: {settings.concurrency} slot(s), transport {settings.transport}, "
        f"{role}, {settings.masked_database_url()}"
        + (f", metrics on {served.url}" if served is not None else "")
    )
    if logs.active_format() == "json":
        # one JSON object per line, the banner too; at the level that shows it by default
        log.warning("%s", banner)
    else:
        err.print(banner, highlight=False)
    try:
        return w.run()
    finally:
        if served is not None:
            served.close()


def _check(updates: dict[str, Any]) -> None:
    """One line per check on stdout; :class:`Unhealthy` naming each failed one."""
    from engine.worker.health import check_worker

    results = check_worker(updates)
    for result in results:
        click.echo(result.line())
    failed = [r for r in results if r.ok is False]
    if failed:
        raise Unhealthy(
            "worker check failed: " + "; ".join(f"{r.name}: {r.detail}" for r in failed)
        )
