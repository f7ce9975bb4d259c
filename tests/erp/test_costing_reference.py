"""The costing in the database equals the plain-Python reference, to the cent, on random months.

The reference (``reference_costing``) was written from the method's text,
not from the code under test; the months (``costing_strategies``) are drawn
to hit what breaks other ERPs: loops of transfers between stores, new stores
forwarding what they received, negative stock, groups of stores that only
supply each other. Every figure of every (store, item) must match, including
how the average was found and the loop it belongs to.
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

import psycopg
from costing_strategies import Month, months
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from reference_costing import Cost, cost_period

from flows.erp import inventory

PERIOD = "2026-11"
STORES = range(1, 7)  # the strategies draw store ids 1..6
FIGURES = (
    "opening_qty",
    "opening_value",
    "receipt_qty",
    "receipt_value",
    "transfer_in_qty",
    "transfer_in_value",
    "average_cost",
    "average_from",
    "issue_qty",
    "cogs_value",
    "transfer_out_qty",
    "transfer_out_value",
    "closing_qty",
    "closing_value",
)


def _setup(conn: psycopg.Connection[Any], month: Month) -> None:
    conn.execute("INSERT INTO erp_brands VALUES (1, 'BR1', 'Brand one')")
    for s in STORES:
        conn.execute(
            "INSERT INTO erp_stores VALUES (%s, %s, 1, %s, 'small')", (s, f"ST{s:03d}", f"S{s}")
        )
    conn.execute("INSERT INTO erp_employees VALUES (1, 1, 'Ann', 'clerk')")
    for item, cost in month.standard_cost.items():
        conn.execute(
            "INSERT INTO erp_items VALUES (%s, 1, %s, %s, %s, %s)",
            (item, f"SKU{item}", f"item {item}", cost, cost * 2),
        )
    conn.execute("INSERT INTO erp_periods (period) VALUES (%s)", (PERIOD,))
    conn.execute(
        "INSERT INTO erp_store_periods (store_id, period, opening) "
        "SELECT id, %s, 'loaded' FROM erp_stores",
        (PERIOD,),
    )
    # every move is a line of one posted document (the two sides of a transfer share one)
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on, "
        "status) VALUES (1, 'SC-1', 'stock_count', %s, 1, 1, '2026-11-15', 'posted')",
        (PERIOD,),
    )


def _load(conn: psycopg.Connection[Any], month: Month) -> None:
    for (store, item), (q, v) in month.opening.items():
        conn.execute(
            "INSERT INTO erp_opening_balances VALUES (%s, %s, %s, %s, %s)",
            (store, item, PERIOD, q, v),
        )
    line, rows = 0, []
    for m in month.moves:
        if m.kind != "transfer_in":  # a transfer_in follows its transfer_out: same line
            line += 1
        rows.append((PERIOD, m.store, m.item, m.kind, m.qty, m.unit_cost, m.counterpart, line))
    with conn.cursor().copy(
        "COPY erp_stock_moves (period, store_id, item_id, moved_on, kind, qty, unit_cost, "
        "counterpart_store_id, document_id, line_no) FROM STDIN"
    ) as copy:
        for period, store, item, kind, qty, unit, cp, n in rows:
            copy.write_row((period, store, item, "2026-11-15", kind, qty, unit, cp, 1, n))


def _group(cost: Cost) -> str | None:
    return None if cost.group is None else "+".join(f"ST{s:03d}" for s in cost.group)


@hsettings(
    max_examples=int(os.environ.get("ERP_COSTING_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(month=months())
def test_costing__database_equals_the_reference_to_the_cent(dbinfo: str, month: Month) -> None:
    with psycopg.connect(dbinfo, row_factory=psycopg.rows.dict_row) as conn:
        try:
            _setup(conn, month)
            _load(conn, month)
            inventory.solve_averages(conn, PERIOD)
            for store in STORES:
                inventory.cost_store(conn, PERIOD, store)
            rows = conn.execute(
                "SELECT * FROM erp_item_costs WHERE period = %s", (PERIOD,)
            ).fetchall()
        finally:
            conn.rollback()
    actual = {(r["store_id"], r["item_id"]): r for r in rows}
    expected = cost_period(month.opening, month.moves, month.standard_cost)
    assert set(actual) == set(expected)
    for key, cost in expected.items():
        row = actual[key]
        for name in FIGURES:
            assert row[name] == getattr(cost, name), f"{key} {name}: db {row[name]} != reference"
        assert row["loop_group"] == _group(cost), key
    # a transfer moves value between stores, it does not create or destroy it
    tin = sum((r["transfer_in_value"] for r in rows), Decimal(0))
    tout = sum((r["transfer_out_value"] for r in rows), Decimal(0))
    assert tin == tout
