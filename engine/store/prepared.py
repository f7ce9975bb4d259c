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
psycopg deallocates them all after a rollback (see :class:`_Session`): the
set is forgotten then and prepared again on next use.

Not behind a transaction pooler (PgBouncer, RDS Proxy), where a connection
is no one session: :func:`configure` turns them off there
(``ENGINE_PREPARED_STATEMENTS``, :mod:`engine.store.pooler`). Should one be
missing all the same (a pooler not detected, ``on`` forced, a ``DISCARD
ALL`` by someone else), the statement fails, costs no attempt (the store
makes it :class:`~engine.errors.Contention`: not done, try again) and its
connection prepares nothing more (invariant 18).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
from psycopg import ClientCursor, pq
from psycopg.types.json import Jsonb

log = logging.getLogger(__name__)

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


class _Session:
    """What one connection (one session) has prepared, and its string quoting.

    ``enabled`` false: nothing is prepared on this connection, every
    statement goes bound in full (behind a transaction pooler, or after one
    was found missing).
    """

    def __init__(self, conn: psycopg.Connection[Any], *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.known: set[str] = set()
        # libpq's PQescapeLiteral, for a UTF-8 session (the engine's); else psycopg's
        self.escape: Callable[[bytes], bytes] | None = (
            pq.Escaping(conn.pgconn).escape_literal if conn.info.encoding == "utf-8" else None
        )
        self._follow_psycopg(conn)

    def _follow_psycopg(self, conn: psycopg.Connection[Any]) -> None:
        """Forget what psycopg deallocates: it sends ``DEALLOCATE ALL`` after a rollback.

        psycopg prepares statements of its own and, after a ``ROLLBACK`` (a
        step's transaction or savepoint rolled back), a ``DROP`` or an
        ``ALTER``, deallocates every statement of the session, ours too. Its
        manager says when (``clear()`` returns true just before it sends it).
        psycopg documents no hook for this (``prepare_threshold=None`` would
        avoid it only by giving up psycopg's own prepared statements), so the
        internal is followed, psycopg is pinned to the versions it was tested
        on (pyproject.toml) and ``tests/integration/test_psycopg_seams.py``
        fails if it changes. Were it ever gone, psycopg is told not to prepare
        on this connection, and then never deallocates.
        """
        manager = getattr(conn, "_prepared", None)
        clear = getattr(manager, "clear", None)
        if manager is None or not callable(clear):
            conn.prepare_threshold = None
            return
        known = self.known

        def clear_and_forget() -> bool:
            cleared = bool(clear())
            if cleared:
                known.clear()
            return cleared

        manager.clear = clear_and_forget


_sessions: weakref.WeakKeyDictionary[psycopg.Connection[Any], _Session] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def configure(conn: psycopg.Connection[Any], *, enabled: bool) -> None:
    """Whether statements are prepared on ``conn`` (every engine connection is told).

    A connection nobody configured prepares (a direct connection's default).
    """
    with _lock:
        _sessions[conn] = _Session(conn, enabled=enabled)


def _session(conn: psycopg.Connection[Any]) -> _Session:
    with _lock:
        session = _sessions.get(conn)
        if session is None:
            session = _sessions[conn] = _Session(conn)
        return session


def execute_text(
    conn: psycopg.Connection[Any], binder: ClientCursor[Any], query: str, params: Mapping[str, Any]
) -> str:
    """``EXECUTE name(...)`` for ``query`` bound to ``params``, prepared on ``conn`` first.

    Preparing is a round trip of its own, once per connection and query; a
    ``PREPARE`` inside an open transaction outlives its rollback.
    """
    session = _session(conn)
    if not session.enabled:
        return binder.mogrify(query, params)
    stmt = statement(query)
    if stmt.name not in session.known:
        try:
            conn.execute(stmt.prepare)
        except psycopg.errors.DuplicatePreparedStatement:
            # another client's statement on this server session: a pooler
            # shares sessions between connections; prepare no more here
            unprepared(conn)
            raise
        session.known.add(stmt.name)
    if not stmt.params:
        return f"EXECUTE {stmt.name}"
    args = ", ".join(_literal(session.escape, binder, params[n]) for n in stmt.params)
    return f"EXECUTE {stmt.name}({args})"


# the items an array literal is written of here: their text needs no quoting
_ARRAY_ITEMS = frozenset({uuid.UUID, int, float})


def _literal(escape: Callable[[bytes], bytes] | None, binder: ClientCursor[Any], value: Any) -> str:
    """``value`` as an SQL literal: the common types here, the rest through psycopg.

    psycopg's client-side binding is written in Python and was a tenth of a
    worker's time; libpq quotes strings (``PQescapeLiteral``, with the
    connection's settings) as psycopg does.
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
    if kind is list and all(
        type(v) in _ARRAY_ITEMS and (type(v) is not float or math.isfinite(v)) for v in value
    ):
        # an untyped array literal: the prepared statement's parameter type decides
        return "'{" + ",".join(str(v) for v in value) + "}'"
    if escape is not None:
        if kind is str and "\x00" not in value:
            return escape(value.encode()).decode()
        if kind is Jsonb and value.dumps is None:
            text = json.dumps(value.obj)
            if "\x00" not in text:  # json.dumps escapes NUL, kept as a guard
                return escape(text.encode()).decode() + "::jsonb"
    return binder.mogrify("%s", [value])


def send(cur: ClientCursor[Any], statements: list[str]) -> None:
    """Send ``statements`` as one simple-query message on ``cur``'s connection.

    A prepared statement found missing makes the connection stop preparing
    (:func:`unprepared`) before the error goes on; the store turns the error
    into :class:`~engine.errors.Contention`, "not done, try again" at no
    attempt, and the next try sends its statements in full.
    """
    try:
        cur.execute(";\n".join(statements))
    except psycopg.errors.InvalidSqlStatementName:
        unprepared(cur.connection)
        raise


def unprepared(conn: psycopg.Connection[Any]) -> None:
    """After a missing (or foreign) prepared statement: prepare nothing more on ``conn``.

    Its session lost what it had prepared, or it is not one session at all
    (a transaction pooler lends each transaction whichever server session is
    free): preparing again could fail again, at random, so it stops.
    """
    log.warning(
        "a prepared statement was missing on a connection (a pooler or a DISCARD ALL): "
        "it runs its statements unprepared from now on; behind a transaction pooler set "
        "ENGINE_PREPARED_STATEMENTS=off (or auto)"
    )
    configure(conn, enabled=False)
