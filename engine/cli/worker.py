"""``engine worker``: run step runs until told to stop."""

from __future__ import annotations

from typing import Any

import click

from engine.cli.output import err
from engine.cli.state import current
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
def worker(concurrency: int | None, transport: str | None) -> int:
    """Run step runs until SIGTERM/SIGINT (then finish or release them; exit 0).

    Every connection of the worker takes ENGINE_WORKER_ROLE (no DDL, no UPDATE or
    DELETE of posted journal lines); admin commands keep the login's role.
    """
    state = current()
    updates: dict[str, Any] = {
        k: v for k, v in {"concurrency": concurrency, "transport": transport}.items() if v
    }
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
