"""The ``engine`` command line: thin commands over the public API (:mod:`engine.cli.main`)."""

from engine.cli.main import main

__all__ = ["main"]
