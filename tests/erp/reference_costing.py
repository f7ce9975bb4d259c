"""An independent reference of the costing method, in plain Python (the test oracle).

Written from the method text alone, not from the SQL or the module that runs it:
exact rationals (``fractions.Fraction``) for the averages, ``Decimal`` for what is
booked, rounding half away from zero like PostgreSQL's ``round(numeric, n)``.

The method, per period and item; for each store (a node):

* ``A`` = opening qty + receipts qty + transfers-in qty (returns and adjustments are
  not part of it: they are negative issues).
* Receipts value = the sum over receipt moves of round2(qty x unit_cost), plus the
  value of each value-only move (a cost correction's on-hand share: no quantity).
* Fallback average: opening value / opening qty when the opening qty is positive
  ("fallback_opening"), else the item's standard cost ("fallback_standard").
* A store with ``A > 0`` has an average ``a`` defined exactly by::

      a x A = opening value + receipts value + sum over its transfers in of (qty x a(sender))

  Stores with ``A <= 0`` take the fallback.
* The item's transfer graph has an edge sender -> receiver per transfer in. Its
  strongly connected components (Tarjan, below) are solved one at a time in
  topological order, senders first. In a component, the stores with ``A <= 0`` are
  constants (their fallback, unrounded), as are the stores of earlier components
  (their exact averages); the stores with ``A > 0`` are the unknowns of a square
  linear system solved exactly (Gauss-Jordan over ``Fraction``; no iteration). When
  that system has no unique solution (e.g. stores that only supply each other: no
  opening, no receipts) every store of the component takes its fallback.
* Only then is anything rounded: the average to 4 decimals; each transfer move's
  value = round2(qty x the sender's rounded average), booked by both stores;
  issue qty = -(sum of the qty of sale, return and adjustment moves);
  COGS = round2(issue qty x the store's rounded average); closing qty and closing
  value are the remainders (opening + receipts + transfers in - issues - transfers
  out), so value is conserved to the cent per store and company-wide.

``Cost.average_from`` says where the average came from ("solved",
"fallback_opening", "fallback_standard"); ``Cost.group`` is the sorted store ids
of the store's strongly connected component when it has more than one store (a
loop of transfers), else None. ``exact_averages`` exposes the unrounded averages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

Key = tuple[int, int]  # (store, item)
Opening = Mapping[Key, tuple[Decimal, Decimal]]  # (store, item) -> (qty, value)

ISSUE_KINDS = frozenset({"sale", "return", "adjustment"})
KINDS = ISSUE_KINDS | {"receipt", "transfer_in", "transfer_out", "revaluation"}

SOLVED = "solved"
FALLBACK_OPENING = "fallback_opening"
FALLBACK_STANDARD = "fallback_standard"

ZERO = Decimal(0)


def round_half_away(x: Fraction | Decimal | int, places: int) -> Decimal:
    """``x`` rounded to ``places`` decimals, ties away from zero, exactly (no context)."""
    f = Fraction(x)
    q, r = divmod(abs(f.numerator) * 10**places, f.denominator)
    if 2 * r >= f.denominator:
        q += 1
    digits = tuple(int(c) for c in str(q))
    return Decimal((1 if f < 0 and q else 0, digits, -places))


def r2(x: Fraction | Decimal | int) -> Decimal:
    return round_half_away(x, 2)


def r4(x: Fraction | Decimal | int) -> Decimal:
    return round_half_away(x, 4)


@dataclass
class Move:
    store: int
    item: int
    kind: str  # receipt | sale | return | transfer_in | transfer_out | adjustment | revaluation
    qty: Decimal  # signed: + into the store, - out of it (0 for a revaluation)
    unit_cost: Decimal | None = None  # receipts only
    counterpart: int | None = None  # transfers: the receiver (out) or the sender (in)
    value: Decimal | None = None  # revaluations only: the value added (or taken) in the store


@dataclass
class Cost:
    opening_qty: Decimal = ZERO
    opening_value: Decimal = ZERO
    receipt_qty: Decimal = ZERO
    receipt_value: Decimal = ZERO
    transfer_in_qty: Decimal = ZERO
    transfer_in_value: Decimal = ZERO
    average_cost: Decimal = ZERO
    issue_qty: Decimal = ZERO
    cogs_value: Decimal = ZERO
    transfer_out_qty: Decimal = ZERO
    transfer_out_value: Decimal = ZERO
    closing_qty: Decimal = ZERO
    closing_value: Decimal = ZERO
    average_from: str = SOLVED  # solved | fallback_opening | fallback_standard
    group: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Average:
    """The exact (unrounded) average of one store and item, and where it came from."""

    exact: Fraction
    source: str  # solved | fallback_opening | fallback_standard
    group: tuple[int, ...] | None

    @property
    def rounded(self) -> Decimal:
        return r4(self.exact)


@dataclass
class _Node:
    """What the average of one store and item depends on."""

    opening_qty: Decimal = ZERO
    opening_value: Decimal = ZERO
    receipt_qty: Decimal = ZERO
    receipt_value: Decimal = ZERO
    transfers_in: list[tuple[int, Decimal]] = field(default_factory=list)  # (sender, qty)

    @property
    def available(self) -> Decimal:  # A
        return self.opening_qty + self.receipt_qty + sum((q for _, q in self.transfers_in), ZERO)


# -- the graph -----------------------------------------------------------------------


def strongly_connected_groups(
    nodes: Iterable[int], successors: Mapping[int, Iterable[int]]
) -> list[tuple[int, ...]]:
    """Tarjan's strongly connected components, in topological order (senders first).

    Iterative (no recursion limit on long chains of stores). Tarjan completes a
    component only after every component reachable from it, so the completion order
    is reverse topological; it is reversed on return. Each component is sorted.
    """
    succ = {v: sorted(set(successors.get(v, ()))) for v in nodes}
    for receivers in list(succ.values()):
        for w in receivers:
            succ.setdefault(w, [])
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    done: list[tuple[int, ...]] = []

    def visit(v: int) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)

    for root in sorted(succ):
        if root in index:
            continue
        visit(root)
        work = [(root, iter(succ[root]))]
        while work:
            v, targets = work[-1]
            for w in targets:
                if w not in index:
                    visit(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:  # every successor of v seen: v is finished
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    done.append(tuple(sorted(component)))
    return done[::-1]


# -- the exact linear solve ------------------------------------------------------------


def solve_exactly(matrix: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """x with matrix . x = rhs, by Gauss-Jordan over the rationals; None when not unique."""
    n = len(rhs)
    rows = [[*row, b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if pivot is None:
            return None  # singular: no solution, or infinitely many
        rows[col], rows[pivot] = rows[pivot], rows[col]
        p = rows[col][col]
        rows[col] = [x / p for x in rows[col]]
        for r in range(n):
            factor = rows[r][col]
            if r != col and factor != 0:
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col], strict=True)]
    return [rows[r][n] for r in range(n)]


# -- the method --------------------------------------------------------------------------


def _nodes(opening: Opening, moves: Iterable[Move]) -> dict[Key, _Node]:
    nodes: dict[Key, _Node] = {}
    for key, (qty, value) in opening.items():
        nodes[key] = _Node(opening_qty=qty, opening_value=value)
    for m in moves:
        if m.kind not in KINDS:
            raise ValueError(f"unknown move kind {m.kind!r}")
        node = nodes.setdefault((m.store, m.item), _Node())
        if m.kind == "receipt":
            if m.unit_cost is None:
                raise ValueError("a receipt needs its unit cost")
            node.receipt_qty += m.qty
            node.receipt_value += r2(Fraction(m.qty) * Fraction(m.unit_cost))
        elif m.kind == "revaluation":
            if m.value is None:
                raise ValueError("a revaluation needs its value")
            node.receipt_value += m.value
        elif m.kind in ("transfer_in", "transfer_out"):
            if m.counterpart is None:
                raise ValueError("a transfer needs its counterpart store")
            # a counterpart with no balance and no move of its own is still a node
            nodes.setdefault((m.counterpart, m.item), _Node())
            if m.kind == "transfer_in":
                node.transfers_in.append((m.counterpart, m.qty))
    return nodes


def _fallback(node: _Node, standard: Decimal, group: tuple[int, ...] | None) -> Average:
    if node.opening_qty > 0:
        return Average(
            Fraction(node.opening_value) / Fraction(node.opening_qty), FALLBACK_OPENING, group
        )
    return Average(Fraction(standard), FALLBACK_STANDARD, group)


def _item_averages(stores: dict[int, _Node], standard: Decimal) -> dict[int, Average]:
    """The exact average of every store of one item (stores: store -> its node)."""
    receivers: dict[int, set[int]] = defaultdict(set)  # sender -> receivers
    for store, node in stores.items():
        for sender, _ in node.transfers_in:
            receivers[sender].add(store)
    known: dict[int, Average] = {}
    for component in strongly_connected_groups(stores, receivers):
        group = component if len(component) > 1 else None
        unknown = [s for s in component if stores[s].available > 0]
        for s in component:
            if s not in unknown:  # A <= 0: a constant of the system
                known[s] = _fallback(stores[s], standard, group)
        if not unknown:
            continue
        column = {s: i for i, s in enumerate(unknown)}
        matrix = [[Fraction(0)] * len(unknown) for _ in unknown]
        rhs = [Fraction(0)] * len(unknown)
        for i, s in enumerate(unknown):
            node = stores[s]
            matrix[i][i] += Fraction(node.available)
            rhs[i] += Fraction(node.opening_value) + Fraction(node.receipt_value)
            for sender, qty in node.transfers_in:
                if sender in column:
                    matrix[i][column[sender]] -= Fraction(qty)
                else:  # A <= 0 in this component, or an earlier component
                    rhs[i] += Fraction(qty) * known[sender].exact
        solution = solve_exactly(matrix, rhs)
        if solution is None:
            for s in component:
                known[s] = _fallback(stores[s], standard, group)
        else:
            for s, a in zip(unknown, solution, strict=True):
                known[s] = Average(a, SOLVED, group)
    return known


def exact_averages(
    opening: Opening, moves: list[Move], standard_cost: Mapping[int, Decimal]
) -> dict[Key, Average]:
    """(store, item) -> the exact average, for every store of every item's transfer graph.

    That is every pair with an opening balance or a move, and every transfer
    counterpart (which, with consistent data, has its own move anyway).
    """
    by_item: dict[int, dict[int, _Node]] = defaultdict(dict)
    for (store, item), node in _nodes(opening, moves).items():
        by_item[item][store] = node
    averages: dict[Key, Average] = {}
    for item, stores in sorted(by_item.items()):
        for store, average in _item_averages(stores, standard_cost[item]).items():
            averages[(store, item)] = average
    return averages


def cost_period(
    opening: Opening, moves: list[Move], standard_cost: Mapping[int, Decimal]
) -> dict[Key, Cost]:
    """(store, item) -> costs, for every pair with an opening balance or a move."""
    averages = exact_averages(opening, moves, standard_cost)
    rounded = {key: a.rounded for key, a in averages.items()}
    costs: dict[Key, Cost] = {}
    for key, (qty, value) in opening.items():
        costs[key] = Cost(opening_qty=qty, opening_value=value)
    for m in moves:
        c = costs.setdefault((m.store, m.item), Cost())
        if m.kind == "receipt":
            assert m.unit_cost is not None
            c.receipt_qty += m.qty
            c.receipt_value += r2(Fraction(m.qty) * Fraction(m.unit_cost))
        elif m.kind == "revaluation":
            assert m.value is not None
            c.receipt_value += m.value
        elif m.kind == "transfer_in":
            assert m.counterpart is not None
            c.transfer_in_qty += m.qty
            c.transfer_in_value += r2(Fraction(m.qty) * Fraction(rounded[(m.counterpart, m.item)]))
        elif m.kind == "transfer_out":
            c.transfer_out_qty -= m.qty
            c.transfer_out_value += r2(-Fraction(m.qty) * Fraction(rounded[(m.store, m.item)]))
        else:  # sale, return, adjustment: net issues
            c.issue_qty -= m.qty
    for key, c in costs.items():
        average = averages[key]
        c.average_cost = rounded[key]
        c.average_from = average.source
        c.group = average.group
        c.cogs_value = r2(Fraction(c.issue_qty) * Fraction(c.average_cost))
        c.closing_qty = (
            c.opening_qty + c.receipt_qty + c.transfer_in_qty - c.issue_qty - c.transfer_out_qty
        )
        c.closing_value = (
            c.opening_value
            + c.receipt_value
            + c.transfer_in_value
            - c.cogs_value
            - c.transfer_out_value
        )
    return costs
