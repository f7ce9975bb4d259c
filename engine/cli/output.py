"""How commands write: rich consoles for people, one JSON object for machines."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

__all__ = ["err", "out", "print_json", "print_table"]

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

# off a terminal a table is as wide as its content needs, up to this
_UNCUT = 100_000


def print_json(value: dict[str, Any]) -> None:
    """``value`` as one line of JSON on stdout (keys sorted, so diffs of outputs stay small)."""
    click.echo(json.dumps(value, default=str, sort_keys=True))


def print_table(table: Table, **kwargs: Any) -> None:
    """``table`` on stdout: fitted to a terminal; off one, at its natural width.

    Off a terminal (a pipe, a file, a CI log) rich would fit the table to 80
    columns (or ``COLUMNS``) and cut its cells with "…": a job id copied from
    ``engine runs | grep`` would not be an id. There each row is one line
    per cell line, nothing cut or folded.
    """
    if out.is_terminal:
        out.print(table, **kwargs)
        return
    Console(file=out.file, width=_UNCUT, soft_wrap=True).print(table, **kwargs)
