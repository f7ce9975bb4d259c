"""The auditor's exports on real books: ``stock-ledger`` and ``item-costs``, their contract.

A small seeded month is posted and costed as the costing flow does it (solve
the averages, then each store), then read back through the commands as a
tool would: JSON Lines, decimals as strings, the two sides of a transfer
tied, and every costed store and item going from its opening value to its
closing value through the values of its moves, to the cent.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import click
import psycopg
import pytest
from click.testing import CliRunner, Result

from engine.cli.main import EngineGroup
from engine.config import Settings
from flows import costing
from flows.erp import document_posting, exports, periods
from flows.tools.exports import item_costs_command, stock_ledger_command
from flows.tools.seed import seed

NOV = "2026-11"

MOVE_KEYS = [
    "move_id", "date", "store", "sku", "kind", "quantity", "unit_cost", "value",
    "counterpart_store", "transfer_id", "document",
]  # fmt: skip
COST_KEYS = [
    "store", "sku", "standard_cost", "opening_qty", "opening_value", "receipt_qty",
    "receipt_value", "transfer_in_qty", "transfer_in_value", "average_cost", "average_from",
    "group", "issue_qty", "cogs_value", "transfer_out_qty", "transfer_out_value",
    "closing_qty", "closing_value",
]  # fmt: skip
QTY = re.compile(r"-?[0-9]+\.[0-9]{3}")
MONEY = re.compile(r"-?[0-9]+\.[0-9]{2}")
COST = re.compile(r"[0-9]+\.[0-9]{4}")
ISSUES = ("sale", "return", "adjustment")

# what `engine books` will hold; the root group decides exit codes as `engine` does
engine = EngineGroup(
    "engine",
    commands=[click.Group("books", commands=[stock_ledger_command, item_costs_command])],
)


@pytest.fixture
def month(conn: psycopg.Connection[Any]) -> None:
    """Four stores (one opened this month, stocked by transfers), items in loops, posted."""
    report = seed(conn, stores=4, brands=1, employees=4, items=6, period=NOV, seed=1, new_stores=1)
    assert report.stock_moves_by_kind.get("transfer_in", 0) > 0 and report.loop_items > 0
    document_posting.post_documents(conn, NOV, 1, 10**9)


def cost(conn: psycopg.Connection[Any], *, leave_out: Iterable[str] = ()) -> None:
    """Cost November as the costing flow's steps do: solve once, then store by store."""
    with conn.transaction():
        plan = costing.plan_costing(conn, NOV, None)
        periods.ensure_period(conn, plan.next_period)
        costing.solve_period(conn, NOV)
        for store in plan.stores:
            if store.code not in leave_out:
                costing.cost_one_store(conn, NOV, store)


def books(settings: Settings, *args: str) -> Result:
    assert settings.database_url is not None
    env = {"ENGINE_DATABASE_URL": settings.database_url.get_secret_value()}
    return CliRunner().invoke(engine, ["books", *args], env=env, catch_exceptions=False)


def _no_float(text: str) -> Any:
    raise AssertionError(f"a float in an export: {text}")


def json_lines(settings: Settings, *args: str) -> list[dict[str, Any]]:
    result = books(settings, *args, "--json")
    assert result.exit_code == 0, result.output
    return [json.loads(line, parse_float=_no_float) for line in result.stdout.splitlines()]


def test_stock_ledger__one_json_object_per_move_with_decimals_as_strings(
    settings: Settings, conn: psycopg.Connection[Any], month: None
) -> None:
    cost(conn)

    moves = json_lines(settings, "stock-ledger", "--period", NOV)

    counted = conn.execute(
        "SELECT count(*) AS n FROM erp_stock_moves WHERE period = %s", (NOV,)
    ).fetchone()
    assert counted is not None and len(moves) == counted["n"]
    assert [m["move_id"] for m in moves] == sorted(m["move_id"] for m in moves)
    assert {m["kind"] for m in moves} == {
        "receipt", "transfer_in", "transfer_out", "sale", "return", "adjustment",
    }  # fmt: skip
    for m in moves:
        assert list(m) == MOVE_KEYS
        assert type(m["move_id"]) is int
        assert re.fullmatch(r"2026-11-[0-9]{2}", m["date"])
        assert QTY.fullmatch(m["quantity"]) and MONEY.fullmatch(m["value"])
        assert (Decimal(m["quantity"]) > 0) == (
            m["kind"] in ("receipt", "transfer_in", "return")
            or (m["kind"] == "adjustment" and not m["quantity"].startswith("-"))
        )
        if m["kind"] == "receipt":
            assert COST.fullmatch(m["unit_cost"])
            received = Decimal(m["quantity"]) * Decimal(m["unit_cost"])
            assert Decimal(m["value"]) == received.quantize(Decimal("0.01"))
        else:
            assert m["unit_cost"] is None
        transfer = m["kind"].startswith("transfer_")
        assert (m["counterpart_store"] is not None) == transfer
        assert (m["transfer_id"] is not None) == transfer
        assert m["document"] and (not transfer or m["transfer_id"].startswith(m["document"]))


