"""How commands write: rich consoles for people, one JSON object for machines."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

__all__ = ["err", "out", "print_json"]

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def print_json(value: dict[str, Any]) -> None:
    """``value`` as one line of JSON on stdout (keys sorted, so diffs of outputs stay small)."""
    click.echo(json.dumps(value, default=str, sort_keys=True))
