"""``engine flows list|show``: the flows this process has registered."""

from __future__ import annotations

import click
from rich.table import Table

from engine.cli.output import out, print_json
from engine.cli.state import current

__all__ = ["flows"]


@click.group()
def flows() -> None:
    """The registered flows."""


@flows.command("list")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def flows_list(as_json: bool) -> None:
    """List registered flows."""
    registry = current().registry
    if as_json:
        print_json(
            {
                "flows": [
                    {"name": f.name, "version": f.version, "description": f.description}
                    for f in registry.flows()
                ]
            }
        )
        return
    table = Table("flow", "version", "steps", "description")
    for f in registry.flows():
        table.add_row(f.name, str(f.version), str(len(f.steps)), f.description)
    out.print(table)


@flows.command("show")
@click.argument("name")
def flows_show(name: str) -> None:
    """Show a flow's parameters, steps, their types and the edges."""
    click.echo(current().registry.get(name).describe())
