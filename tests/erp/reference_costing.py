"""An independent reference of the costing method, in plain Python.

Written from the method as documented in flows/costing.py, not from its SQL:
per move, Decimal arithmetic, rounding half away from zero like PostgreSQL's
``round(numeric, n)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
FOUR = Decimal("0.0001")


def r2(x: Decimal) -> Decimal:
    return x.quantize(CENT, rounding=ROUND_HALF_UP)


def r4(x: Decimal) -> Decimal:
    return x.quantize(FOUR, rounding=ROUND_HALF_UP)


@dataclass
class Move:
    store: int
    item: int
    kind: str  # receipt | sale | return | transfer_in | transfer_out | adjustment
    qty: Decimal  # signed: + into the store, - out of it
    unit_cost: Decimal | None = None
    counterpart: int | None = None


@dataclass
class Cost:
    opening_qty: Decimal = Decimal(0)
    opening_value: Decimal = Decimal(0)
    receipt_qty: Decimal = Decimal(0)
    receipt_value: Decimal = Decimal(0)
    transfer_in_qty: Decimal = Decimal(0)
    transfer_in_value: Decimal = Decimal(0)
    average_cost: Decimal = Decimal(0)
    issue_qty: Decimal = Decimal(0)
    cogs_value: Decimal = Decimal(0)
    transfer_out_qty: Decimal = Decimal(0)
    transfer_out_value: Decimal = Decimal(0)
    closing_qty: Decimal = Decimal(0)
    closing_value: Decimal = Decimal(0)
    touched: bool = field(default=False, repr=False)


def cost_period(
    opening: dict[tuple[int, int], tuple[Decimal, Decimal]],
    moves: list[Move],
    standard_cost: dict[int, Decimal],
) -> dict[tuple[int, int], Cost]:
    """(store, item) -> costs, for every pair with an opening balance or a move."""

    def opening_avg(store: int, item: int) -> Decimal:
        qty, value = opening.get((store, item), (Decimal(0), Decimal(0)))
        return r4(value / qty) if qty > 0 else standard_cost[item]

    costs: dict[tuple[int, int], Cost] = {}
    for key, (qty, value) in opening.items():
        costs[key] = Cost(opening_qty=qty, opening_value=value)
    for m in moves:
        c = costs.setdefault((m.store, m.item), Cost())
        if m.kind == "receipt":
            assert m.unit_cost is not None
            c.receipt_qty += m.qty
            c.receipt_value += r2(m.qty * m.unit_cost)
        elif m.kind == "transfer_in":
            assert m.counterpart is not None
            c.transfer_in_qty += m.qty
            c.transfer_in_value += r2(m.qty * opening_avg(m.counterpart, m.item))
        elif m.kind == "transfer_out":
            c.transfer_out_qty += -m.qty
            c.transfer_out_value += r2(-m.qty * opening_avg(m.store, m.item))
        else:  # sale, return, adjustment: net issues
            c.issue_qty += -m.qty
    for (_, item), c in costs.items():
        qty = c.opening_qty + c.receipt_qty + c.transfer_in_qty
        value = c.opening_value + c.receipt_value + c.transfer_in_value
        if qty > 0:
            c.average_cost = r4(value / qty)
        elif c.opening_qty > 0:
            c.average_cost = r4(c.opening_value / c.opening_qty)
        else:
            c.average_cost = standard_cost[item]
        c.cogs_value = r2(c.issue_qty * c.average_cost)
        c.closing_qty = qty - c.issue_qty - c.transfer_out_qty
        c.closing_value = value - c.cogs_value - c.transfer_out_value
    return costs
