"""Backdated documents recosted forward, only where they reach (issue 36, bullets 3 and 5).

A document that moves stock, posted into a costed period, marks the pairs it
changes stale (those it moves, those its transfers reach, the same pairs in
later costed periods); the next costing recosts exactly those, forward, with
delta journals; the books then equal a full recost of the same facts, to the
cent. Real PostgreSQL; the flows' own functions, and the costing flow through
a worker.
"""

from __future__ import annotations

import os
import random
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbpool import built_once
from erp_books import close, cost, post
from erp_checks import assert_costs_equal_reference
from harness import (
    fast_settings,
    run_of,
    start_worker_process,
    thread_worker,
    wait_job_ended,
    wait_until,
)
from psycopg.rows import dict_row
from recost_books import count, figures, receipt, sale, stale_pairs, transfer, uncost

from engine import Refused, Registry, submit
from engine.config import Settings
from engine.reports import render_job_report
from flows.erp import checks, facts, inventory, recost
from flows.erp.document_posting import post_documents, select_chunks
from flows.tools.seed import seed

NOV, DEC, JAN = "2026-11", "2026-12", "2027-01"
FLOWS = ["flows.costing", "flows.posting", "flows.close"]


@pytest.fixture
def books(conn: psycopg.Connection[Any]) -> None:
    """Three stores (the third opened in November, stocked by a transfer); November posted
    and costed, December costed (nothing moved in it)."""

    def build(c: psycopg.Connection[Any]) -> None:
        seed(c, stores=3, brands=1, employees=3, items=5, period=NOV, seed=9, new_stores=1)
        post(c, NOV)
        cost(c, NOV)
        cost(c, DEC)

    built_once(conn, "test_recost.books", build)


