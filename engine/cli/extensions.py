"""How flow modules add command groups to ``engine`` (``engine books``, ``seed``, ``demo``).

A module the registry loads may export ``commands``, a list of click commands;
each one becomes a top-level command under its own name. They run inside the
root group like the engine's own, so they signal outcomes the same way: raise
:class:`~engine.BadInput` (exit 2), another :class:`~engine.EngineError`
(exit 3) or :class:`~engine.JobFailed` (exit 1), and never exit themselves.
"""

from __future__ import annotations

import click

from engine.cli.state import State
from engine.errors import EngineError

__all__ = ["commands"]


def commands(ctx: click.Context) -> dict[str, click.Command]:
    """The commands the loaded flow modules export, by name."""
    try:
        registry = ctx.ensure_object(State).registry
    except EngineError:
        # a broken flow module must not take `engine --help` or `engine migrate` down
        return {}
    return {c.name: c for c in registry.commands if isinstance(c, click.Command) and c.name}
