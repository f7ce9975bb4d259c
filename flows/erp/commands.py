"""The ERP's command line tools, added to the ``engine`` CLI by the registry."""

from __future__ import annotations

import click

from flows.erp import period_commands  # noqa: F401  (adds check, close, reopen to books)
from flows.erp.books import books
from flows.erp.demo import demo
from flows.erp.seed import command as seed_command

commands: list[click.Command] = []
commands.append(books)
commands.append(seed_command)
commands.append(demo)
