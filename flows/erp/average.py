"""The periodic weighted average cost of one item in stores that supply each other.

**Method.** For one item and one period, each store has its own figures
(opening and receipts, each a quantity and a value) and the transfers it
received from other stores. With ``A`` = opening quantity + receipts quantity
+ transfers-in quantity, a store with ``A > 0`` has the average ``a`` defined
exactly by::

    a * A = opening value + receipts value + Σ over its transfers in (quantity * sender's a)

A transfer is valued at its sender's average, so stores that supply each
other depend on each other's averages. They are solved exactly, never
iterated to a threshold: the transfer graph (edge sender → receiver) is cut
into strongly connected components, taken in topological order, so every
sender outside a component is already known when the component is solved;
a component's equations are solved with exact fractions by Gaussian
elimination. Moves between the same two stores are summed. A store with no
transfers in is simply ``(opening value + receipts value) / A``. A transfer
from a store to itself, or with a quantity not above zero, is a
``ValueError`` that names it.

**Fallback.** A store with ``A <= 0`` (nothing came in, or a negative
opening quantity carried forward outweighs what came in) has no average of
its own: it takes its opening average (opening value / opening quantity)
when its opening quantity is positive, else the item's standard cost. A
component whose equations have no unique solution (a singular matrix, e.g.
stores that only supply each other, with no opening, receipts or outside
transfers in) takes the fallback for every store in it, and says so:
``singular=True`` and the component's stores in ``group``, for the costing
report to name. A sender on the fallback passes its fallback average
*unrounded* (an exact fraction) into its receivers' equations.

**Rounding.** Only results are rounded: each store's average to 4 decimals,
half away from zero (``ROUND_HALF_UP``), from the exact fraction with integer
arithmetic, never through float or a Decimal division: 1.00005 gives 1.0001
and -1.23455 gives -1.2346. The unrounded value stays in ``Average.exact``.
:func:`round_money` rounds amounts to 2 decimals the same way.

**Loops.** A component of more than one store is a loop; each of its stores
carries the loop's id, the sorted tuple of its store ids (``group``). Other
stores have ``group=None``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, Inexact
from fractions import Fraction
from graphlib import CycleError, TopologicalSorter
from typing import Literal

import networkx as nx

__all__ = [
    "Average",
    "AverageFrom",
    "Figures",
    "Transfer",
    "round_cost",
    "round_money",
    "solve_item",
]

AverageFrom = Literal["solved", "fallback_opening", "fallback_standard"]
"""Where a store's average comes from: its equation, or the fallback it took."""


@dataclass(frozen=True)
class Figures:
    """One store's own figures for the item and period (quantities 3 dp, values 2 dp)."""

    opening_qty: Decimal = Decimal(0)
    opening_value: Decimal = Decimal(0)
    receipt_qty: Decimal = Decimal(0)
    receipt_value: Decimal = Decimal(0)


@dataclass(frozen=True)
class Transfer:
    """A move of ``qty`` (> 0) units of the item from store ``sender`` to store ``receiver``."""

    sender: int
    receiver: int
    qty: Decimal


@dataclass(frozen=True)
class Average:
    """One store's average: rounded, exact, where it came from and the loop it is in."""

    cost: Decimal
    """The average rounded to 4 decimals, half away from zero."""
    source: AverageFrom
    group: tuple[int, ...] | None
    """The sorted store ids of the loop the store is in; ``None`` when in no loop."""
    exact: Fraction
    """The unrounded value, solved or fallback."""
    singular: bool = False
    """True when the store's loop had no unique solution (so it took the fallback)."""


def round_cost(x: Fraction) -> Decimal:
    """``x`` to 4 decimals, half away from zero, exactly (no float, no Decimal context)."""
    return _round_half_away(x, 4)


def round_money(x: Fraction | Decimal) -> Decimal:
    """``x`` to 2 decimals, half away from zero, exactly (no float, no Decimal context)."""
    return _round_half_away(Fraction(x), 2)


def _round_half_away(x: Fraction, places: int) -> Decimal:
    # Integer division keeps it exact; a Decimal built from a string ignores the context.
    units, rest = divmod(abs(x.numerator) * 10**places, x.denominator)
    if 2 * rest >= x.denominator:
        units += 1
    sign = "-" if x < 0 and units else ""
    return Decimal(f"{sign}{units}E-{places}")


@dataclass(frozen=True)
class _Store:
    """A store's terms of its equation ``a * qty = own + Σ inflow[s] * a_s``, and its fallback."""

    qty: Fraction
    own: Fraction
    inflow: Mapping[int, Fraction]
    figures: Figures
    standard: Fraction

    def fallback(self) -> tuple[Fraction, AverageFrom]:
        """The opening average when the opening quantity is positive, else the standard cost."""
        if self.figures.opening_qty > 0:
            opening = Fraction(self.figures.opening_value) / Fraction(self.figures.opening_qty)
            return opening, "fallback_opening"
        return self.standard, "fallback_standard"


def solve_item(
    figures: Mapping[int, Figures], transfers: Sequence[Transfer], standard_cost: Decimal
) -> dict[int, Average]:
    """Every store's average of one item for one period (the method of the module docstring).

    One entry per store in ``figures`` or in ``transfers``; a store given only
    in transfers has zero figures. Raises ``ValueError`` naming a transfer from
    a store to itself or one whose quantity is not positive.
    """
    inflows = _inflows(transfers)
    ids = set(figures) | set(inflows) | {t.sender for t in transfers}
    standard = Fraction(standard_cost)
    stores = {s: _store(figures.get(s, _NO_FIGURES), inflows.get(s, {}), standard) for s in ids}
    results: dict[int, Average] = {}
    for members in _components_in_order(inflows, ids):
        if len(members) == 1:
            (store,) = members
            results[store] = _solve_one(stores[store], results)
        else:
            results.update(_solve_loop(members, stores, results))
    return dict(sorted(results.items()))


