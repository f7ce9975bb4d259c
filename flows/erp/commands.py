"""The ERP's command line tools, added to the ``engine`` CLI by the registry."""

from __future__ import annotations

import click

commands: list[click.Command] = []
