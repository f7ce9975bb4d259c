"""The ERP's tools: demo data, the demo and the ``engine books`` commands.

These are for an operator at a terminal, not for a flow: :mod:`.seed` fills
the ERP tables with a deterministic month (``engine seed``), :mod:`.demo`
runs a month end from an empty database (``engine demo``), :mod:`.books`
reads and closes a period's books (``engine books``). They are built on the
domain package :mod:`flows.erp`; nothing there or in a flow imports them.

The registry loads this package with the flow modules (it sits directly in
``flows``) and adds each command of :data:`commands` to the ``engine`` CLI
(:mod:`engine.cli.extensions`).

Like the flows, the tools import only ``engine``'s public API, with two
documented exceptions, both in :mod:`.demo`: :mod:`engine.worker.processes`,
to start its worker processes as production does, and :mod:`engine.reports`,
for the report renderers (``render_index``, ``render_job_report``), which are
not part of the root API and load jinja2 only when called.
"""

from __future__ import annotations

import click

from flows.tools.books import books
from flows.tools.demo import demo
from flows.tools.seed import command as seed_command

commands: list[click.Command] = []
commands.append(books)
commands.append(seed_command)
commands.append(demo)
