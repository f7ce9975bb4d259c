"""How flow modules add to ``engine``: command groups (``engine books``, ``seed``, ``demo``)
and options of ``engine runs`` (the ERP's ``--period``, ``--store``, ``--document``).

A module the registry loads may export ``commands``, a list of click commands;
each one becomes a top-level command under its own name. The installed flows
package's commands stay whatever ``ENGINE_FLOW_MODULES`` lists. They run inside the
root group like the engine's own, so they signal outcomes the same way: raise
:class:`~engine.BadInput` (exit 2), another :class:`~engine.EngineError`
(exit 3) or :class:`~engine.JobFailed` (exit 1), and never exit themselves.

A module may also export ``search_fields``, a list of
:class:`engine.SearchField`: each becomes an option ``--NAME VALUE`` of
``engine runs`` (and a field of the console's runs search) whose value the
field turns into a :class:`engine.RunMatch`. A field named as one of
``engine runs``' own options is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from engine.cli.state import State
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.jobs.search import SearchField

__all__ = ["commands", "search_fields"]


def commands(ctx: click.Context) -> dict[str, click.Command]:
    """The commands the loaded flow modules export, by name, and the installed package's.

    ``ENGINE_FLOW_MODULES=mymodule`` names the flows this process runs; it does
    not take the installed tools away (``engine books``, ``seed``, ``demo``):
    their commands are added when the list leaves their modules out.
    """
    state = ctx.ensure_object(State)
    try:
        registry = state.registry
    except EngineError:
        # a broken flow module must not take `engine --help` or `engine migrate` down
        return {}
    found = _commands(registry.commands)
    if state.settings.flow_modules is not None:
        for name, command in _commands(state.installed.commands).items():
            found.setdefault(name, command)
    return found


def _commands(exported: list[object]) -> dict[str, click.Command]:
    return {c.name: c for c in exported if isinstance(c, click.Command) and c.name}


def search_fields(ctx: click.Context, taken: frozenset[str] = frozenset()) -> list[SearchField]:
    """The search fields the loaded flow modules export, but those named as one of ``taken``."""
    from engine.jobs.search import SearchField  # `engine runs` only

    try:
        registry = ctx.ensure_object(State).registry
    except EngineError:
        return []  # `engine runs --help` without its domain's options, not a traceback
    return [f for f in registry.search_fields if isinstance(f, SearchField) and f.name not in taken]
