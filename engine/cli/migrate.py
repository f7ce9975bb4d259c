"""``engine migrate``: apply the numbered SQL migrations."""

from __future__ import annotations

import click

from engine.cli.output import out
from engine.cli.state import current
from engine.store import migrations

__all__ = ["migrate"]


@click.command()
def migrate() -> None:
    """Apply the numbered SQL migrations not applied yet (safe to run concurrently)."""
    state = current()
    report = migrations.migrate(state.settings)
    for name in report.applied:
        out.print(f"applied {name}", highlight=False)
    out.print(
        f"{len(report.applied)} applied, {len(report.already)} already applied "
        f"({state.settings.masked_database_url()})",
        highlight=False,
    )
