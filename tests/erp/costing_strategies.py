"""Hypothesis strategies: one month of stock for the costing (reference and SQL alike).

``months()`` draws a ``Month`` (a named 3-tuple: opening, moves, standard_cost) for
3..6 stores (ids 1..n) and 1..4 items (ids 1..m). Each item gets a handful of
scenarios on top of random openings, chosen so that the hard cases of the method
come up often rather than by luck:

* ``random``: receipts, sales, returns, adjustments and transfers between any stores;
* ``loop2`` / ``loop3``: transfers around a cycle of two (A->B, B->A) or three stores;
* ``forward``: a new store (no opening) receives goods and forwards part of them;
* ``negative``: a negative opening (qty and value) and a sale beyond what is available;
* ``drained``: a negative opening qty that receipts bring back exactly to A = 0;
* ``closed``: two or three stores that only supply each other (no opening, no
  receipts, no transfer in from outside): a group with no unique solution, which may
  still send goods out to another store;
* ``singular``: a two-store loop whose system is singular although one store has a
  positive opening (opening t at a, -x at b, a->b 2x, b->a t): the fallback to the
  opening average, which store a may pass on to another store.

The ``closed`` and ``singular`` stores take no other move of that item.

Quantities are Decimals with 3 places, unit and standard costs 4, values 2; every
transfer is its two moves (out at the sender, in at the receiver, same quantity).
Months whose reference costs would not fit the ``erp_item_costs`` columns (an
average beyond numeric(14,4) from a nearly singular system) are filtered out.
"""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

from hypothesis import strategies as st
from reference_costing import Move, cost_period

SCENARIOS = ("random", "loop2", "loop3", "forward", "negative", "drained", "closed", "singular")
RESERVING = ("closed", "singular")  # drawn first: their stores take no other move

quantities = st.decimals(min_value=Decimal("0.001"), max_value=Decimal("500"), places=3)
unit_costs = st.decimals(min_value=Decimal("0"), max_value=Decimal("250"), places=4)
standard_costs = st.decimals(min_value=Decimal("0"), max_value=Decimal("250"), places=4)
opening_qtys = st.decimals(min_value=Decimal("-5"), max_value=Decimal("300"), places=3)
opening_values = st.decimals(min_value=Decimal("-50"), max_value=Decimal("30000"), places=2)
negative_qtys = st.decimals(min_value=Decimal("-300"), max_value=Decimal("-0.001"), places=3)
any_values = st.decimals(min_value=Decimal("-30000"), max_value=Decimal("30000"), places=2)


class Month(NamedTuple):
    opening: dict[tuple[int, int], tuple[Decimal, Decimal]]
    moves: list[Move]
    standard_cost: dict[int, Decimal]

    @property
    def stores(self) -> list[int]:
        """Every store the month mentions (balances, moves and counterparts)."""
        ids = {store for store, _ in self.opening}
        ids |= {m.store for m in self.moves}
        ids |= {m.counterpart for m in self.moves if m.counterpart is not None}
        return sorted(ids)

    @property
    def items(self) -> list[int]:
        return sorted(self.standard_cost)


def transfer(moves: list[Move], item: int, sender: int, receiver: int, qty: Decimal) -> None:
    moves.append(Move(sender, item, "transfer_out", -qty, counterpart=receiver))
    moves.append(Move(receiver, item, "transfer_in", qty, counterpart=sender))


def _random_move(draw: st.DrawFn, moves: list[Move], item: int, stores: list[int]) -> None:
    store = draw(st.sampled_from(stores))
    kind = draw(st.sampled_from(["receipt", "sale", "return", "adjustment", "transfer"]))
    q = draw(quantities)
    if kind == "receipt":
        moves.append(Move(store, item, kind, q, unit_cost=draw(unit_costs)))
    elif kind == "sale":
        moves.append(Move(store, item, kind, -q))
    elif kind == "return":
        moves.append(Move(store, item, kind, q))
    elif kind == "adjustment":
        moves.append(Move(store, item, kind, q if draw(st.booleans()) else -q))
    elif len(stores) > 1:
        to = draw(st.sampled_from([s for s in stores if s != store]))
        transfer(moves, item, store, to, q)


def _distinct(draw: st.DrawFn, stores: list[int], n: int) -> list[int]:
    return draw(st.permutations(stores))[:n]