def test_stock_ledger__the_two_sides_of_a_transfer_share_an_id_and_a_value(
    settings: Settings, conn: psycopg.Connection[Any], month: None
) -> None:
    cost(conn)

    moves = json_lines(settings, "stock-ledger", "--period", NOV)

    sides: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in moves:
        if m["transfer_id"] is not None:
            sides[m["transfer_id"]].append(m)
    assert sides
    for transfer_id, pair in sides.items():
        out, into = sorted(pair, key=lambda m: m["kind"] != "transfer_out")
        assert (out["kind"], into["kind"]) == ("transfer_out", "transfer_in"), transfer_id
        assert Decimal(out["quantity"]) == -Decimal(into["quantity"]) < 0
        assert Decimal(out["value"]) == -Decimal(into["value"])
        assert (out["store"], out["counterpart_store"]) == (
            into["counterpart_store"],
            into["store"],
        )
        assert (out["sku"], out["date"], out["document"]) == (
            into["sku"],
            into["date"],
            into["document"],
        )


def test_stock_ledger__each_store_item_goes_from_opening_to_closing_through_its_moves(
    settings: Settings, conn: psycopg.Connection[Any], month: None
) -> None:
    cost(conn)

    costs = json_lines(settings, "item-costs", "--period", NOV)
    moves = json_lines(settings, "stock-ledger", "--period", NOV)

    by_item: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for m in moves:
        by_item[m["store"], m["sku"]].append(m)
    assert {(c["store"], c["sku"]) for c in costs} >= set(by_item)
    assert any(c["group"] is not None for c in costs)  # the loops are in the identity too
    for c in costs:
        assert list(c) == COST_KEYS
        assert COST.fullmatch(c["average_cost"]) and COST.fullmatch(c["standard_cost"])
        assert c["average_from"] in ("solved", "fallback_opening", "fallback_standard")
        its = by_item[c["store"], c["sku"]]
        qty = sum((Decimal(m["quantity"]) for m in its), Decimal(0))
        value = sum((Decimal(m["value"]) for m in its), Decimal(0))
        where = f"{c['store']} {c['sku']}"
        assert Decimal(c["opening_qty"]) + qty == Decimal(c["closing_qty"]), where
        assert Decimal(c["opening_value"]) + value == Decimal(c["closing_value"]), where

        def total(kinds: tuple[str, ...], its: list[dict[str, Any]] = its) -> Decimal:
            return sum((Decimal(m["value"]) for m in its if m["kind"] in kinds), Decimal(0))

        assert total(ISSUES) == -Decimal(c["cogs_value"]), where
        assert total(("receipt",)) == Decimal(c["receipt_value"]), where
        assert total(("transfer_in",)) == Decimal(c["transfer_in_value"]), where
        assert total(("transfer_out",)) == -Decimal(c["transfer_out_value"]), where
        for field in COST_KEYS[3:]:
            if field.endswith("_qty"):
                assert QTY.fullmatch(c[field]), (where, field)
            elif field.endswith("_value"):
                assert MONEY.fullmatch(c[field]), (where, field)


