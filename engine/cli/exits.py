"""The named exit codes of ``engine`` (decided in :func:`engine.cli.main.exit_code`).

A module of its own, importing nothing, so that the entry point can exit
with them before the command line's own libraries are importable.
"""

from __future__ import annotations

__all__ = ["EXIT_BAD_INPUT", "EXIT_ENVIRONMENT", "EXIT_JOB_FAILED", "EXIT_OK"]

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
