"""The ``engine`` command line: thin commands over the public API.

:mod:`engine.cli.main` holds the click group, the named exit codes and the one
place that turns exceptions into them; commands raise and return, never exit.
Each other module is one command group: ``jobs`` (submit, status, runs, cancel,
retry), ``signals`` (signal), ``dlq``, ``flows``, ``queues``, ``reports``,
``worker``, ``migrate``, ``simulate``. Flow modules add their own (``engine
books``, ``seed``, ``demo``) through :mod:`engine.cli.extensions`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from engine.cli.exits import EXIT_ENVIRONMENT

if TYPE_CHECKING:
    from engine.cli.main import main

__all__ = ["main", "run"]

# libraries of the `worker` extra the command line needs (the API install has none)
_WORKER_EXTRA = frozenset({"rich", "sqlmodel", "sqlalchemy", "jinja2", "tenacity"})


def __getattr__(name: str) -> Any:
    if name == "main":  # the click group, loaded on first use
        from engine.cli.main import main

        # importing the submodule bound its name here; the group takes it back
        globals()["main"] = main
        return main
    raise AttributeError(f"module 'engine.cli' has no attribute {name!r}")


def run() -> Any:
    """The ``engine`` console script; on the API install, a message naming what to install."""
    try:
        from engine.cli.main import main
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in _WORKER_EXTRA:
            raise
        print(
            f"error: the engine command needs the worker install ({exc.name} is missing): "
            "pip install 'erp-engine[worker]'; the API install submits from Python "
            "(engine.submit)",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_ENVIRONMENT) from None
    return main()
