"""The ERP's tools: demo data, the demo and the ``engine books`` commands.

These are for an operator at a terminal, not for a flow: :mod:`.seed` fills
the ERP tables with a deterministic month (``engine seed``; its world and
documents in :mod:`.seed_world` and :mod:`.seed_paper`), :mod:`.demo`
runs a month end from an empty database (``engine demo``), :mod:`.books`
reads and closes a period's books (``engine books``), :mod:`.exports` writes
its auditor's exports, and :mod:`.session` holds what those commands share
(their ``--period`` and their transaction), and :mod:`.search` the ERP's
options of ``engine runs`` (``--period``, ``--store``, ``--document``). They are built on the
domain package :mod:`flows.erp`; nothing there or in a flow imports them.

The registry loads this package with the flow modules (it sits directly in
``flows``) and reads :data:`commands`, as it reads a flow module's ``flow``
(:mod:`engine.flow.registry`); the ``engine`` CLI adds each one under its own
name (:mod:`engine.cli.extensions`), :data:`console_pages`, which
``engine console`` shows (:mod:`.console`), and :data:`search_fields`, the
options ``engine runs`` and the console's runs form add (:mod:`.search`).
The lists are the whole registration: no command adds itself to a group or
a registry when its module is imported.

Like the flows, the tools import only ``engine``'s public API, with three
documented exceptions: in :mod:`.demo`, :mod:`engine.worker.processes`, to
start its worker processes as production does, and :mod:`engine.reports`,
for the report renderers (``render_index``, ``render_job_report``), which are
not part of the root API and load jinja2 only when called; in :mod:`.console`,
:mod:`engine.console.extension` and :mod:`engine.console.roles`, the plain
data types of a console page (they load no web framework).
"""

from __future__ import annotations

import click

from flows.tools.books import books
from flows.tools.console import periods_page
from flows.tools.demo import demo
from flows.tools.search import search_fields
from flows.tools.seed import command as seed_command

__all__ = ["commands", "console_pages", "search_fields"]

commands: list[click.Command] = [books, seed_command, demo]
"""The commands the ``engine`` CLI adds: ``engine books``, ``engine seed``, ``engine demo``."""

console_pages = [periods_page]
"""The pages ``engine console`` adds: the periods, their history, their close and reopen."""

# search_fields (flows.tools.search): engine runs --period/--store/--document, and the
# console's runs form's fields of the same names