def test_stock_ledger__values_are_null_until_the_store_is_costed(
    settings: Settings, conn: psycopg.Connection[Any], month: None
) -> None:
    before = json_lines(settings, "stock-ledger", "--period", NOV)
    assert before and all(m["value"] is None for m in before)
    assert json_lines(settings, "item-costs", "--period", NOV) == []

    cost(conn, leave_out=["ST001"])

    after = json_lines(settings, "stock-ledger", "--period", NOV)
    assert [m["move_id"] for m in after] == [m["move_id"] for m in before]
    assert {m["store"] for m in after if m["value"] is None} == {"ST001"}
    assert {m["store"] for m in json_lines(settings, "item-costs", "--period", NOV)} == {
        "ST002", "ST003", "ST004",
    }  # fmt: skip
    table = books(settings, "stock-ledger", "--period", NOV)
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[-1] == (
        f"{len(after)} stock moves of 2026-11; no values yet: ST001 not costed for 2026-11"
    )
    costs_table = books(settings, "item-costs", "--period", NOV, "--store", "ST001")
    assert costs_table.stdout.splitlines()[-1] == (
        "0 item costs of 2026-11; no item costs: ST001 not costed for 2026-11"
    )


def test_exports__store_and_sku_narrow_both_exports(
    settings: Settings, conn: psycopg.Connection[Any], month: None
) -> None:
    cost(conn)
    everything = json_lines(settings, "stock-ledger", "--period", NOV)
    sku = next(m["sku"] for m in everything if m["store"] == "ST004")

    one_store = json_lines(settings, "stock-ledger", "--period", NOV, "--store", "ST004")
    one_item = json_lines(
        settings, "stock-ledger", "--period", NOV, "--store", "ST004", "--sku", sku
    )
    costs = json_lines(settings, "item-costs", "--period", NOV, "--sku", sku)

    assert one_store == [m for m in everything if m["store"] == "ST004"]
    assert one_item == [m for m in one_store if m["sku"] == sku]
    assert costs and {c["sku"] for c in costs} == {sku}
    table = books(settings, "item-costs", "--period", NOV, "--store", "ST004")
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["store", "sku", "average"]
    assert all(line.startswith("ST004 ") for line in lines[1:-1])
    assert lines[-1] == f"{len(lines) - 2} item costs of 2026-11"


@pytest.mark.parametrize("command", ["stock-ledger", "item-costs"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--period", "2031-01"], "period 2031-01 does not exist"),
        (["--period", "2026-13"], "--period: invalid period '2026-13': expected YYYY-MM"),
        (["--period", NOV, "--store", "ST999"], "unknown store 'ST999': no store has that code; "
         "store codes look like ST001 (4 stores, ST001 to ST004)"),
        (["--period", NOV, "--sku", "NOPE"], "unknown sku 'NOPE'"),
    ],
)  # fmt: skip
def test_exports_cli__bad_input_exits_2_naming_it(
    settings: Settings, month: None, command: str, args: list[str], message: str
) -> None:
    result = books(settings, command, *args, "--json")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert message in result.stderr


def test_stock_ledger__hostile_text_goes_out_as_json_data(
    settings: Settings, conn: psycopg.Connection[Any], month: None
) -> None:
    cost(conn)
    hostile = 'TR"},{"x":1}\n\\\u2028é\'; DROP TABLE erp_stock_moves; --'
    conn.execute(
        "UPDATE erp_documents SET number = %s WHERE id = "
        "(SELECT document_id FROM erp_stock_moves WHERE kind = 'transfer_in' "
        "ORDER BY id LIMIT 1)",
        (hostile,),
    )

    result = books(settings, "stock-ledger", "--period", NOV, "--json")
    injected = books(settings, "stock-ledger", "--period", NOV, "--store", "'; DROP TABLE x; --")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(line.isascii() for line in lines)
    moves = [json.loads(line) for line in lines]
    counted = conn.execute("SELECT count(*) AS n FROM erp_stock_moves").fetchone()
    assert counted is not None and len(moves) == counted["n"]
    tied = [m for m in moves if m["document"] == hostile]
    assert tied and all(m["transfer_id"].startswith(hostile + "/") for m in tied)
    assert injected.exit_code == 2 and 'unknown store "\'; DROP TABLE x; --"' in injected.stderr


def test_stock_ledger__streams_from_a_server_side_cursor(
    conn: psycopg.Connection[Any], month: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exports, "FETCH_ROWS", 7)
    scope = exports.resolve_scope(conn, NOV)

    moves = exports.stock_ledger(conn, scope)
    first = next(moves)
    open_cursors = conn.execute("SELECT count(*) AS n FROM pg_cursors").fetchone()
    rest = list(moves)

    assert open_cursors is not None and open_cursors["n"] == 1
    assert first.move_id < rest[0].move_id and len(rest) > 7
    gone = conn.execute("SELECT count(*) AS n FROM pg_cursors").fetchone()
    assert gone is not None and gone["n"] == 0
