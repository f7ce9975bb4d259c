"""The costing reference (tests/erp/reference_costing.py) on hand-worked months, and its laws.

The arithmetic of every example is written out in the comments; rounding is half away
from zero (round2 to the cent, round4 for averages).
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from itertools import combinations, permutations

import pytest
from costing_strategies import Month, months, transfer
from hypothesis import given, settings
from reference_costing import (
    FALLBACK_OPENING,
    FALLBACK_STANDARD,
    SOLVED,
    Cost,
    Move,
    cost_period,
    exact_averages,
    r2,
    r4,
    solve_exactly,
    strongly_connected_groups,
)

D = Decimal
ITEM = 7


def receipt(store: int, qty: str, unit_cost: str) -> Move:
    return Move(store, ITEM, "receipt", D(qty), unit_cost=D(unit_cost))


def sale(store: int, qty: str) -> Move:
    return Move(store, ITEM, "sale", -D(qty))


def moves_with_transfers(*moves: Move | tuple[int, int, str]) -> list[Move]:
    """Moves, where (sender, receiver, qty) stands for the two moves of a transfer."""
    out: list[Move] = []
    for m in moves:
        if isinstance(m, Move):
            out.append(m)
        else:
            transfer(out, ITEM, m[0], m[1], D(m[2]))
    return out


# -- the hand-worked months ------------------------------------------------------------


def test_two_store_loop_with_outside_supply_is_solved_exactly() -> None:
    # store 1: opening 10 for 100.00; store 2: no opening, a receipt of 10 at 13.0000
    # (value round2(10 x 13) = 130.00). Transfers 1 -> 2 of 4 and 2 -> 1 of 3.
    # A1 = 10 + 3 = 13, A2 = 10 + 4 = 14:
    #   13 a1 = 100 + 3 a2
    #   14 a2 = 130 + 4 a1
    # a1 = (100 + 3 a2) / 13, so 14 a2 = 130 + 4 (100 + 3 a2) / 13
    #   182 a2 = 1690 + 400 + 12 a2  ->  170 a2 = 2090  ->  a2 = 209/17 = 12.2941176...
    #   a1 = (100 + 627/17) / 13 = 2327/221 = 179/17 = 10.5294117...
    # rounded: a1 = 10.5294, a2 = 12.2941
    # transfer 1 -> 2: round2(4 x 10.5294 = 42.1176) = 42.12
    # transfer 2 -> 1: round2(3 x 12.2941 = 36.8823) = 36.88
    # store 1 sells 5: COGS round2(5 x 10.5294 = 52.647) = 52.65
    #   closing 10 + 3 - 5 - 4 = 4, value 100 + 36.88 - 52.65 - 42.12 = 42.11
    # store 2 sells 6: COGS round2(6 x 12.2941 = 73.7646) = 73.76
    #   closing 10 + 4 - 6 - 3 = 5, value 130 + 42.12 - 73.76 - 36.88 = 61.48
    opening = {(1, ITEM): (D("10.000"), D("100.00"))}
    moves = moves_with_transfers(
        receipt(2, "10", "13.0000"), (1, 2, "4"), (2, 1, "3"), sale(1, "5"), sale(2, "6")
    )
    exact = exact_averages(opening, moves, {ITEM: D("9")})
    assert exact[(1, ITEM)].exact == Fraction(179, 17)
    assert exact[(2, ITEM)].exact == Fraction(209, 17)

    costs = cost_period(opening, moves, {ITEM: D("9")})
    one, two = costs[(1, ITEM)], costs[(2, ITEM)]
    assert (one.average_cost, two.average_cost) == (D("10.5294"), D("12.2941"))
    assert (one.average_from, two.average_from) == (SOLVED, SOLVED)
    assert one.group == two.group == (1, 2)
    assert (one.transfer_out_value, two.transfer_in_value) == (D("42.12"), D("42.12"))
    assert (two.transfer_out_value, one.transfer_in_value) == (D("36.88"), D("36.88"))
    assert (one.receipt_value, two.receipt_value) == (D(0), D("130.00"))
    assert (one.cogs_value, two.cogs_value) == (D("52.65"), D("73.76"))
    assert (one.closing_qty, one.closing_value) == (D(4), D("42.11"))
    assert (two.closing_qty, two.closing_value) == (D(5), D("61.48"))


def test_a_new_store_forwards_goods_at_its_exact_average() -> None:
    # store 1: opening 3 for 10.00, A1 = 3: a1 = 10/3 = 3.33333... -> 3.3333
    # store 2 (new, no opening): a receipt of 1 at 5.0000 (5.00), 2 in from store 1,
    #   A2 = 1 + 2 = 3: 3 a2 = 5 + 2 x 10/3 = 35/3 -> a2 = 35/9 = 3.88888... -> 3.8889
    # store 3: opening 1 for 4.00 and 1.5 in from store 2, A3 = 2.5:
    #   2.5 a3 = 4 + 1.5 x 35/9 = 4 + 35/6 = 59/6 -> a3 = 59/15 = 3.93333... -> 3.9333
    # transfer 1 -> 2: round2(2 x 3.3333 = 6.6666) = 6.67
    # transfer 2 -> 3: round2(1.5 x 3.8889 = 5.83335) = 5.83
    # store 2 sells 0.5: COGS round2(0.5 x 3.8889 = 1.94445) = 1.94
    #   closing 1 + 2 - 0.5 - 1.5 = 1, value 5.00 + 6.67 - 1.94 - 5.83 = 3.90
    # store 1: closing 3 - 2 = 1, value 10.00 - 6.67 = 3.33
    # store 3: closing 2.5, value 4.00 + 5.83 = 9.83
    opening = {(1, ITEM): (D("3.000"), D("10.00")), (3, ITEM): (D("1.000"), D("4.00"))}
    moves = moves_with_transfers(
        (1, 2, "2"), receipt(2, "1", "5.0000"), (2, 3, "1.5"), sale(2, "0.5")
    )
    exact = exact_averages(opening, moves, {ITEM: D("1")})
    assert [exact[(s, ITEM)].exact for s in (1, 2, 3)] == [
        Fraction(10, 3),
        Fraction(35, 9),
        Fraction(59, 15),
    ]
    costs = cost_period(opening, moves, {ITEM: D("1")})
    one, two, three = (costs[(s, ITEM)] for s in (1, 2, 3))
    assert [c.average_cost for c in (one, two, three)] == [D("3.3333"), D("3.8889"), D("3.9333")]
    assert {c.average_from for c in (one, two, three)} == {SOLVED}
    assert {c.group for c in (one, two, three)} == {None}
    assert (two.transfer_in_value, two.transfer_out_value) == (D("6.67"), D("5.83"))
    assert two.cogs_value == D("1.94")
    assert (two.closing_qty, two.closing_value) == (D(1), D("3.90"))
    assert (one.closing_qty, one.closing_value) == (D(1), D("3.33"))
    assert (three.closing_qty, three.closing_value) == (D("2.5"), D("9.83"))


def test_a_closed_group_falls_back_and_still_supplies_a_solved_store() -> None:
    # stores 1 and 2: no opening, no receipts; 2 -> 1 of 4, 1 -> 2 of 3, 2 -> 3 of 1.
    # A1 = 4, A2 = 3: 4 a1 - 4 a2 = 0 and 3 a2 - 3 a1 = 0: any a1 = a2 solves it (no
    # unique solution) -> both take the standard cost 2.5000 ("fallback_standard").
    # transfer 2 -> 1: round2(4 x 2.5) = 10.00, 1 -> 2: round2(3 x 2.5) = 7.50,
    # 2 -> 3: round2(1 x 2.5) = 2.50
    # store 3: opening 10 for 30.00, A3 = 11: 11 a3 = 30 + 1 x 2.5 -> a3 = 32.5/11
    #   = 2.954545... -> 2.9545 (solved, on its own: no group)
    # store 1 sells 2: COGS round2(2 x 2.5) = 5.00; closing 4 - 2 - 3 = -1,
    #   value 10.00 - 5.00 - 7.50 = -2.50
    # store 2: closing 3 - 4 - 1 = -2, value 7.50 - 10.00 - 2.50 = -5.00
    opening = {(3, ITEM): (D("10.000"), D("30.00"))}
    moves = moves_with_transfers((2, 1, "4"), (1, 2, "3"), (2, 3, "1"), sale(1, "2"))
    costs = cost_period(opening, moves, {ITEM: D("2.5000")})
    one, two, three = (costs[(s, ITEM)] for s in (1, 2, 3))
    assert (one.average_from, two.average_from) == (FALLBACK_STANDARD, FALLBACK_STANDARD)
    assert one.group == two.group == (1, 2)
    assert one.average_cost == two.average_cost == D("2.5000")
    assert (one.transfer_in_value, one.transfer_out_value) == (D("10.00"), D("7.50"))
    assert (two.transfer_in_value, two.transfer_out_value) == (D("7.50"), D("12.50"))
    assert (one.cogs_value, one.closing_qty, one.closing_value) == (D("5.00"), D(-1), D("-2.50"))
    assert (two.closing_qty, two.closing_value) == (D(-2), D("-5.00"))
    assert (three.average_from, three.group) == (SOLVED, None)
    assert exact_averages(opening, moves, {ITEM: D("2.5")})[(3, ITEM)].exact == Fraction(65, 22)
    assert three.average_cost == D("2.9545")
    assert (three.transfer_in_value, three.closing_value) == (D("2.50"), D("32.50"))


def test_a_singular_loop_with_stock_falls_back_to_the_opening_average() -> None:
    # store 1: opening 1 for 12.00, store 2: opening -1 for -9.00; 1 -> 2 of 2, 2 -> 1 of 1.
    # A1 = 1 + 1 = 2, A2 = -1 + 2 = 1:  2 a1 - a2 = 12 and a2 - 2 a1 = -9:
    #   determinant 2 x 1 - 1 x 2 = 0 and 12 != 9: no solution -> the fallbacks:
    #   store 1 its opening average 12.00 / 1 = 12.0000 ("fallback_opening"),
    #   store 2 (opening qty not positive) the standard cost 2.5000.
    # transfer 1 -> 2: round2(2 x 12) = 24.00; 2 -> 1: round2(1 x 2.5) = 2.50
    # store 1: closing 0, value 12.00 + 2.50 - 24.00 = -9.50
    # store 2: closing 0, value -9.00 + 24.00 - 2.50 = 12.50
    opening = {(1, ITEM): (D("1.000"), D("12.00")), (2, ITEM): (D("-1.000"), D("-9.00"))}
    moves = moves_with_transfers((1, 2, "2"), (2, 1, "1"))
    costs = cost_period(opening, moves, {ITEM: D("2.5000")})
    one, two = costs[(1, ITEM)], costs[(2, ITEM)]
    assert (one.average_from, one.average_cost) == (FALLBACK_OPENING, D("12.0000"))
    assert (two.average_from, two.average_cost) == (FALLBACK_STANDARD, D("2.5000"))
    assert one.group == two.group == (1, 2)
    assert (one.closing_qty, one.closing_value) == (D(0), D("-9.50"))
    assert (two.closing_qty, two.closing_value) == (D(0), D("12.50"))


def test_a_negative_average_rounds_half_away_from_zero() -> None:
    # store 1: opening 8 for -100.01, A = 8: a = -100.01 / 8 = -12.50125 exactly
    #   -> -12.5013 (half away from zero; half-even would say -12.5012, half-up -12.5012)
    # sells 3: COGS round2(3 x -12.5013 = -37.5039) = -37.50
    #   closing 5, value -100.01 - (-37.50) = -62.51
    # store 2: opening 4 for -0.10, a = -0.025 -> -0.0250; sells 1:
    #   COGS round2(-0.025) = -0.03 (away from zero; half-even -0.02)
    #   closing 3, value -0.10 + 0.03 = -0.07
    opening = {(1, ITEM): (D("8.000"), D("-100.01")), (2, ITEM): (D("4.000"), D("-0.10"))}
    costs = cost_period(opening, [sale(1, "3"), sale(2, "1")], {ITEM: D("1")})
    one, two = costs[(1, ITEM)], costs[(2, ITEM)]
    assert (one.average_cost, one.average_from) == (D("-12.5013"), SOLVED)
    assert (one.cogs_value, one.closing_qty, one.closing_value) == (
        D("-37.50"),
        D(5),
        D("-62.51"),
    )
    assert (two.average_cost, two.cogs_value, two.closing_value) == (
        D("-0.0250"),
        D("-0.03"),
        D("-0.07"),
    )


def test_issues_are_net_and_a_store_with_nothing_available_uses_the_standard_cost() -> None:
    # store 1: no opening; sells 4, a return of 1 and an adjustment of +0.5 ->
    #   issue qty = -(-4 + 1 + 0.5) = 2.5; A = 0 -> standard cost 3.3333;
    #   COGS round2(2.5 x 3.3333 = 8.33325) = 8.33; closing -2.5, value -8.33
    moves = [
        sale(1, "4"),
        Move(1, ITEM, "return", D("1")),
        Move(1, ITEM, "adjustment", D("0.5")),
    ]
    c = cost_period({}, moves, {ITEM: D("3.3333")})[(1, ITEM)]
    assert (c.issue_qty, c.average_from, c.average_cost) == (
        D("2.5"),
        FALLBACK_STANDARD,
        D("3.3333"),
    )
    assert (c.cogs_value, c.closing_qty, c.closing_value) == (D("8.33"), D("-2.5"), D("-8.33"))


@pytest.mark.parametrize(
    ("value", "places", "expected"),
    [
        (Fraction(5, 1000), 2, "0.01"),
        (Fraction(-5, 1000), 2, "-0.01"),
        (Fraction(-4, 1000), 2, "0.00"),
        (D("-12.50125"), 4, "-12.5013"),
        (Fraction(1, 3), 4, "0.3333"),
        (Fraction(-2, 3), 4, "-0.6667"),
        (D("123456789012345678901234567.895"), 2, "123456789012345678901234567.90"),
    ],
)
def test_rounding_is_exact_and_half_away_from_zero(
    value: Fraction | Decimal, places: int, expected: str
) -> None:
    got = r2(value) if places == 2 else r4(value)
    assert got == D(expected) and str(got) == expected


def test_the_groups_come_senders_first() -> None:
    # 1 <-> 2 feeds the 3-cycle 3 -> 4 -> 5 -> 3, which feeds 6; 7 stands alone
    edges = {1: [2], 2: [1, 3], 3: [4], 4: [5], 5: [3, 6]}
    groups = strongly_connected_groups(range(1, 8), edges)
    assert sorted(groups) == [(1, 2), (3, 4, 5), (6,), (7,)]
    assert groups.index((1, 2)) < groups.index((3, 4, 5)) < groups.index((6,))


def test_the_exact_solve_says_when_there_is_no_unique_solution() -> None:
    f = Fraction
    assert solve_exactly([[f(2), f(1)], [f(1), f(3)]], [f(3), f(4)]) == [f(1), f(1)]
    assert solve_exactly([[f(0), f(1)], [f(1), f(0)]], [f(5), f(7)]) == [f(7), f(5)]
    assert solve_exactly([[f(1), f(-1)], [f(-1), f(1)]], [f(0), f(0)]) is None
    assert solve_exactly([[f(2), f(-1)], [f(-2), f(1)]], [f(12), f(-9)]) is None


# -- the laws, on random months --------------------------------------------------------

PROPERTIES = settings(max_examples=200, deadline=None)


def available(c: Cost) -> Decimal:
    return c.opening_qty + c.receipt_qty + c.transfer_in_qty


@PROPERTIES
@given(month=months())
def test_value_and_quantity_are_conserved_per_store_and_item(month: Month) -> None:
    costs = cost_period(*month)
    keys = set(month.opening) | {(m.store, m.item) for m in month.moves}
    assert set(costs) == keys
    for c in costs.values():
        assert (
            c.opening_value + c.receipt_value + c.transfer_in_value
            == c.cogs_value + c.transfer_out_value + c.closing_value
        )
        assert (
            c.opening_qty + c.receipt_qty + c.transfer_in_qty
            == c.issue_qty + c.transfer_out_qty + c.closing_qty
        )
        for v in (c.receipt_value, c.transfer_in_value, c.cogs_value, c.transfer_out_value):
            assert v == r2(v)
        assert c.average_cost == r4(c.average_cost)


@PROPERTIES
@given(month=months())
def test_transfers_move_value_between_stores_company_wide(month: Month) -> None:
    costs = cost_period(*month)
    tin: dict[int, list[Decimal]] = defaultdict(lambda: [D(0), D(0)])
    tout: dict[int, list[Decimal]] = defaultdict(lambda: [D(0), D(0)])
    for (_, item), c in costs.items():
        tin[item][0] += c.transfer_in_qty
        tin[item][1] += c.transfer_in_value
        tout[item][0] += c.transfer_out_qty
        tout[item][1] += c.transfer_out_value
    for item in month.items:
        assert tin[item] == tout[item]


@PROPERTIES
@given(month=months())
def test_the_defining_equation_holds_exactly_for_solved_stores(month: Month) -> None:
    opening, moves, standard = month
    averages = exact_averages(opening, moves, standard)
    costs = cost_period(opening, moves, standard)
    transfers_in: dict[tuple[int, int], list[tuple[int, Decimal]]] = defaultdict(list)
    for m in moves:
        if m.kind == "transfer_in":
            assert m.counterpart is not None
            transfers_in[(m.store, m.item)].append((m.counterpart, m.qty))
    for key, c in costs.items():
        average = averages[key]
        assert c.average_cost == r4(average.exact)
        assert (c.average_from, c.group) == (average.source, average.group)
        A = available(c)
        if average.source == SOLVED:
            assert A > 0
            supplied = sum(
                (Fraction(q) * averages[(sender, key[1])].exact for sender, q in transfers_in[key]),
                Fraction(0),
            )
            assert average.exact * Fraction(A) == (
                Fraction(c.opening_value) + Fraction(c.receipt_value) + supplied
            )
        else:
            # A <= 0, or a loop whose system has no unique solution
            assert A <= 0 or average.group is not None
            if c.opening_qty > 0:
                assert average.source == FALLBACK_OPENING
                assert average.exact == Fraction(c.opening_value) / Fraction(c.opening_qty)
            else:
                assert average.source == FALLBACK_STANDARD
                assert average.exact == Fraction(standard[key[1]])
        if average.group is not None:
            assert key[0] in average.group and len(average.group) > 1
            members = [((s, key[1]), averages[(s, key[1])]) for s in average.group]
            assert {a.group for _, a in members} == {average.group}
            # the stores of a loop with stock (A > 0) are solved together, or all fall back
            assert len({a.source == SOLVED for k, a in members if available(costs[k]) > 0}) <= 1


def determinant(m: list[list[Fraction]]) -> Fraction:
    """Leibniz's formula: a check of the Gauss-Jordan solve that shares nothing with it."""
    total = Fraction(0)
    for perm in permutations(range(len(m))):
        inversions = sum(perm[i] > perm[j] for i, j in combinations(range(len(perm)), 2))
        term = Fraction(-1 if inversions % 2 else 1)
        for row, col in enumerate(perm):
            term *= m[row][col]
        total += term
    return total


