"""Named queries run on a caller's connection, for code with its own ``.sql`` file.

The store's modules give each statement a typed function. A component that
keeps a few private statements of its own (the simulator and its flow) runs
them through :class:`NamedQueries` instead, so that what it runs is always a
named block with its invariant line, never a string built at the call site.

Driver errors pass through unchanged: in a step they are the step's failure
(recorded with the driver's message, which the simulator's oracles read), and
a command reports them itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from engine.store.queries import Queries

Params = Mapping[str, Any] | None


class NamedQueries:
    """The blocks of one ``.sql`` file, run by name."""

    def __init__(self, queries: Queries) -> None:
        self.queries = queries

    def _query(self, name: str, identifiers: Mapping[str, str]) -> str | sql.Composed:
        text = self.queries[name]
        if not identifiers:
            return text
        # a database or table name cannot be a bind parameter: {name} is quoted instead
        return sql.SQL(text).format(**{k: sql.Identifier(v) for k, v in identifiers.items()})

    def run(
        self, conn: psycopg.Connection[Any], name: str, params: Params = None, **identifiers: str
    ) -> int:
        """Run ``name`` for its effect; the rows it touched."""
        return conn.execute(self._query(name, identifiers), params).rowcount

    def one(
        self, conn: psycopg.Connection[Any], name: str, params: Params = None
    ) -> dict[str, Any]:
        """The single row ``name`` returns (a query that always returns one)."""
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(self.queries[name], params).fetchone()
        if row is None:
            raise LookupError(f"query {name!r} of {self.queries.path.name} returned no row")
        return row

    def first(
        self, conn: psycopg.Connection[Any], name: str, params: Params = None
    ) -> dict[str, Any] | None:
        """The first row ``name`` returns, or ``None``."""
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self.queries[name], params).fetchone()

    def rows(
        self, conn: psycopg.Connection[Any], name: str, params: Params = None
    ) -> list[dict[str, Any]]:
        """Every row ``name`` returns."""
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self.queries[name], params).fetchall()
