"""An auditor's exports of a period: the stock ledger and the item costs, a stable contract.

Other tools read these (``engine books stock-ledger`` and ``engine books
item-costs``, :mod:`flows.tools.exports`), so their fields are pinned by
:class:`StockMove` and :class:`ItemCost` and change only by adding one.
In JSON, quantities are strings with 3 decimals, money with 2, unit costs
and averages with 4 (as stored), never floats.

**Stock ledger**: every stock move of the period, in move id order, with
its store, item, kind, signed quantity (positive into the store) and its
``value`` as costing valued it, signed like the quantity:

- a receipt: round(quantity x unit cost, 2);
- a transfer: round(|quantity| x the sender's average, 2) on both sides
  (out negative, in positive), the sender's average being the period's
  solved average (``erp_item_averages``, the sender's
  ``erp_item_costs.average_cost``); the two sides share ``transfer_id``,
  ``"<document number>/<line no>"``, as they come from one document line;
- the issues (sale, return, stock-count adjustment) of a store and item
  share its COGS by cumulative rounding in move id order: with I_k the net
  issue quantity of its first k issue moves (a return counts negative) and
  a its average, value_k = round(I_(k-1) x a, 2) - round(I_k x a, 2), which
  telescopes to -round(I_n x a, 2) = -cogs_value exactly;
- ``null`` while the move's store is not costed for the period (no item
  costs yet).

So, for every costed store and item, opening_value + the sum of its moves'
values = closing_value of the item costs, to the cent.

**Item costs**: one row per costed store and item (``erp_item_costs``):
the figures costing used and found, how the average was found
(``average_from``) and the loop of stores it was solved in (``group``); the
``standard_cost`` is the one costing used, kept with the costs, so a closed
period's export never changes when an items migration changes the item.

Both are streamed from a server-side cursor (a period holds about a
million moves): :func:`stock_ledger` and :func:`item_costs` check their
arguments at once, then yield rows as they come, never the whole list.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any, Literal, TypeVar

import psycopg
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict, PlainSerializer

from engine import BadInput
from flows.erp import inventory, periods
from flows.erp.books import Money
from flows.erp.queries import NamedQueries

__all__ = [
    "ExportScope",
    "ItemCost",
    "Quantity",
    "StockMove",
    "UnitCost",
    "item_costs",
    "resolve_scope",
    "stock_ledger",
    "uncosted_stores",
]

_q = NamedQueries("exports")

FETCH_ROWS = 5000
"""Rows fetched from the server-side cursor at a time."""

M = TypeVar("M", bound=BaseModel)


def _fixed(places: int) -> PlainSerializer:
    exponent = Decimal(1).scaleb(-places)

    def text(value: Decimal) -> str:
        return format(value.quantize(exponent), "f")

    return PlainSerializer(text, return_type=str, when_used="json")


Quantity = Annotated[Decimal, _fixed(3)]
"""A quantity: a Decimal, in JSON a string with 3 decimals ("-4.000")."""

UnitCost = Annotated[Decimal, _fixed(4)]
"""A unit cost or an average: a Decimal, in JSON a string with 4 decimals ("155.3450")."""

MoveKind = Literal[
    "receipt", "transfer_in", "transfer_out", "sale", "return", "adjustment", "revaluation"
]


class StockMove(BaseModel):
    """One line of the stock ledger (``engine books stock-ledger --json``)."""

    model_config = ConfigDict(frozen=True)

    move_id: int
    date: dt.date
    store: str
    sku: str
    kind: MoveKind
    quantity: Quantity
    unit_cost: UnitCost | None
    value: Money | None
    counterpart_store: str | None
    transfer_id: str | None
    document: str | None


class ItemCost(BaseModel):
    """One store and item's costing of the period (``engine books item-costs --json``)."""

    model_config = ConfigDict(frozen=True)

    store: str
    sku: str
    standard_cost: UnitCost
    opening_qty: Quantity
    opening_value: Money
    receipt_qty: Quantity
    receipt_value: Money
    transfer_in_qty: Quantity
    transfer_in_value: Money
    average_cost: UnitCost
    # 'legacy': costed before migration 1004 (transfers at the sender's opening average)
    average_from: Literal["solved", "fallback_opening", "fallback_standard", "legacy"]
    group: str | None
    issue_qty: Quantity
    cogs_value: Money
    transfer_out_qty: Quantity
    transfer_out_value: Money
    closing_qty: Quantity
    closing_value: Money


class ExportScope(BaseModel):
    """A period, optionally narrowed to one store and one item, checked to exist."""

    period: str
    store: str | None = None
    store_id: int | None = None
    sku: str | None = None
    item_id: int | None = None

    def params(self) -> dict[str, Any]:
        return {"period": self.period, "store_id": self.store_id, "item_id": self.item_id}


def resolve_scope(
    conn: psycopg.Connection[Any], period: str, *, store: str | None = None, sku: str | None = None
) -> ExportScope:
    """``period``, ``store`` and ``sku`` checked and as ids; :class:`engine.BadInput` if unknown."""
    if periods.status(conn, period) is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    scope = ExportScope(period=period, store=store, sku=sku)
    if store is not None:
        found = inventory.stores(conn, store)
        if not found:
            codes = [s.code for s in inventory.stores(conn, None)]
            known = f"{len(codes)} stores, {codes[0]} to {codes[-1]}" if codes else "no stores"
            raise BadInput(
                f"unknown store {store!r}: no store has that code; "
                f"store codes look like ST001 ({known})"
            )
        scope.store_id = found[0].id
    if sku is not None:
        item = _q.first(conn, "item_select_by_sku", {"sku": sku})
        if item is None:
            raise BadInput(f"unknown sku {sku!r}: no item has that sku (e.g. BR1-000001)")
        scope.item_id = item["id"]
    return scope


def uncosted_stores(conn: psycopg.Connection[Any], scope: ExportScope) -> list[str]:
    """Codes of the stores in scope not costed for the period: their moves have no value yet."""
    return [r["code"] for r in _q.rows(conn, "store_period_select_uncosted", scope.params())]


def stock_ledger(conn: psycopg.Connection[Any], scope: ExportScope) -> Iterator[StockMove]:
    """The period's stock moves in id order, valued (module docstring), streamed."""
    return _stream(conn, "stock_move_select_valued", scope, StockMove)


def item_costs(conn: psycopg.Connection[Any], scope: ExportScope) -> Iterator[ItemCost]:
    """The period's item costs by store code and sku, streamed."""
    return _stream(conn, "item_cost_select", scope, ItemCost)


def _stream(
    conn: psycopg.Connection[Any], query: str, scope: ExportScope, model: type[M]
) -> Iterator[M]:
    # a server-side cursor lives in a transaction: the caller's, or one of its own
    # (a savepoint inside the caller's); closing the iterator early ends it
    name = f"export_{uuid.uuid4().hex[:12]}"
    with (
        conn.transaction(),
        conn.cursor(name=name, row_factory=dict_row) as cur,
    ):
        cur.itersize = FETCH_ROWS
        cur.execute(_q[query], scope.params())
        for row in cur:
            yield model.model_validate(row)
