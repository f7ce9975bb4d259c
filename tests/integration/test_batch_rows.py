"""Rows of one set-based statement in a batch (``Batch.add_row``), on real PostgreSQL.

Rows of one statement go as that statement, once, at the place of the first
row; each row's reply holds what was returned for it, nothing for a row that
returned nothing; other shared parameters make another statement.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from engine.errors import StoreError
from engine.store import Batch

DOUBLED = """
INSERT INTO seen (v, tag)
SELECT g.v, %(tag)s FROM unnest(%(v)s::int[]) WITH ORDINALITY AS g (v, n) WHERE g.v <> 0
RETURNING v * 2 AS doubled, (SELECT g2.n FROM unnest(%(v)s::int[]) WITH ORDINALITY AS g2 (v, n)
                             WHERE g2.v = seen.v LIMIT 1) AS n
"""


@pytest.fixture
def tx(conn: psycopg.Connection[Any]) -> Any:
    with conn.transaction(force_rollback=True):
        conn.execute("CREATE TEMP TABLE seen (v int, tag text) ON COMMIT DROP")
        yield conn


def test_add_row__one_statement_at_the_first_row_s_place_each_row_its_answer(tx: Any) -> None:
    batch = Batch(tx)
    one = batch.add_row(DOUBLED, {"v": 1}, {"tag": "a"})
    before = batch.execute("SELECT count(*) AS n FROM seen")
    none = batch.add_row(DOUBLED, {"v": 0}, {"tag": "a"})
    three = batch.add_row(DOUBLED, {"v": 3}, {"tag": "a"})
    other = batch.add_row(DOUBLED, {"v": 5}, {"tag": "b"})
    assert len(batch) == 3  # the "a" rows, the count, the "b" row
    batch.send()
    assert one.fetchall() == [{"doubled": 2}]
    assert none.fetchall() == []
    assert three.fetchall() == [{"doubled": 6}]
    assert other.fetchall() == [{"doubled": 10}]
    # the "a" rows were inserted where the first of them was added: before the count
    assert before.fetchone() == {"n": 2}
    rows = tx.execute(
        "SELECT tag, array_agg(v ORDER BY v) AS vs FROM seen GROUP BY tag ORDER BY tag"
    )
    assert rows.fetchall() == [{"tag": "a", "vs": [1, 3]}, {"tag": "b", "vs": [5]}]


def test_add_row__rows_of_other_columns_are_refused(tx: Any) -> None:
    batch = Batch(tx)
    batch.add_row(DOUBLED, {"v": 1}, {"tag": "a"})
    with pytest.raises(StoreError, match="same columns"):
        batch.add_row(DOUBLED, {"w": 1}, {"tag": "a"})


def test_add_row__an_answer_is_read_only_after_the_send(tx: Any) -> None:
    batch = Batch(tx)
    reply = batch.add_row(DOUBLED, {"v": 1}, {"tag": "a"})
    with pytest.raises(StoreError, match="before its batch is sent"):
        reply.fetchall()