def moving(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """An item moving between stores in November: its sender and its receiver."""
    row = conn.execute(
        "SELECT item_id AS id, counterpart_store_id AS sender, store_id AS receiver "
        "FROM erp_stock_moves WHERE period = %s AND kind = 'transfer_in' ORDER BY id LIMIT 1",
        (NOV,),
    ).fetchone()
    assert row is not None, "the seed moves an item between stores"
    return dict(row)


def downstream(conn: psycopg.Connection[Any], period: str, store: int, item: int) -> set[int]:
    """The stores ``store``'s transfers of ``item`` reach in ``period``, itself included."""
    reached, todo = {store}, [store]
    while todo:
        s = todo.pop()
        for r in conn.execute(
            "SELECT counterpart_store_id AS r FROM erp_stock_moves WHERE period = %s "
            "AND store_id = %s AND item_id = %s AND kind = 'transfer_out'",
            (period, s, item),
        ):
            if r["r"] not in reached:
                reached.add(r["r"])
                todo.append(r["r"])
    return reached


def assert_equal_to_full_recost(conn: psycopg.Connection[Any], *periods: str) -> None:
    """The books as they are equal the same facts costed from scratch, to the cent."""
    incremental = figures(conn)
    uncost(conn, periods[0])
    for p in periods:
        cost(conn, p)
    full = figures(conn)
    for part in ("costs", "openings", "ledger"):
        assert incremental[part] == full[part], part


def assert_books_check(conn: psycopg.Connection[Any], *periods: str) -> None:
    """Every identity of ``engine books check`` holds (the flags judge the data: random
    sales beyond the stock raise "negative stock" there, after a full recost too)."""
    for p in periods:
        report = checks.check_period(conn, p)
        assert all(c.ok for c in report.checks), (p, report.problems)


# -- marks ------------------------------------------------------------------------------


def test_stale__a_receipt_into_a_costed_period_is_posted_and_marks_its_reach_forward(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(4), Decimal("3.17"), "2026-11-03")
    with conn.transaction():
        select_chunks(conn, NOV)  # not refused: November is costed, not being costed
    post(conn, NOV)
    reach = downstream(conn, NOV, item["sender"], item["id"])
    assert item["receiver"] in reach
    expected = {(p, s, item["id"]) for p in (NOV, DEC) for s in reach}
    assert stale_pairs(conn) == expected
    found = recost.stale(conn, NOV)
    assert found is not None and found.pairs == len(reach)
    report = checks.check_period(conn, NOV)
    assert not report.ok
    assert any(
        c.name == "costs up to date (no stale pairs)"
        and c.detail.startswith(f"{len(reach)} pair(s) stale since ")
        and c.detail.endswith(f"run engine submit costing --period {NOV}")
        for c in report.checks
    )
    with pytest.raises(Refused, match="stale since"):
        close(conn, NOV)
    with pytest.raises(Refused, match=f"{NOV} has {len(reach)} stale pair"), conn.transaction():
        cost(conn, DEC)


def test_stale__a_sale_marks_its_pair_only_and_later_periods(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    sale(conn, item["receiver"], item["id"], Decimal(1), Decimal("9.99"), "2026-11-30")
    post(conn, NOV)
    reach = downstream(conn, NOV, item["receiver"], item["id"])
    assert stale_pairs(conn) == {(p, s, item["id"]) for p in (NOV, DEC) for s in reach}


def test_stale__posting_is_still_refused_while_a_later_period_is_being_costed(
    conn: psycopg.Connection[Any], books: None
) -> None:
    with conn.transaction():
        from flows import costing

        costing.plan_costing(conn, JAN, None)
        costing.solve_period(conn, JAN)  # January solved, no store costed: being costed
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(1), Decimal(2), "2026-11-03")
    with (
        pytest.raises(Refused, match=f"{JAN} is being costed and {NOV}'s closings"),
        conn.transaction(),
    ):
        select_chunks(conn, NOV)


# -- recost -----------------------------------------------------------------------------


def test_recost__the_next_costing_recosts_forward_and_equals_a_full_recost(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(7), Decimal("5.33"), "2026-11-02")
    transfer(conn, item["receiver"], item["sender"], item["id"], Decimal(1), "2026-11-20")
    post(conn, NOV)
    with conn.transaction():
        report = recost.recost(conn, NOV, job=uuid.uuid4())
    assert report.periods == [NOV, DEC]
    assert stale_pairs(conn) == set()
    assert report.items_solved == 1  # December: no transfer, nothing to solve
    assert {j.period for j in report.journals} == {NOV}  # December's COGS did not change
    assert all(j.source_key.startswith(f"recost:{NOV}:") for j in report.journals)
    pair = next(p for p in report.recosted if p.period == NOV)
    assert pair.old_average != pair.new_average
    assert_books_check(conn, NOV, DEC)
    assert_costs_equal_reference(conn, NOV)
    assert_costs_equal_reference(conn, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


def kept_facts(conn: psycopg.Connection[Any], period: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT facts FROM erp_average_solves WHERE period = %s", (period,)
    ).fetchone()
    assert row is not None
    return dict(row["facts"])


@pytest.mark.parametrize("new_mover", [False, True], ids=["same_movers", "new_mover"])
def test_recost__keeps_the_fingerprint_a_full_one_would_take(
    conn: psycopg.Connection[Any], books: None, new_mover: bool
) -> None:
    """The recost hashes again only the stores it recosted; what it keeps equals the whole
    fingerprint taken afresh (and, when an item starts moving between stores, is that)."""
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(7), Decimal("5.33"), "2026-11-02")
    if new_mover:
        still = conn.execute(
            "SELECT id FROM erp_items WHERE id NOT IN (SELECT item_id FROM erp_stock_moves "
            "WHERE period = %s AND kind = 'transfer_in') ORDER BY id LIMIT 1",
            (NOV,),
        ).fetchone()
        assert still is not None
        receipt(conn, item["sender"], still["id"], Decimal(3), Decimal("2.10"), "2026-11-02")
        transfer(conn, item["sender"], item["receiver"], still["id"], Decimal(2), "2026-11-03")
    post(conn, NOV)
    with conn.transaction():
        recost.recost(conn, NOV, job=uuid.uuid4())
    for period in (NOV, DEC):
        assert kept_facts(conn, period) == facts.fingerprint(conn, period), period


def test_recost__a_store_changed_behind_the_engine_is_still_named_after_a_recost(
    conn: psycopg.Connection[Any], books: None
) -> None:
    """A receipt changed by SQL at one store, a backdated sale at another: the recost hashes
    only the sale's store again, so the check still names the one changed behind its back."""
    item = moving(conn)
    tampered = conn.execute(
        "SELECT s.id, s.store_id, st.code FROM erp_stock_moves AS s "
        "JOIN erp_stores AS st ON st.id = s.store_id WHERE s.period = %s AND s.kind = 'receipt' "
        "AND s.item_id = %s AND s.store_id <> %s ORDER BY s.id LIMIT 1",
        (NOV, item["id"], item["receiver"]),
    ).fetchone()
    assert tampered is not None, "the seed receives a moving item at its sender"
    conn.execute(
        "UPDATE erp_stock_moves SET unit_cost = unit_cost + 1 WHERE id = %s", (tampered["id"],)
    )
    sale(conn, item["receiver"], item["id"], Decimal(1), Decimal("9.90"), "2026-11-21")
    post(conn, NOV)
    with conn.transaction():
        recost.recost(conn, NOV, job=uuid.uuid4())
    why = facts.stale_reason(conn, NOV)
    assert why is not None and tampered["code"] in why, why


def test_recost__a_carry_of_many_pairs_joins_by_hashing_then_gives_the_planner_back(
    conn: psycopg.Connection[Any], books: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond BULK_PAIRS the carry runs with nested loops off (a just-carried period's
    '1 row' statistics made a loop over its openings per pair run past the statement
    timeout on a recost of every pair); the books are the same, and the setting is back
    for the rest of the transaction."""
    monkeypatch.setattr(recost, "BULK_PAIRS", 0)
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(7), Decimal("5.33"), "2026-11-02")
    post(conn, NOV)
    with conn.transaction():
        report = recost.recost(conn, NOV, job=uuid.uuid4())
        assert conn.execute("SHOW enable_nestloop").fetchone() == {"enable_nestloop": "on"}
    assert report.periods == [NOV, DEC]
    assert_books_check(conn, NOV, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


def test_recost__a_store_with_nothing_journaled_in_its_first_costing_gets_only_the_delta(
    conn: psycopg.Connection[Any], books: None
) -> None:
    # December moved nothing: its first costing posted no costing journal at all
    assert not conn.execute("SELECT 1 FROM erp_journals WHERE period = %s", (DEC,)).fetchall()
    item = moving(conn)
    sale(conn, item["receiver"], item["id"], Decimal(1), Decimal("9.99"), "2026-12-05")
    transfer(conn, item["sender"], item["receiver"], item["id"], Decimal(1), "2026-12-06")
    post(conn, DEC)
    cost(conn, DEC)  # as the flow: recost, then each store's step (costed before: no journal)
    keys = [
        r["source_key"]
        for r in conn.execute(
            "SELECT source_key FROM erp_journals WHERE period = %s AND source = 'costing'", (DEC,)
        )
    ]
    assert keys and all(k.startswith(f"recost:{DEC}:") for k in keys)
    assert_books_check(conn, NOV, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


def test_recost__many_corrections_of_one_item_make_one_recompute(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    for n in range(20):
        receipt(conn, item["sender"], item["id"], Decimal(1 + n), Decimal("1.01"), "2026-11-05")
    post(conn, NOV)
    with conn.transaction():
        report = recost.recost(conn, NOV, job=uuid.uuid4())
    reach = downstream(conn, NOV, item["sender"], item["id"])
    assert report.items_solved == 1
    assert report.pairs == 2 * len(reach)  # each pair once, in November and December
    assert_books_check(conn, NOV, DEC)


def test_recost__the_facts_fingerprint_has_an_index_for_each_item_s_question(
    conn: psycopg.Connection[Any],
) -> None:
    """The fingerprint asks, per item, whether the period has an opening or a move of it
    (facts.sql, ``facts_fingerprint``). Without an index led by both columns on the
    openings each question scanned every period's openings: 13 s of a 1M-move month's
    recost step through a worker. (A plan test cannot show it on a test-sized month: the
    planner hashes the few openings there.)"""
    assert "o.period = %(period)s AND o.item_id = i.id" in facts._q["facts_fingerprint"]
    assert "s.period = %(period)s AND s.item_id = i.id" in facts._q["facts_fingerprint"]
    led = {
        r["t"]
        for r in conn.execute(
            "SELECT c.relname AS t FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indrelid "
            "WHERE c.relname IN ('erp_opening_balances', 'erp_stock_moves') "
            "AND (SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(x.indkey) "
            "     WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute AS a "
            "     ON a.attrelid = x.indrelid AND a.attnum = k.attnum WHERE k.n <= 2) "
            "    @> ARRAY['period', 'item_id']::name[]"
        )
    }
    assert led == {"erp_opening_balances", "erp_stock_moves"}


def test_recost__runs_with_jit_off_for_its_transaction_only(
    conn: psycopg.Connection[Any], books: None
) -> None:
    """Like the store's costing: its statements' inflated estimates made LLVM compile for
    seconds (3-5 s of a 0.4 s recost through a worker at ~1M moves)."""
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(3), Decimal("1.01"), "2026-11-05")
    post(conn, NOV)
    before = conn.execute("SHOW jit").fetchone()
    with conn.transaction():
        recost.recost(conn, NOV, job=uuid.uuid4())
        assert conn.execute("SHOW jit").fetchone() == {"jit": "off"}
    assert conn.execute("SHOW jit").fetchone() == before


def _scans_of(node: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    """The scans of ``relation`` in a JSON plan, its sub-plans included."""
    found = [node] if node.get("Relation Name") == relation else []
    for child in node.get("Plans", []):
        found += _scans_of(child, relation)
    return found


def _loops_reading(node: dict[str, Any], relation: str) -> list[int]:
    """The actual loops of every node of an analyzed JSON plan that reads ``relation``
    (the scan and each node above it)."""
    below = [n for child in node.get("Plans", []) for n in _loops_reading(child, relation)]
    if below or node.get("Relation Name") == relation:
        return [node["Actual Loops"], *below]
    return []


def test_recost__reads_its_pairs_item_costs_by_their_key_whatever_the_estimates(
    conn: psycopg.Connection[Any], books: None
) -> None:
    """The report's old and new figures of the recosted pairs are read pair by pair on the
    key. A period costed after the statistics were taken is '1 row' to the planner, which
    then scanned every item cost of the period once per pair (0.66 s of a 0.77 s recost of
    6 pairs at ~1M moves: the books corrected 1.1 s after the submit through a worker)."""
    conn.execute("ANALYZE erp_item_costs")  # January has no item costs yet
    cost(conn, JAN)
    pairs = conn.execute(
        "SELECT store_id, item_id FROM erp_item_costs WHERE period = %s ORDER BY 1, 2 LIMIT 2",
        (JAN,),
    ).fetchall()
    assert len(pairs) == 2
    params = {
        "period": JAN,
        "stores": [p["store_id"] for p in pairs],
        "items": [p["item_id"] for p in pairs],
    }
    row = conn.execute(
        "EXPLAIN (FORMAT JSON) " + recost._q["item_costs_select_pairs"], params
    ).fetchone()
    assert row is not None
    scans = _scans_of(next(iter(row.values()))[0]["Plan"], "erp_item_costs")
    # each scan is made for one pair (its condition names the pair's columns), not run whole
    conditions = [f"{s.get('Index Cond', '')} {s.get('Filter', '')}" for s in scans]
    assert conditions and all("p.store_id" in c and "p.item_id" in c for c in conditions), scans
    assert len(recost._q.rows(conn, "item_costs_select_pairs", params)) == 2


def test_recost__a_job_reads_its_stores_totals_with_each_store_s_counts_read_once(
    conn: psycopg.Connection[Any], books: None
) -> None:
    """A recost's job reads the totals of every store costed before (``costed_before``). The
    stock counts' share is summed from each store's counts once, each count valuing its item
    by key: joined to the item costs of a period costed after the statistics were taken
    ('1 row' to the planner), the counts were aggregated again for every item cost (11.9 s
    of a recost job's first run at ~1M moves, through a worker)."""
    conn.execute("ANALYZE erp_item_costs, erp_stock_moves")  # January: nothing yet
    stores = [r["id"] for r in conn.execute("SELECT id FROM erp_stores ORDER BY id")]
    items = [r["id"] for r in conn.execute("SELECT id FROM erp_items ORDER BY id LIMIT 3")]
    for store in stores:
        for item in items:
            receipt(conn, store, item, Decimal(5), Decimal("2.10"), "2027-01-04")
            count(conn, store, item, Decimal(-1), "2027-01-20")
    post(conn, JAN)
    cost(conn, JAN)
    params = {"period": JAN, "stores": stores}
    row = conn.execute(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + inventory._q["store_costs_totals"], params
    ).fetchone()
    assert row is not None
    loops = _loops_reading(next(iter(row.values()))[0]["Plan"], "erp_stock_moves")
    assert loops and max(loops) <= len(stores), loops  # a store's counts read (and summed) once
    totals = inventory.totals_of_stores(conn, JAN, stores)
    valued = conn.execute(
        "SELECT a.store_id, sum(round(a.qty * c.average_cost, 2)) AS value FROM ("
        "  SELECT store_id, item_id, -sum(qty) AS qty FROM erp_stock_moves"
        "  WHERE period = %s AND kind = 'adjustment' GROUP BY store_id, item_id) AS a "
        "JOIN erp_item_costs AS c ON c.period = %s AND c.store_id = a.store_id "
        "AND c.item_id = a.item_id GROUP BY a.store_id",
        (JAN, JAN),
    ).fetchall()
    assert {r["store_id"]: r["value"] for r in valued} == {
        s: totals[s].adjustment_value for s in stores
    }


def test_recost__plans_each_statement_for_its_own_pairs_in_its_transaction_only(
    conn: psycopg.Connection[Any], books: None
) -> None:
    """Its statements take arrays of one to every pair: a generic plan (a statement run
    five times on a worker's connection is prepared, and may then be planned once for any
    array) must not serve a recost of every pair with a plan made for a few."""
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(3), Decimal("1.01"), "2026-11-05")
    post(conn, NOV)
    before = conn.execute("SHOW plan_cache_mode").fetchone()
    with conn.transaction():
        recost.recost(conn, NOV, job=uuid.uuid4())
        inside = conn.execute("SHOW plan_cache_mode").fetchone()
    assert inside == {"plan_cache_mode": "force_custom_plan"}
    assert conn.execute("SHOW plan_cache_mode").fetchone() == before


def test_recost__a_posting_after_the_recost_is_marked_for_the_next_one(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(2), Decimal(4), "2026-11-02")
    post(conn, NOV)
    cost(conn, NOV)
    sale(conn, item["sender"], item["id"], Decimal(1), Decimal(9), "2026-11-29")
    post(conn, NOV)
    assert stale_pairs(conn)
    cost(conn, NOV)
    assert stale_pairs(conn) == set()
    assert_books_check(conn, NOV, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


def test_recost__a_reopened_period_corrects_the_same_way_and_closes_again(
    conn: psycopg.Connection[Any], books: None
) -> None:
    from flows.erp import periods

    close(conn, NOV)
    with pytest.raises(psycopg.errors.CheckViolation, match=f"period {NOV} is closed"):
        conn.execute(
            "UPDATE erp_item_costs SET closing_value = closing_value WHERE period = %s", (NOV,)
        )
    with conn.transaction():
        periods.reopen(conn, NOV, actor="test", reason="late delivery note")
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(3), Decimal("2.50"), "2026-11-10")
    post(conn, NOV)
    cost(conn, NOV)
    close(conn, NOV)
    assert_books_check(conn, NOV, DEC)


def _other(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    return psycopg.connect(
        conn.info.dsn, password=conn.info.password, autocommit=True, row_factory=dict_row
    )


def _waiting_on_a_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type = 'Lock' AS waiting FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return bool(row and row["waiting"])


def test_recost__a_posting_in_flight_when_the_recost_starts_is_included(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(2), Decimal(3), "2026-11-02")
    post(conn, NOV)  # stale already: the recost takes its locks
    receipt(conn, item["receiver"], item["id"], Decimal(1), Decimal(8), "2026-11-09")
    with _other(conn) as posting, _other(conn) as costing:
        posting.execute("BEGIN")
        post_documents(posting, NOV, 1, 10**9)  # marks, not committed yet
        done: list[recost.RecostReport] = []
        thread = threading.Thread(
            target=lambda: done.append(_in_transaction(costing, NOV)), daemon=True
        )
        thread.start()
        wait_until(lambda: _waiting_on_a_lock(conn, costing.info.backend_pid), what="the recost")
        posting.execute("COMMIT")
        thread.join(timeout=30)
    assert done and done[0].pairs > 0  # it waited for the posting and recosted its pairs
    assert stale_pairs(conn) == set()
    assert_books_check(conn, NOV, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


def test_recost__a_posting_that_comes_during_a_recost_is_marked_for_the_next_one(
    conn: psycopg.Connection[Any], books: None
) -> None:
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(2), Decimal(3), "2026-11-02")
    post(conn, NOV)
    receipt(conn, item["receiver"], item["id"], Decimal(1), Decimal(8), "2026-11-09")
    with _other(conn) as posting, _other(conn) as costing:
        costing.execute("BEGIN")
        recost.recost(costing, NOV, job=uuid.uuid4())  # not committed yet
        thread = threading.Thread(target=lambda: post(posting, NOV), daemon=True)
        thread.start()
        wait_until(lambda: _waiting_on_a_lock(conn, posting.info.backend_pid), what="the posting")
        costing.execute("COMMIT")
        thread.join(timeout=30)
    assert {p for p, _, _ in stale_pairs(conn)} == {NOV, DEC}  # never lost: the next one's
    cost(conn, NOV)
    assert stale_pairs(conn) == set()
    assert_books_check(conn, NOV, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


def _in_transaction(conn: psycopg.Connection[Any], period: str) -> recost.RecostReport:
    with conn.transaction():
        return recost.recost(conn, period, job=uuid.uuid4())


# -- exact: random corrections against a full recost ----------------------------------------


CASES = int(os.environ.get("ERP_RECOST_CASES", "3"))


def _random_document(
    conn: psycopg.Connection[Any],
    rng: random.Random,
    period: str,
    stores: list[int],
    items: list[int],
) -> None:
    day = f"{period}-{rng.choice((1, 1, 15, 28)):02d}"  # same-day moves, often
    item = rng.choice(items)
    kind = rng.choice(("receipt", "receipt", "sale", "count", "transfer", "loop"))
    qty = Decimal(rng.randint(1, 9))
    if kind == "receipt":
        receipt(conn, rng.choice(stores), item, qty, Decimal(rng.randint(100, 999)) / 100, day)
    elif kind == "sale":
        sale(conn, rng.choice(stores), item, qty, Decimal("19.99"), day)
    elif kind == "count":
        count(conn, rng.choice(stores), item, qty * rng.choice((-1, 1)), day)
    else:
        a, b = rng.sample(stores, 2)
        transfer(conn, a, b, item, qty, day)
        if kind == "loop":
            transfer(conn, b, a, item, Decimal(rng.randint(1, 3)), day)


@pytest.mark.parametrize("case", range(CASES))
def test_recost__any_backdated_corrections_equal_a_full_recost_to_the_cent(
    conn: psycopg.Connection[Any], case: int
) -> None:
    rng = random.Random(case)
    seed(conn, stores=4, brands=1, employees=4, items=4, period=NOV, seed=100 + case, new_stores=1)
    stores = [r["id"] for r in conn.execute("SELECT id FROM erp_stores ORDER BY id")]
    items = [r["id"] for r in conn.execute("SELECT id FROM erp_items ORDER BY id")]
    post(conn, NOV)
    cost(conn, NOV)
    for _ in range(6):  # December's own month
        _random_document(conn, rng, DEC, stores, items)
    post(conn, DEC)
    cost(conn, DEC)
    for _round in range(2):  # corrections into each costed period, recosted, then again
        for _ in range(rng.randint(1, 6)):
            period = rng.choice((NOV, DEC))
            _random_document(conn, rng, period, stores, items)
        post(conn, NOV)
        post(conn, DEC)
        marked = stale_pairs(conn)
        assert marked, "a correction into a costed period marks what it moves"
        cost(conn, min(marked)[0])  # the earliest period with stale pairs, and forward
        assert stale_pairs(conn) == set()
        assert_books_check(conn, NOV, DEC)
    assert_costs_equal_reference(conn, NOV)
    assert_costs_equal_reference(conn, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


# -- through a worker ---------------------------------------------------------------------


@pytest.fixture
def registry() -> Registry:
    return Registry.load(FLOWS)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "reports"))
    return fast_settings(
        settings, flow_modules=FLOWS, concurrency=2, reports_dir=tmp_path / "reports"
    )


@pytest.fixture
def worker(fast: Settings, registry: Registry, books: None) -> Iterator[None]:
    with thread_worker(fast, registry):
        yield


def test_recost__the_costing_job_reports_each_pair_and_its_delta_journal(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None
) -> None:
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(5), Decimal("4.44"), "2026-11-04")
    post(conn, NOV)
    job = submit("costing", {"period": NOV}, settings=fast, registry=registry)
    assert wait_job_ended(conn, job.job_id, timeout=60) == "done"
    summary = run_of(conn, job.job_id, "summarize")["output"]
    done = summary["recost"]
    assert done["periods"] == [NOV, DEC]
    assert done["journals"] and done["recosted"]
    assert summary["note"].startswith("recosted ")
    assert stale_pairs(conn) == set()
    assert_books_check(conn, NOV, DEC)
    # every store was costed before: read in one step, not one claim and checkpoint each
    steps = {
        r["step"]: r["n"]
        for r in conn.execute(
            "SELECT step, count(*) AS n FROM engine_step_runs WHERE job_id = %s GROUP BY step",
            (job.job_id,),
        )
    }
    assert "cost_store" not in steps and steps["costed_before"] == 1
    assert [c["store"]["code"] for c in summary["per_store"]] == ["ST001", "ST002", "ST003"]
    html = Path(render_job_report(fast, job.job_id)).read_text()
    assert "Recost" in html and done["journals"][0]["source_key"] in html


# -- a worker killed mid-recost ---------------------------------------------------------------

QUICK_RECOVERY = {"lease_s": 2.0, "heartbeat_s": 0.5, "visibility_s": 3.0}


def test_recost__a_worker_killed_minus_9_mid_recost_resumes_to_the_same_books(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], books: None
) -> None:
    """The recost has re-solved and rewritten November and carried its closings when it
    waits on a December item cost the test holds: the worker is killed there (SIGKILL), its
    transaction dies with it, and the next worker's attempt recosts the same pairs once."""
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(6), Decimal("7.77"), "2026-11-03")
    post(conn, NOV)
    with psycopg.connect(conn.info.dsn, password=conn.info.password) as locker:
        held = locker.execute(
            "SELECT c.store_id FROM erp_item_costs AS c JOIN erp_stale_pairs AS s "
            "USING (period, store_id, item_id) WHERE c.period = %s LIMIT 1 FOR UPDATE OF c",
            (DEC,),
        ).fetchone()
        assert held is not None, "a stale December pair has its item cost"
        job = submit("costing", {"period": NOV}, settings=fast, registry=registry)
        worker = start_worker_process(fast, concurrency=1, flow_modules=FLOWS, **QUICK_RECOVERY)
        try:
            wait_until(
                lambda: conn.execute(
                    # the one lock the test holds: December's item cost, which only the
                    # recost's rewrite of December's pairs waits on
                    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> %s",
                    (locker.info.backend_pid,),
                ).fetchone(),
                timeout=60,
                what="the recost to wait on December's item cost",
            )
            assert run_of(conn, job.job_id, "recost_stale")["status"] == "running"
            worker.kill()
        finally:
            worker.kill()
        locker.rollback()
    assert worker.returncode == -9
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE status = 'running'"
    )
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id, timeout=90) == "done"
    assert run_of(conn, job.job_id, "recost_stale")["attempts"] == 2
    done = run_of(conn, job.job_id, "summarize")["output"]["recost"]
    journals = conn.execute(
        "SELECT source_key FROM erp_journals WHERE source_key LIKE 'recost:%' ORDER BY 1"
    ).fetchall()
    assert [j["source_key"] for j in journals] == sorted(j["source_key"] for j in done["journals"])
    assert stale_pairs(conn) == set()
    assert_books_check(conn, NOV, DEC)
    assert_equal_to_full_recost(conn, NOV, DEC)


def test_recost__the_close_posts_a_late_receipt_and_its_costing_recosts_it_first(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], worker: None
) -> None:
    item = moving(conn)
    receipt(conn, item["sender"], item["id"], Decimal(2), Decimal("6.10"), "2026-11-12")
    job = submit("close", {"period": NOV}, settings=fast, registry=registry)
    assert wait_job_ended(conn, job.job_id, timeout=90) == "done"
    assert stale_pairs(conn) == set()
    row = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (NOV,)).fetchone()
    assert row == {"status": "closed"}
    assert conn.execute(
        "SELECT 1 FROM erp_journals WHERE source_key LIKE %s", (f"recost:{NOV}:%",)
    ).fetchall()
    assert_books_check(conn, NOV, DEC)