_NO_FIGURES = Figures()

# Figures are summed as Decimals (fast) in this context, where a sum is never
# rounded to the caller's precision; Inexact is trapped to keep it that way.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact])


def _inflows(transfers: Sequence[Transfer]) -> dict[int, dict[int, Decimal]]:
    """receiver -> sender -> total quantity moved; rejects a bad transfer by name."""
    inflows: dict[int, dict[int, Decimal]] = {}
    for t in transfers:
        if t.sender == t.receiver:
            raise ValueError(
                f"transfer {t!r}: sender and receiver are both store {t.sender};"
                " a transfer moves stock between two different stores"
            )
        if not t.qty > 0:
            raise ValueError(f"transfer {t!r}: qty {t.qty}: a transfer's qty must be > 0")
        senders = inflows.setdefault(t.receiver, {})
        senders[t.sender] = _EXACT.add(senders.get(t.sender, _ZERO), t.qty)
    return inflows


_ZERO = Decimal(0)


def _store(f: Figures, inflow: Mapping[int, Decimal], standard: Fraction) -> _Store:
    """The store's equation terms: ``qty`` is its A, ``own`` its opening + receipts value."""
    qty = _EXACT.add(f.opening_qty, f.receipt_qty)
    for q in inflow.values():
        qty = _EXACT.add(qty, q)
    own = _EXACT.add(f.opening_value, f.receipt_value)
    exact_inflow = {s: Fraction(q) for s, q in inflow.items()}
    return _Store(Fraction(qty), Fraction(own), exact_inflow, f, standard)


def _components_in_order(
    inflows: Mapping[int, Mapping[int, Decimal]], ids: set[int]
) -> list[list[int]]:
    """The strongly connected components of the transfer graph, senders' before receivers'.

    Stores in no transfer come first, one each. A graph without a loop (most
    items) is ordered by :mod:`graphlib`; networkx's condensation is built
    only when there is a loop.
    """
    sorter = TopologicalSorter({r: senders.keys() for r, senders in inflows.items()})
    try:
        components = [[s] for s in sorter.static_order()]
    except CycleError:
        graph: nx.DiGraph[int] = nx.DiGraph()
        graph.add_edges_from((s, r) for r, senders in inflows.items() for s in senders)
        dag = nx.condensation(graph)
        components = [sorted(dag.nodes[c]["members"]) for c in nx.topological_sort(dag)]
    in_transfers = {s for members in components for s in members}
    return [[s] for s in sorted(ids - in_transfers)] + components


def _solve_one(store: _Store, known: Mapping[int, Average]) -> Average:
    """A store in no loop: its senders are known, so ``a = (own + Σ q * a_s) / qty``."""
    if store.qty <= 0:
        return _fallback(store, None)
    received = sum((q * known[s].exact for s, q in store.inflow.items()), Fraction(0))
    exact = (store.own + received) / store.qty
    return Average(round_cost(exact), "solved", None, exact)


def _fallback(store: _Store, group: tuple[int, ...] | None, singular: bool = False) -> Average:
    exact, source = store.fallback()
    return Average(round_cost(exact), source, group, exact, singular)


def _solve_loop(
    members: list[int], stores: Mapping[int, _Store], known: Mapping[int, Average]
) -> dict[int, Average]:
    """A loop's averages: one linear system, its unknowns the members with ``qty > 0``.

    Members with ``qty <= 0`` take their fallback and, like senders outside the
    loop (in ``known``), are constants of the system. A singular system puts
    every member on its fallback, marked ``singular``.
    """
    group = tuple(members)
    fixed = {s: _fallback(stores[s], group) for s in members if stores[s].qty <= 0}
    unknowns = [s for s in members if s not in fixed]
    matrix, rhs = _system(unknowns, stores, {**known, **fixed})
    solution = _gauss(matrix, rhs)
    if solution is None:
        return {s: _fallback(stores[s], group, singular=True) for s in members}
    solved = {
        s: Average(round_cost(a), "solved", group, a)
        for s, a in zip(unknowns, solution, strict=True)
    }
    return {**fixed, **solved}


def _system(
    unknowns: list[int], stores: Mapping[int, _Store], constants: Mapping[int, Average]
) -> tuple[list[list[Fraction]], list[Fraction]]:
    """``matrix · a = rhs`` for the ``unknowns``, one row each: ``qty * a - Σ q * a_s = own + …``.

    A sender among the unknowns is a coefficient ``-q``; any other sender (in
    ``constants``) adds ``q * its exact average`` to the right-hand side.
    """
    column = {s: i for i, s in enumerate(unknowns)}
    matrix = [[Fraction(0)] * len(unknowns) for _ in unknowns]
    rhs = []
    for i, s in enumerate(unknowns):
        store = stores[s]
        matrix[i][i] = store.qty
        constant = store.own
        for sender, q in store.inflow.items():
            if sender in column:
                matrix[i][column[sender]] -= q
            else:
                constant += q * constants[sender].exact
        rhs.append(constant)
    return matrix, rhs


def _gauss(matrix: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """The unique ``x`` with ``matrix · x = rhs``, or ``None`` when the matrix is singular.

    Gauss-Jordan elimination on exact fractions: any non-zero pivot will do,
    as there is no rounding error to contain.
    """
    n = len(rhs)
    rows = [[*row, b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if pivot is None:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        head = rows[col][col]
        rows[col] = [v / head for v in rows[col]]
        for r in range(n):
            factor = rows[r][col]
            if r != col and factor != 0:
                rows[r] = [v - factor * p for v, p in zip(rows[r], rows[col], strict=True)]
    return [row[n] for row in rows]
