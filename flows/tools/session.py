"""What the ``engine books`` commands share: their ``--period`` option and their transaction.

Every books command (``flows.tools.books``, ``flows.tools.exports``) reads
the period the same way and runs in one transaction on the books, where
psycopg's errors (flows run their own SQL, so they reach here unwrapped)
become the engine's ``StoreError`` (exit 3), the engine's own errors
staying what they are (a ``BadInput`` exits 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
import psycopg

from engine import EngineError, Settings, StoreError, connect
from flows.erp.types import parse_period

__all__ = ["books_transaction", "parse_period_option", "period_option"]

period_option = click.option(
    "--period", required=True, show_envvar=True, help="accounting period, YYYY-MM"
)


def parse_period_option(value: str) -> str:
    """``--period``'s value checked; a bad one is refused naming the option."""
    return parse_period(value, option="--period")


@contextmanager
def books_transaction(
    *, read_only: bool = False, settings: Settings | None = None
) -> Iterator[psycopg.Connection[Any]]:
    """One transaction on the books (read-only for an export); driver errors become
    ``StoreError``."""
    try:
        with connect(settings or Settings()) as conn:
            conn.read_only = read_only
            yield conn
    except EngineError:
        raise
    except psycopg.Error as exc:
        raise StoreError(f"cannot use the books: {exc}") from exc