def _scenario(
    draw: st.DrawFn,
    name: str,
    item: int,
    free: list[int],
    opening: dict[tuple[int, int], tuple[Decimal, Decimal]],
    moves: list[Move],
) -> list[int]:
    """Add one scenario's moves; returns the stores it reserves (closed groups)."""
    if name == "random":
        for _ in range(draw(st.integers(0, 8))):
            _random_move(draw, moves, item, free)
    elif name == "loop2" and len(free) >= 2:
        a, b = _distinct(draw, free, 2)
        if draw(st.booleans()):  # outside supply
            moves.append(Move(a, item, "receipt", draw(quantities), unit_cost=draw(unit_costs)))
        transfer(moves, item, a, b, draw(quantities))
        transfer(moves, item, b, a, draw(quantities))
    elif name == "loop3" and len(free) >= 3:
        cycle = _distinct(draw, free, 3)
        for sender, receiver in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            transfer(moves, item, sender, receiver, draw(quantities))
        if draw(st.booleans()):  # and a chord, the other way round
            transfer(moves, item, cycle[1], cycle[0], draw(quantities))
    elif name == "forward" and len(free) >= 2:
        new, source = _distinct(draw, free, 2)
        opening.pop((new, item), None)
        received = draw(quantities)
        transfer(moves, item, source, new, received)
        # on to any other store, the source included (then it is a loop as well)
        to = draw(st.sampled_from([s for s in free if s != new]))
        part = draw(st.decimals(min_value=Decimal("0.001"), max_value=received, places=3))
        transfer(moves, item, new, to, part)
        if draw(st.booleans()):
            moves.append(Move(new, item, "sale", -draw(quantities)))
    elif name == "negative":
        store = draw(st.sampled_from(free))
        opening[(store, item)] = (draw(negative_qtys), draw(any_values))
        moves.append(Move(store, item, "sale", -draw(quantities)))
    elif name == "drained":
        store = draw(st.sampled_from(free))
        q = draw(quantities)
        opening[(store, item)] = (-q, draw(any_values))
        moves.append(Move(store, item, "receipt", q, unit_cost=draw(unit_costs)))
    elif name == "closed" and len(free) >= 2:
        size = draw(st.integers(2, min(3, len(free))))
        group = _distinct(draw, free, size)
        for s in group:
            opening.pop((s, item), None)
        for sender, receiver in zip(group, group[1:] + group[:1], strict=True):
            transfer(moves, item, sender, receiver, draw(quantities))
        if size == 3 and draw(st.booleans()):
            transfer(moves, item, group[1], group[0], draw(quantities))
        for s in group:
            if draw(st.booleans()):
                moves.append(Move(s, item, "sale", -draw(quantities)))
        outside = [s for s in free if s not in group]
        if draw(st.booleans()) and outside:  # a fallback sender feeding a solved store
            transfer(moves, item, group[0], draw(st.sampled_from(outside)), draw(quantities))
        return group
    elif name == "singular" and len(free) >= 2:
        # a (opening t) <-> b (opening -x): A_a = 2t, A_b = x and the system
        # [[2t, -t], [-2x, x]] is singular although a has stock of its own
        a, b = _distinct(draw, free, 2)
        t, x = draw(quantities), draw(quantities)
        opening[(a, item)] = (t, draw(opening_values))
        opening[(b, item)] = (-x, draw(any_values))
        transfer(moves, item, a, b, 2 * x)
        transfer(moves, item, b, a, t)
        outside = [s for s in free if s not in (a, b)]
        if draw(st.booleans()) and outside:  # the unrounded opening average, passed on
            transfer(moves, item, a, draw(st.sampled_from(outside)), draw(quantities))
        return [a, b]
    return []


def fits_the_schema(month: Month) -> bool:
    """The reference costs fit erp_item_costs' numeric(14,4) / (16,2) / (14,3) columns."""
    for c in cost_period(*month).values():
        if abs(c.average_cost) >= Decimal("1e10"):
            return False
        values = (c.transfer_in_value, c.cogs_value, c.transfer_out_value, c.closing_value)
        if any(abs(v) >= Decimal("1e14") for v in values):
            return False
    return True


@st.composite
def _months(draw: st.DrawFn, min_stores: int, max_stores: int, max_items: int) -> Month:
    stores = list(range(1, draw(st.integers(min_stores, max_stores)) + 1))
    items = list(range(1, draw(st.integers(1, max_items)) + 1))
    standard = {item: draw(standard_costs) for item in items}
    opening: dict[tuple[int, int], tuple[Decimal, Decimal]] = {}
    for store in stores:
        for item in items:
            if draw(st.booleans()):
                opening[(store, item)] = (draw(opening_qtys), draw(opening_values))
    moves: list[Move] = []
    for item in items:
        names = draw(st.lists(st.sampled_from(SCENARIOS), min_size=1, max_size=4))
        names.sort(key=lambda n: n not in RESERVING)
        reserved: list[int] = []
        for name in names:
            free = [s for s in stores if s not in reserved]
            if free:
                reserved += _scenario(draw, name, item, free, opening, moves)
    return Month(opening, moves, standard)


def months(
    min_stores: int = 3, max_stores: int = 6, max_items: int = 4
) -> st.SearchStrategy[Month]:
    """One month: Month(opening, moves, standard_cost); see the module docstring."""
    return _months(min_stores, max_stores, max_items).filter(fits_the_schema)


__all__ = ["Month", "fits_the_schema", "months", "transfer"]
