"""The ``engine`` command line: thin commands over the public API.

:mod:`engine.cli.main` holds the click group, the named exit codes and the one
place that turns exceptions into them; commands raise and return, never exit.
Each other module is one command group: ``jobs`` (submit, status, runs, cancel,
retry), ``dlq``, ``flows``, ``queues``, ``reports``, ``worker``, ``migrate``,
``simulate``. Flow modules add their own (``engine books``, ``seed``, ``demo``)
through :mod:`engine.cli.extensions`.
"""

from engine.cli.main import main

__all__ = ["main"]
