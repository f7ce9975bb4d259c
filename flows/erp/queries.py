"""How the ERP's code runs its SQL: :class:`NamedQueries`, one way for every flow and module.

Every statement of the books lives in a named block of a ``.sql`` file in
``flows/erp/sql/``, whose first comment line states the invariant it keeps,
loaded with the engine's loader (:func:`engine.load_queries`). A module
makes one ``NamedQueries`` of its file and runs blocks by name on the
caller's connection, so the statement joins whatever transaction is open
there: a step's fenced ``ctx.conn``, a command's own, a test's. Rows come
back as dicts whatever row factory that connection has::

    _q = NamedQueries("periods")
    row = _q.first(conn, "period_select", {"period": period})  # None: no such period

``rows`` returns every row (none for a statement that returns nothing),
``first`` the first row or ``None`` (zero rows is a normal outcome),
``one`` the row a statement always returns (an aggregate, an ``INSERT ...
RETURNING``), ``execute`` runs a statement for its effect and ``copy``
streams into a ``COPY ... FROM STDIN`` block. ``params`` go to psycopg as
given: with none, a block's ``%`` is literal; with a mapping (even an empty
one), ``%%`` stands for ``%``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from engine import Queries, load_queries

__all__ = ["SQL_DIR", "NamedQueries"]

SQL_DIR = Path(__file__).parent / "sql"
"""The ERP's ``.sql`` files, one per subject (``periods.sql``, ``posting.sql``, ...)."""

Row = dict[str, Any]
Params = Mapping[str, Any] | None


class NamedQueries:
    """The named blocks of ``flows/erp/sql/<file>.sql``, run by name on a caller's connection."""

    def __init__(self, file: str) -> None:
        self.queries: Queries = load_queries(str(SQL_DIR / f"{file}.sql"))

    def __getitem__(self, name: str) -> str:
        """The text of block ``name``, for a statement composed with :mod:`psycopg.sql`."""
        return self.queries[name]

    def rows(self, conn: psycopg.Connection[Any], name: str, params: Params = None) -> list[Row]:
        """Every row of block ``name``; ``[]`` for a statement that returns none."""
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self.queries[name], params)
            return cur.fetchall() if cur.description is not None else []

    def first(self, conn: psycopg.Connection[Any], name: str, params: Params = None) -> Row | None:
        """The first row of block ``name``, or ``None`` when it returns none."""
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(self.queries[name], params)
            return cur.fetchone() if cur.description is not None else None

    def one(self, conn: psycopg.Connection[Any], name: str, params: Params = None) -> Row:
        """The row block ``name`` always returns (an aggregate, an ``INSERT ... RETURNING``)."""
        row = self.first(conn, name, params)
        assert row is not None, f"query {name!r} returns one row"
        return row

    def execute(self, conn: psycopg.Connection[Any], name: str, params: Params = None) -> None:
        """Run block ``name`` for its effect (a lock, a write, a setting)."""
        with conn.cursor() as cur:
            cur.execute(self.queries[name], params)

    @contextmanager
    def copy(self, conn: psycopg.Connection[Any], name: str) -> Iterator[psycopg.Copy]:
        """The ``COPY ... FROM STDIN`` of block ``name``: write rows or text to what it yields."""
        with conn.cursor() as cur, cur.copy(self.queries[name]) as copy:
            yield copy
