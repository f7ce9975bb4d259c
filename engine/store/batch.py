"""A batch: statements bound client side and sent later, together, as one simple-query message.

For the statements that commit with a checkpoint and need no answer before
the COMMIT (the job's end, an eager successor's claim, the messages out and
the delivery's delete with the PostgreSQL transport). Store functions that
take an :data:`Executes` write into a batch as they would into a connection;
:meth:`Batch.send` sends them all at once, and each :class:`Reply` holds its
rows from then on.

Rows of one set-based statement (:meth:`Batch.add_row`: a round's eager
successors) go as that one statement, at the place of the first row, each
row's reply holding the rows returned for it: a statement pays executor
start-up, its plan and the table's CHECK constraints read again, once.

Not a psycopg pipeline: a pipeline sends each statement as it is executed,
with a Flush and no Sync until its end. A worker frozen (SIGSTOP, a stalled
VM) between two of them left its session ``active`` in ``ClientRead``
halfway through an extended-protocol sequence, where PostgreSQL 15 runs
neither ``statement_timeout`` (stopped after each Execute) nor
``idle_in_transaction_session_timeout`` (armed only once a Sync or a whole
query has been answered), holding the job's row lock until the process
died. A simple-query message is answered as a whole, and the session is
then idle in transaction, its timer armed, until the next one arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import psycopg
from psycopg import ClientCursor
from psycopg.rows import dict_row

from engine.errors import StoreError
from engine.store import prepared
from engine.store.errors import wrap_errors

__all__ = ["Batch", "Executes", "Reply"]


class Reply:
    """The rows one statement of a batch returned, readable once the batch was sent."""

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] | None = None

    def fetchone(self) -> dict[str, Any] | None:
        rows = self.fetchall()
        return rows[0] if rows else None

    def fetchall(self) -> list[dict[str, Any]]:
        if self._rows is None:
            raise StoreError("a batched statement has no answer before its batch is sent")
        return self._rows

    def close(self) -> None:
        """Nothing to release (a cursor's counterpart)."""


@dataclass
class _Rows:
    """The rows of one set-based statement, bound when the batch is sent."""

    query: str
    shared: dict[str, Any]
    rows: list[Mapping[str, Any]] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)

    def params(self) -> dict[str, Any]:
        """Each column as an array, in the rows' order, and the parameters they share."""
        return {
            **{name: [row[name] for row in self.rows] for name in self.rows[0]},
            **self.shared,
        }

    def answer(self, rows: list[dict[str, Any]]) -> None:
        """Each row's reply: the rows returned for it (``n``, its 1-based place)."""
        for reply in self.replies:
            reply._rows = []
        for row in rows:
            n = row.pop("n")
            replies = self.replies[n - 1]._rows
            assert replies is not None
            replies.append(row)


class Batch:
    """Statements for ``conn``'s open transaction, bound now and sent by :meth:`send`."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._binder = ClientCursor(conn)
        self._statements: list[str | _Rows] = []
        self._replies: list[Reply | _Rows] = []
        self._groups: dict[tuple[str, tuple[tuple[str, Any], ...]], _Rows] = {}
        self._then: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._statements)

    @wrap_errors
    def execute(self, query: str, params: Mapping[str, Any] | None = None) -> Reply:
        """Add ``query`` bound to ``params``; its rows arrive with :meth:`send`.

        A query with parameters goes as ``EXECUTE`` of its prepared statement
        (:mod:`engine.store.prepared`): planned once per connection, where its
        connection prepares (``PREPARE`` is sent here, the first time).
        """
        bound = (
            prepared.execute_text(self.conn, self._binder, query, params)
            if params is not None
            else query
        )
        self._statements.append(bound.rstrip().rstrip(";"))
        reply = Reply()
        self._replies.append(reply)
        return reply

    def add_row(
        self, query: str, row: Mapping[str, Any], shared: Mapping[str, Any] | None = None
    ) -> Reply:
        """Add ``row`` to the set-based ``query`` of this batch; its rows arrive with :meth:`send`.

        Rows of the same ``query`` and ``shared`` parameters go as one statement,
        at the place of the first: ``query`` takes each of the row's keys as an
        array (in the rows' order) and the shared ones as they are, and returns
        each row's answer with its 1-based place as ``n``.
        """
        together = dict(shared or {})
        key = (query, tuple(sorted(together.items())))
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Rows(query, together)
            self._statements.append(group)
            self._replies.append(group)
        elif list(row) != list(group.rows[0]):
            raise StoreError("the rows of one set-based statement must have the same columns")
        group.rows.append(row)
        reply = Reply()
        group.replies.append(reply)
        return reply

    def after_send(self, then: Callable[[], None]) -> None:
        """Run ``then`` once the batch is sent (in the same transaction: it may read replies)."""
        self._then.append(then)

    @wrap_errors
    def send(self) -> None:
        """Send every statement in one message and one round trip; then each reply is read.

        The first failing statement raises, the ones after it are not run and
        the transaction is left aborted (the caller rolls back).
        """
        if not self._statements:
            return
        statements, replies, then = self._statements, self._replies, self._then
        self._statements, self._replies, self._then = [], [], []
        self._groups = {}
        bound = [
            s
            if isinstance(s, str)
            else prepared.execute_text(self.conn, self._binder, s.query, s.params())
            for s in statements
        ]
        with ClientCursor(self.conn, row_factory=dict_row) as cur:
            prepared.send(cur, bound)
            for i, reply in enumerate(replies):
                if i:
                    cur.nextset()
                rows = cur.fetchall() if cur.description is not None else []
                if isinstance(reply, _Rows):
                    reply.answer(rows)
                else:
                    reply._rows = rows
        for action in then:
            action()


# where a statement that needs no answer yet goes: a connection, or a batch sent later
Executes: TypeAlias = psycopg.Connection[Any] | Batch
