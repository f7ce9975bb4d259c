"""Prepared statements run from simple-query messages: ``EXECUTE name(literals)``.

The statements a checkpoint sends together (:class:`~engine.store.Batch`,
the checkpoint's own message) go as one simple-query message, never a
pipeline (see :mod:`engine.store.batch`). PostgreSQL parses and plans every
statement of such a message afresh, and for the checkpoint's CTEs the
planning cost more server time than running them. So each of them is
prepared once per connection (``PREPARE``, one round trip the first time a
connection needs it) and the message carries only ``EXECUTE name(...)``,
its arguments bound client side as before: the same statements, run the
same way, in the same one message, with the plan reused.

Prepared statements are not transactional (a rollback keeps them) and live
as long as their session; a connection is a new session, with its own set.
Should one be missing all the same (a ``DISCARD ALL`` by someone else), the
statement fails like any other and the connection's set is forgotten, so
the next use prepares it again.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
from psycopg import ClientCursor, pq
from psycopg.types.json import Jsonb

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%s")


@dataclass(frozen=True)
class Statement:
    """A named query converted for ``PREPARE``: ``$n`` placeholders, in ``params`` order."""

    name: str
    prepare: str
    params: tuple[str, ...]


@cache
def statement(query: str) -> Statement:
    """``query`` (psycopg's ``%(name)s`` placeholders) as a statement to prepare."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[0] == "%%":
            return "%"
        if match[1] is None:
            raise ValueError("a prepared statement takes named placeholders only, not %s")
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    body = _PLACEHOLDER.sub(number, query.strip().rstrip(";"))
    name = "engine_" + hashlib.blake2b(query.encode(), digest_size=8).hexdigest()
    return Statement(name, f"PREPARE {name} AS\n{body}", tuple(names))


# the statements prepared on each connection (a connection is one session)
_prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[str]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def execute_text(
    conn: psycopg.Connection[Any], binder: ClientCursor[Any], query: str, params: Mapping[str, Any]
) -> str:
    """``EXECUTE name(...)`` for ``query`` bound to ``params``, prepared on ``conn`` first.

    Preparing is a round trip of its own, once per connection and query; a
    ``PREPARE`` inside an open transaction outlives its rollback.
    """
    stmt = statement(query)
    with _lock:
        known = _prepared.setdefault(conn, set())
    if stmt.name not in known:
        conn.execute(stmt.prepare)
        known.add(stmt.name)
    if not stmt.params:
        return f"EXECUTE {stmt.name}"
    args = ", ".join(_literal(conn, binder, params[n]) for n in stmt.params)
    return f"EXECUTE {stmt.name}({args})"


def _literal(conn: psycopg.Connection[Any], binder: ClientCursor[Any], value: Any) -> str:
    """``value`` as an SQL literal: the common types here, the rest through psycopg.

    psycopg's client-side binding is written in Python and was a tenth of a
    worker's time; libpq quotes strings (``PQescapeLiteral``, the connection's
    encoding and settings) as psycopg does.
    """
    kind = type(value)
    if value is None:
        return "NULL"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float and math.isfinite(value):
        return repr(value)
    if kind is uuid.UUID:
        return f"'{value}'::uuid"
    if conn.info.encoding == "utf-8":
        if kind is str and "\x00" not in value:
            return pq.Escaping(conn.pgconn).escape_literal(value.encode()).decode()
        if kind is Jsonb and value.dumps is None:
            text = json.dumps(value.obj)
            if "\x00" not in text:  # json.dumps escapes NUL, kept as a guard
                return pq.Escaping(conn.pgconn).escape_literal(text.encode()).decode() + "::jsonb"
    return binder.mogrify("%s", [value])


def forget(conn: psycopg.Connection[Any]) -> None:
    """After a missing prepared statement: prepare everything again on ``conn``."""
    with _lock:
        _prepared.pop(conn, None)