@PROPERTIES
@given(month=months())
def test_a_loop_falls_back_exactly_when_its_system_is_singular(month: Month) -> None:
    costs = cost_period(*month)
    pairs: dict[tuple[int, int, int], Decimal] = defaultdict(Decimal)  # (sender, receiver, item)
    for m in month.moves:
        if m.kind == "transfer_in":
            assert m.counterpart is not None
            pairs[(m.counterpart, m.store, m.item)] += m.qty
    loops = {(c.group, item) for (_, item), c in costs.items() if c.group is not None}
    for group, item in loops:
        assert group is not None
        unknown = [s for s in group if available(costs[(s, item)]) > 0]
        if not unknown:
            continue
        matrix = [
            [
                Fraction(available(costs[(r, item)]) if r == s else 0)
                - Fraction(pairs[(s, r, item)])
                for s in unknown
            ]
            for r in unknown
        ]
        solved = {costs[(s, item)].average_from == SOLVED for s in unknown}
        assert solved == {determinant(matrix) != 0}


@PROPERTIES
@given(month=months())
def test_each_transfer_is_booked_at_the_senders_rounded_average_by_both_stores(
    month: Month,
) -> None:
    costs = cost_period(*month)
    booked: dict[tuple[int, int], Decimal] = defaultdict(Decimal)
    for m in month.moves:
        if m.kind == "transfer_out":
            assert m.counterpart is not None
            booked[(m.store, m.item)] += r2(-m.qty * costs[(m.store, m.item)].average_cost)
    for key, c in costs.items():
        assert c.transfer_out_value == booked[key]
