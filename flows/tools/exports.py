"""``engine books stock-ledger`` and ``engine books item-costs``: a period's exports.

::

    engine books stock-ledger --period 2026-11 [--store ST001] [--sku BR1-000001] [--json]
    engine books item-costs --period 2026-11 [--store ST001] [--sku BR1-000001] [--json]

With ``--json``, JSON Lines: one object per stock move or per store and
item, the contract of :class:`flows.erp.exports.StockMove` and
:class:`~flows.erp.exports.ItemCost` (decimals as strings), written as the
rows come from the database. Without it, a table for people, then a count.
Both read in one read-only transaction; an unknown period, store or sku
exits 2 naming it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import click
import psycopg
from pydantic import BaseModel

from flows.erp import exports
from flows.erp.exports import ExportScope, ItemCost, StockMove
from flows.tools.session import books_transaction, parse_period_option, period_option

__all__ = ["item_costs_command", "stock_ledger_command"]

M = TypeVar("M", bound=BaseModel)


def _write_lines(lines: Iterable[str]) -> int:
    """Write ``lines`` to stdout as they come; how many. A reader that stops early is no error."""
    out = sys.stdout
    n = 0
    try:
        for line in lines:
            out.write(line)
            out.write("\n")
            n += 1
        out.flush()
    except BrokenPipeError:
        # `... --json | head`: stop quietly; stdout to devnull so the exit flush cannot fail
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return n


def _json_lines(rows: Iterable[M]) -> Iterator[str]:
    # json.dumps does the escaping: a store's or document's text goes out as data
    return (json.dumps(row.model_dump(mode="json")) for row in rows)


def _money(value: Decimal | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _export(
    period: str,
    store: str | None,
    sku: str | None,
    show: Callable[[psycopg.Connection[Any], ExportScope], None],
) -> None:
    period = parse_period_option(period)
    with books_transaction(read_only=True) as conn:  # an export never writes
        show(conn, exports.resolve_scope(conn, period, store=store, sku=sku))


def _not_costed(conn: psycopg.Connection[Any], scope: ExportScope, what: str) -> str:
    stores = exports.uncosted_stores(conn, scope)
    if not stores:
        return ""
    return f"; {what}: {', '.join(stores)} not costed for {scope.period}"


store_option = click.option(
    "--store", default=None, show_envvar=True, help="only this store (code, e.g. ST001)"
)
sku_option = click.option(
    "--sku", default=None, show_envvar=True, help="only this item (sku, e.g. BR1-000001)"
)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="JSON Lines: one object per line, decimals as strings"
)


STOCK_MOVE_ROW = "{:>9}  {:<10}  {:<6} {:<12} {:<12} {:>12} {:>11} {:>13}  {:<6} {}"


def _stock_move_row(m: StockMove) -> str:
    return STOCK_MOVE_ROW.format(
        m.move_id,
        m.date.isoformat(),
        m.store,
        m.sku,
        m.kind,
        f"{m.quantity:.3f}",
        "" if m.unit_cost is None else f"{m.unit_cost:.4f}",
        _money(m.value),
        m.counterpart_store or "",
        m.document or "",
    ).rstrip()


@click.command("stock-ledger")
@period_option
@store_option
@sku_option
@json_option
def stock_ledger_command(period: str, store: str | None, sku: str | None, as_json: bool) -> None:
    """Every stock move of a period, valued as costing valued it (null before costing)."""

    def show(conn: psycopg.Connection[Any], scope: ExportScope) -> None:
        moves = exports.stock_ledger(conn, scope)
        if as_json:
            _write_lines(_json_lines(moves))
            return
        note = _not_costed(conn, scope, "no values yet")
        header = STOCK_MOVE_ROW.format(
            "move", "date", "store", "sku", "kind", "quantity", "unit cost", "value", "other",
            "document",
        )  # fmt: skip
        _write_lines([header])
        n = _write_lines(_stock_move_row(m) for m in moves)
        click.echo(f"{n} stock moves of {scope.period}{note}")

    _export(period, store, sku, show)


ITEM_COST_ROW = "{:<6} {:<12} {:>11} {:<17} {:>13} {:>13} {:>13} {:>13} {:>13} {:>12} {:>13}  {}"


def _item_cost_row(c: ItemCost) -> str:
    return ITEM_COST_ROW.format(
        c.store,
        c.sku,
        f"{c.average_cost:.4f}",
        c.average_from,
        _money(c.opening_value),
        _money(c.receipt_value),
        _money(c.transfer_in_value),
        _money(c.cogs_value),
        _money(c.transfer_out_value),
        f"{c.closing_qty:.3f}",
        _money(c.closing_value),
        c.group or "",
    ).rstrip()


@click.command("item-costs")
@period_option
@store_option
@sku_option
@json_option
def item_costs_command(period: str, store: str | None, sku: str | None, as_json: bool) -> None:
    """Each costed store and item of a period: its figures, average and closing stock."""

    def show(conn: psycopg.Connection[Any], scope: ExportScope) -> None:
        costs = exports.item_costs(conn, scope)
        if as_json:
            _write_lines(_json_lines(costs))
            return
        note = _not_costed(conn, scope, "no item costs")
        header = ITEM_COST_ROW.format(
            "store", "sku", "average", "from", "opening", "receipts", "transfers in", "cogs",
            "transfers out", "closing qty", "closing", "loop",
        )  # fmt: skip
        _write_lines([header])
        n = _write_lines(_item_cost_row(c) for c in costs)
        click.echo(f"{n} item costs of {scope.period}{note}")

    _export(period, store, sku, show)
