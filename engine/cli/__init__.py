"""The ``engine`` command line: thin commands over the public API.

:mod:`engine.cli.main` holds the click group, the named exit codes and the one
place that turns exceptions into them; commands raise and return, never exit.
The group imports a command's module only when the command is named
(:data:`engine.cli.main.COMMANDS`), so each command pays for its own imports only.
Each other module is one command group: ``jobs`` (submit, cancel, retry),
``status``, ``runs``, ``schedules`` (``engine schedule``), ``signals`` (``engine signal``),
``dlq``, ``flows``, ``queues``, ``reports``, ``worker``, ``migrate``,
``simulate``, ``audit`` (``engine audit``, and the ``--by`` of the commands
that act), ``database`` (``engine db status|stop``). Flow modules add their
own (``engine books``, ``seed``, ``demo``) through :mod:`engine.cli.extensions`.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from engine.cli.exits import EXIT_ENVIRONMENT

__all__ = ["WORKER_EXTRA", "main", "worker_extra_missing"]

# libraries of the `worker` extra the command line needs (the API install has none)
WORKER_EXTRA = frozenset({"rich", "sqlmodel", "sqlalchemy", "jinja2", "tenacity"})


def worker_extra_missing(module: str) -> str:
    """What to install when ``module`` of the worker extra is missing (exit 3)."""
    return (
        f"the engine command needs the worker install ({module} is missing): "
        "pip install 'erp-engine[worker]'; the API install submits from Python "
        "(engine.jobs.submit)"
    )


try:
    from engine.cli.main import main
except ModuleNotFoundError as exc:
    if (exc.name or "").partition(".")[0] not in WORKER_EXTRA:
        raise
    _MISSING = exc.name or ""

    def main(*_args: Any, **_kwargs: Any) -> NoReturn:  # type: ignore[misc]
        """The ``engine`` command on the API install: what to install, exit 3."""
        print(f"error: {worker_extra_missing(_MISSING)}", file=sys.stderr)
        raise SystemExit(EXIT_ENVIRONMENT)
