"""The SQL costing equals the plain-Python reference, to the cent, on random data."""

from __future__ import annotations

from dataclasses import asdict
from decimal import Decimal
from typing import Any

import psycopg
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from reference_costing import Cost, Move, cost_period

from flows.erp import inventory

PERIOD = "2026-11"
STORES = [1, 2, 3]
ITEMS = [1, 2, 3, 4]

qty = st.decimals(min_value=Decimal("0.001"), max_value=Decimal("500"), places=3)
money4 = st.decimals(min_value=Decimal("0.0100"), max_value=Decimal("250"), places=4)


@st.composite
def months(draw: st.DrawFn) -> tuple[dict[tuple[int, int], tuple[Decimal, Decimal]], list[Move]]:
    opening: dict[tuple[int, int], tuple[Decimal, Decimal]] = {}
    for store in STORES:
        for item in ITEMS:
            if draw(st.booleans()):
                q = draw(st.decimals(min_value=Decimal("-5"), max_value=Decimal("300"), places=3))
                v = draw(
                    st.decimals(min_value=Decimal("-50"), max_value=Decimal("30000"), places=2)
                )
                opening[(store, item)] = (q, v)
    moves: list[Move] = []
    for _ in range(draw(st.integers(0, 25))):
        store, item = draw(st.sampled_from(STORES)), draw(st.sampled_from(ITEMS))
        kind = draw(st.sampled_from(["receipt", "sale", "return", "adjustment", "transfer"]))
        q = draw(qty)
        if kind == "receipt":
            moves.append(Move(store, item, kind, q, unit_cost=draw(money4)))
        elif kind == "sale":
            moves.append(Move(store, item, kind, -q))
        elif kind == "return":
            moves.append(Move(store, item, kind, q))
        elif kind == "adjustment":
            moves.append(Move(store, item, kind, q if draw(st.booleans()) else -q))
        else:
            to = draw(st.sampled_from([s for s in STORES if s != store]))
            moves.append(Move(store, item, "transfer_out", -q, counterpart=to))
            moves.append(Move(to, item, "transfer_in", q, counterpart=store))
    return opening, moves


STANDARD = {1: Decimal("10.0000"), 2: Decimal("3.3333"), 3: Decimal("0.0700"), 4: Decimal("125.5")}


def _setup(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO erp_brands VALUES (1, 'BR1', 'Brand one')")
    for s in STORES:
        conn.execute(
            "INSERT INTO erp_stores VALUES (%s, %s, 1, %s, 'small')", (s, f"ST{s:03d}", f"S{s}")
        )
    for i, cost in STANDARD.items():
        conn.execute(
            "INSERT INTO erp_items VALUES (%s, 1, %s, %s, %s, %s)",
            (i, f"SKU{i}", f"item {i}", cost, cost * 2),
        )
    conn.execute("INSERT INTO erp_periods (period) VALUES (%s)", (PERIOD,))


def _load(conn: psycopg.Connection[Any], opening: dict[Any, Any], moves: list[Move]) -> None:
    for (store, item), (q, v) in opening.items():
        conn.execute(
            "INSERT INTO erp_opening_balances VALUES (%s, %s, %s, %s, %s)",
            (store, item, PERIOD, q, v),
        )
    with conn.cursor().copy(
        "COPY erp_stock_moves (period, store_id, item_id, moved_on, kind, qty, unit_cost, "
        "counterpart_store_id) FROM STDIN"
    ) as copy:
        for m in moves:
            copy.write_row(
                (PERIOD, m.store, m.item, "2026-11-15", m.kind, m.qty, m.unit_cost, m.counterpart)
            )


def _sql_costs(conn: psycopg.Connection[Any]) -> dict[tuple[int, int], dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM erp_item_costs WHERE period = %s ORDER BY store_id, item_id", (PERIOD,)
    ).fetchall()
    return {(r["store_id"], r["item_id"]): r for r in rows}


def _as_dict(c: Cost) -> dict[str, Decimal]:
    d = asdict(c)
    d.pop("touched")
    return d


@hsettings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(month=months())
def test_costing__sql_equals_the_reference_to_the_cent(
    dbinfo: str, month: tuple[dict[Any, Any], list[Move]]
) -> None:
    opening, moves = month
    with psycopg.connect(dbinfo, row_factory=psycopg.rows.dict_row) as conn:
        try:
            _setup(conn)
            _load(conn, opening, moves)
            for store in STORES:
                inventory.cost_store(conn, PERIOD, store)
            actual = _sql_costs(conn)
        finally:
            conn.rollback()
    expected = cost_period(opening, moves, STANDARD)
    assert set(actual) == set(expected)
    for key, cost in expected.items():
        row = actual[key]
        for name, value in _as_dict(cost).items():
            assert row[name] == value, f"{key} {name}: sql {row[name]} != reference {value}"
        # value conservation per store and item
        assert (
            row["opening_value"] + row["receipt_value"] + row["transfer_in_value"]
            == row["cogs_value"] + row["transfer_out_value"] + row["closing_value"]
        )
    # a transfer moves value between stores, it does not create or destroy it
    tin = sum((c.transfer_in_value for c in expected.values()), Decimal(0))
    tout = sum((c.transfer_out_value for c in expected.values()), Decimal(0))
    assert tin == tout
