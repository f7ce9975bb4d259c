"""``engine db status|stop``: the embedded PostgreSQL the engine starts when no URL is set."""

from __future__ import annotations

import click

from engine.cli.output import out, print_json
from engine.cli.state import current
from engine.errors import BadInput
from engine.store.embedded import EmbeddedServer, embedded_status, embedded_stop

__all__ = ["db"]


@click.group()
def db() -> None:
    """The embedded PostgreSQL (ENGINE_PGDATA), used when ENGINE_DATABASE_URL is unset.

    The first command that needs the database starts it and leaves it
    running for the next ones; `engine db stop` stops it.
    """


@db.command("status")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def db_status(as_json: bool) -> None:
    """Whether the embedded server runs, its data folder and its URL (starts nothing)."""
    settings = current().settings
    server = embedded_status(settings)
    external = settings.database_url is not None
    if as_json:
        print_json(
            {
                **server.as_json(),
                "database_url_set": external,
                "database": settings.masked_database_url(),
            }
        )
        return
    if external:
        out.print(
            f"ENGINE_DATABASE_URL is set: the engine uses {settings.masked_database_url()}, "
            "not the embedded server",
            highlight=False,
            markup=False,
        )
    _print(server)


def _print(server: EmbeddedServer) -> None:
    if server.running:
        out.print(
            f"embedded PostgreSQL: running (pid {server.pid}, {server.status or 'status unknown'})"
            "\n"
            f"  data folder: {server.pgdata}\n"
            f"  url: {server.url}\n"
            "  stop it with: engine db stop",
            highlight=False,
            markup=False,
        )
        return
    state = "initialised" if server.initialised else "not created yet"
    out.print(
        f"embedded PostgreSQL: not running\n  data folder: {server.pgdata} ({state})\n"
        "  the next engine command that needs the database starts it",
        highlight=False,
        markup=False,
    )


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded server (its sessions are ended; workers using it reconnect later)."""
    settings = current().settings
    stopped = embedded_stop(settings)
    if stopped is None:
        if settings.database_url is not None and not embedded_status(settings).initialised:
            raise BadInput(
                "ENGINE_DATABASE_URL is set and there is no embedded server in "
                f"{settings.pgdata}: engine db stop stops only the embedded one"
            )
        out.print(
            f"embedded PostgreSQL in {embedded_status(settings).pgdata} is not running; "
            "nothing to stop",
            highlight=False,
            markup=False,
        )
        return
    out.print(
        f"embedded PostgreSQL stopped (pid {stopped.pid}, data folder {stopped.pgdata})",
        highlight=False,
        markup=False,
    )
