"""``engine worker``: run step runs until told to stop."""

from __future__ import annotations

from typing import Any

import click

from engine.cli.output import err
from engine.cli.state import current
from engine.errors import Unhealthy
from engine.worker import Worker

__all__ = ["worker"]


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
    "--check",
    is_flag=True,
    help=(
        "check, then exit: settings, heartbeat/lease/visibility, flows, database reachable "
        "and migrated, queue reachable, alert sinks configured (the container's health check)"
    ),
)
def worker(concurrency: int | None, transport: str | None, check: bool) -> int | None:
    """Run step runs until SIGTERM/SIGINT (then finish or release them; exit 0).

    Every connection of the worker takes ENGINE_WORKER_ROLE (no DDL, no UPDATE or
    DELETE of posted journal lines); admin commands keep the login's role.
    """
    updates: dict[str, Any] = {
        k: v for k, v in {"concurrency": concurrency, "transport": transport}.items() if v
    }
    if check:
        _check(updates)
        return None
    state = current()
    if state.settings.worker_role:
        updates["session_role"] = state.settings.worker_role
    settings = state.settings.model_copy(update=updates)
    w = Worker(settings, state.registry)
    w.install_signal_handlers()
    role = f"role {settings.session_role}" if settings.session_role else "the login's role"
    err.print(
        f"worker {w.worker_id}: {settings.concurrency} slot(s), transport {settings.transport}, "
        f"{role}, {settings.masked_database_url()}",
        highlight=False,
    )
    return w.run()


def _check(updates: dict[str, Any]) -> None:
    """One line per check on stdout; :class:`Unhealthy` naming each failed one."""
    from engine.health import check_worker

    results = check_worker(updates)
    for result in results:
        click.echo(result.line())
    failed = [r for r in results if r.ok is False]
    if failed:
        raise Unhealthy(
            "worker check failed: " + "; ".join(f"{r.name}: {r.detail}" for r in failed)
        )
