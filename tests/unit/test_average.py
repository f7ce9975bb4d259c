"""The multi-store periodic weighted average (flows/erp/average.py), worked by hand.

Each case shows its figures and the arithmetic in a comment; the expected
values are exact fractions, so a solver that iterates, rounds early or goes
through float fails here. The property test at the end checks the defining
equation ``a * A = ov + rv + Σ q * a_sender`` exactly on random graphs.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows.erp.average import (
    Average,
    Figures,
    Transfer,
    round_cost,
    round_money,
    solve_item,
)

D = Decimal
STANDARD = D("99.0000")  # far from every solved average: a fallback shows at once


def _fig(oq: str = "0", ov: str = "0", rq: str = "0", rv: str = "0") -> Figures:
    return Figures(D(oq), D(ov), D(rq), D(rv))


def _t(sender: int, receiver: int, qty: str) -> Transfer:
    return Transfer(sender, receiver, D(qty))


def _solved(exact: Fraction, cost: str, group: tuple[int, ...] | None = None) -> Average:
    return Average(cost=D(cost), source="solved", group=group, exact=exact)


# --- stores without transfers ------------------------------------------------------------


def test_solve_item__store_without_transfers_is_its_own_average() -> None:
    # A = 10 + 30 = 40; a = (100.00 + 330.00) / 40 = 430 / 40 = 10.75
    result = solve_item({1: _fig("10", "100.00", "30", "330.00")}, [], STANDARD)
    assert result == {1: _solved(Fraction(43, 4), "10.7500")}


def test_solve_item__nothing_in_takes_the_standard_cost() -> None:
    # A = 0: no average of its own, no opening average -> standard cost
    result = solve_item({1: _fig()}, [], D("7.25"))
    assert result[1] == Average(D("7.2500"), "fallback_standard", None, Fraction(29, 4))


def test_solve_item__returns_that_empty_the_stock_take_the_opening_average() -> None:
    # A = 3 + (-5) = -2 <= 0; opening qty 3 > 0 -> opening average 10.00 / 3 = 3.3333...
    result = solve_item({1: _fig("3", "10.00", "-5", "-16.00")}, [], STANDARD)
    assert result[1] == Average(D("3.3333"), "fallback_opening", None, Fraction(10, 3))


# --- chains ------------------------------------------------------------------------------


def test_solve_item__chain_through_a_store_opened_this_month() -> None:
    # 1 -> 2 -> 3; store 2 has no opening: its average comes from what it received.
    #   store 1: A = 100 + 100 = 200;  a1 = (1000.00 + 1200.00) / 200 = 11
    #   store 2: A = 30 + 50 = 80;     a2 = (390.00 + 50 * 11) / 80 = 940 / 80 = 11.75
    #   store 3: A = 20 + 40 = 60;     a3 = (240.00 + 40 * 11.75) / 60 = 710 / 60 = 71/6
    figures = {
        1: _fig("100", "1000.00", "100", "1200.00"),
        2: _fig(rq="30", rv="390.00"),
        3: _fig("20", "240.00"),
    }
    result = solve_item(figures, [_t(1, 2, "50"), _t(2, 3, "40")], STANDARD)
    assert result == {
        1: _solved(Fraction(11), "11.0000"),
        2: _solved(Fraction(47, 4), "11.7500"),
        3: _solved(Fraction(71, 6), "11.8333"),
    }


def test_solve_item__store_only_in_transfers_has_zero_figures() -> None:
    # store 2 is in no figures: A = 0 + 5 = 5, a2 = 5 * a1 / 5 = a1 = 12
    # store 3 only sends: A = 0 -> standard cost; store 4 gets 1 from it:
    #   a4 = (10.00 + 1 * 99) / (1 + 1) = 109 / 2
    figures = {1: _fig("10", "120.00"), 4: _fig(rq="1", rv="10.00")}
    result = solve_item(figures, [_t(1, 2, "5"), _t(3, 4, "1")], STANDARD)
    assert result[2] == _solved(Fraction(12), "12.0000")
    assert result[3] == Average(D("99.0000"), "fallback_standard", None, Fraction(99))
    assert result[4] == _solved(Fraction(109, 2), "54.5000")


def test_solve_item__duplicate_transfers_are_summed() -> None:
    # a1 = 100.00 / 10 = 10; store 2 gets 3 + 7 = 10: a2 = (200.00 + 10 * 10) / (10 + 10) = 15
    figures = {1: _fig("10", "100.00"), 2: _fig(rq="10", rv="200.00")}
    split = solve_item(figures, [_t(1, 2, "3"), _t(1, 2, "7")], STANDARD)
    whole = solve_item(figures, [_t(1, 2, "10")], STANDARD)
    assert split == whole
    assert split[2] == _solved(Fraction(15), "15.0000")


# --- loops -------------------------------------------------------------------------------


def test_solve_item__two_store_loop_with_outside_supply_is_solved_exactly() -> None:
    # 1 <-> 2: 1 sends 20 to 2, 2 sends 10 to 1.
    #   store 1: A = 10 + 20 + 10 = 40, own value 100.00 + 260.00 = 360
    #   store 2: A = 30 + 20 = 50,      own value 420.00
    #   40 a - 10 b = 360
    #  -20 a + 50 b = 420
    # a = 9 + b/4  ->  50 b - 20 (9 + b/4) = 420  ->  45 b = 600  ->  b = 40/3, a = 37/3
    # check: 40 * 37/3 = 1480/3 = 360 + 10 * 40/3;  50 * 40/3 = 2000/3 = 420 + 20 * 37/3
    figures = {1: _fig("10", "100.00", "20", "260.00"), 2: _fig(rq="30", rv="420.00")}
    result = solve_item(figures, [_t(1, 2, "20"), _t(2, 1, "10")], STANDARD)
    assert result == {
        1: _solved(Fraction(37, 3), "12.3333", (1, 2)),
        2: _solved(Fraction(40, 3), "13.3333", (1, 2)),
    }


def test_solve_item__three_store_loop_and_a_store_it_feeds() -> None:
    # 1 -> 2 -> 3 -> 1, 5 units each; 2 also sends 3 to store 4 (outside the loop).
    #   15 a1 = 100.00 + 5 a3        (A1 = 10 + 5)
    #   15 a2 = 120.00 + 5 a1        (A2 = 10 + 5; the 3 sent to store 4 are not an input)
    #   10 a3 =  70.00 + 5 a2        (A3 = 5 + 5)
    # a1 = 20/3 + a3/3, a2 = 8 + a1/3 = 92/9 + a3/9, a3 = 7 + a2/2 = 109/9 + a3/18
    #   -> a3 = 218/17, a1 = 186/17, a2 = 198/17
    # check: 15 * 186/17 = 2790/17 = 100 + 5 * 218/17;  10 * 218/17 = 2180/17 = 70 + 5 * 198/17
    # store 4: A = 3, a4 = 3 * a2 / 3 = 198/17
    figures = {
        1: _fig("10", "100.00"),
        2: _fig(rq="10", rv="120.00"),
        3: _fig(rq="5", rv="70.00"),
    }
    transfers = [_t(1, 2, "5"), _t(2, 3, "5"), _t(3, 1, "5"), _t(2, 4, "3")]
    result = solve_item(figures, transfers, STANDARD)
    loop = (1, 2, 3)
    assert result == {
        1: _solved(Fraction(186, 17), "10.9412", loop),
        2: _solved(Fraction(198, 17), "11.6471", loop),
        3: _solved(Fraction(218, 17), "12.8235", loop),
        4: _solved(Fraction(198, 17), "11.6471"),
    }


def test_solve_item__loop_without_outside_supply_falls_back_and_says_so() -> None:
    # 1 <-> 2 with 5 units each way and nothing else: 5 a - 5 b = 0 twice, any a = b
    # solves it (singular) -> both take the standard cost 7.50, singular, group (1, 2).
    # Store 3 gets 2 from store 2 at that fallback: a3 = (20.00 + 2 * 7.5) / 4 = 35/4
    figures = {3: _fig(rq="2", rv="20.00")}
    transfers = [_t(1, 2, "5"), _t(2, 1, "5"), _t(2, 3, "2")]
    result = solve_item(figures, transfers, D("7.50"))
    fallback = Average(D("7.5000"), "fallback_standard", (1, 2), Fraction(15, 2), singular=True)
    assert result == {1: fallback, 2: fallback, 3: _solved(Fraction(35, 4), "8.7500")}


def test_solve_item__singular_loop_takes_each_store_its_own_fallback() -> None:
    # store 1 opened 10 for 100.00 and returned all 10 (-100.00): own figures net to zero,
    # so the loop is still singular; store 1 falls back to its opening average 100/10 = 10,
    # store 2 (no opening) to the standard cost.
    figures = {1: _fig("10", "100.00", "-10", "-100.00")}
    result = solve_item(figures, [_t(1, 2, "5"), _t(2, 1, "5")], STANDARD)
    assert result == {
        1: Average(D("10.0000"), "fallback_opening", (1, 2), Fraction(10), singular=True),
        2: Average(D("99.0000"), "fallback_standard", (1, 2), Fraction(99), singular=True),
    }


# --- A <= 0 (negative opening) --------------------------------------------------------------


def test_solve_item__negative_opening_outside_a_loop_falls_back() -> None:
    # store 2: a2 = 600.00 / 50 = 12; store 1: A = -20 + 10 = -10 <= 0 -> standard 9.00
    # store 1 still sends 4 to store 3 at 9: a3 = (30.00 + 4 * 9) / (3 + 4) = 66/7
    figures = {1: _fig("-20", "-200.00"), 2: _fig("50", "600.00"), 3: _fig(rq="3", rv="30.00")}
    transfers = [_t(2, 1, "10"), _t(1, 3, "4")]
    result = solve_item(figures, transfers, D("9.00"))
    assert result == {
        1: Average(D("9.0000"), "fallback_standard", None, Fraction(9)),
        2: _solved(Fraction(12), "12.0000"),
        3: _solved(Fraction(66, 7), "9.4286"),
    }


def test_solve_item__negative_opening_inside_a_loop_is_a_known_sender() -> None:
    # 1 <-> 2; store 1: A = -20 + 10 = -10 -> standard 9 (a known constant in the loop)
    # store 2: A = 10 + 5 = 15; 15 a2 = 110.00 + 5 * 9 = 155 -> a2 = 31/3
    figures = {1: _fig("-20", "-200.00"), 2: _fig(rq="10", rv="110.00")}
    result = solve_item(figures, [_t(2, 1, "10"), _t(1, 2, "5")], D("9.00"))
    assert result == {
        1: Average(D("9.0000"), "fallback_standard", (1, 2), Fraction(9)),
        2: _solved(Fraction(31, 3), "10.3333", (1, 2)),
    }


def test_solve_item__fallback_sender_passes_its_unrounded_average() -> None:
    # store 1: A = 3 - 5 = -2 -> opening average 10.00 / 3 = 10/3 exactly (3.3333 rounded)
    # store 2 gets 300 from it: a2 = (1.00 + 300 * 10/3) / 301 = 1001/301 = 143/43 = 3.32558...
    # (with the rounded 3.3333 it would be 1000.99 / 301 = 3.32554... -> 3.3255)
    figures = {1: _fig("3", "10.00", "-5", "-16.00"), 2: _fig(rq="1", rv="1.00")}
    result = solve_item(figures, [_t(1, 2, "300")], STANDARD)
    assert result[1].source == "fallback_opening"
    assert result[2] == _solved(Fraction(143, 43), "3.3256")


# --- rounding ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exact", "cost"),
    [
        (Fraction("1.23455"), "1.2346"),  # half at the 5th decimal goes up
        (Fraction("-1.23455"), "-1.2346"),  # ... and away from zero when negative
        (Fraction("1.234549999"), "1.2345"),
        (Fraction("1.00005"), "1.0001"),  # float(1.00005) = 1.0000499999... would give 1.0000
        (Fraction(2, 3), "0.6667"),
        (Fraction(-2, 3), "-0.6667"),
        (Fraction(-1, 30000), "0.0000"),
        (Fraction(10**30) + Fraction(1, 3), "1000000000000000000000000000000.3333"),
    ],
)
def test_round_cost__four_decimals_half_away_from_zero(exact: Fraction, cost: str) -> None:
    rounded = round_cost(exact)
    assert rounded == D(cost) and rounded.as_tuple().exponent == -4


@pytest.mark.parametrize(
    ("amount", "money"),
    [
        (D("2.345"), "2.35"),
        (D("-2.345"), "-2.35"),
        (D("2.3449"), "2.34"),
        (Fraction(1, 3), "0.33"),
        (Fraction(-5, 1000), "-0.01"),
    ],
)
def test_round_money__two_decimals_half_away_from_zero(
    amount: Fraction | Decimal, money: str
) -> None:
    rounded = round_money(amount)
    assert rounded == D(money) and rounded.as_tuple().exponent == -2


def test_solve_item__average_rounds_half_away_from_zero() -> None:
    # store 1: 9.87 / 8 = 1.23375 -> 1.2338; store 2 (negative opening value): -1.23375 -> -1.2338
    figures = {1: _fig(rq="8", rv="9.87"), 2: _fig("8", "-9.87")}
    result = solve_item(figures, [], STANDARD)
    assert result[1] == _solved(Fraction("1.23375"), "1.2338")
    assert result[2] == _solved(Fraction("-1.23375"), "-1.2338")


# --- bad input ---------------------------------------------------------------------------


def test_solve_item__transfer_to_itself_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"sender and receiver are both store 7"):
        solve_item({7: _fig("1", "1.00")}, [_t(7, 7, "1")], STANDARD)


@pytest.mark.parametrize("qty", ["0", "-1.000"])
def test_solve_item__transfer_without_positive_qty_is_rejected(qty: str) -> None:
    with pytest.raises(ValueError, match=rf"qty {qty}: .*must be > 0"):
        solve_item({}, [_t(1, 2, qty)], STANDARD)


# --- property: the defining equation holds exactly ---------------------------------------

_QTY = st.integers(-3000, 20000).map(lambda n: Decimal(n).scaleb(-3))
_VALUE = st.integers(-50000, 500000).map(lambda n: Decimal(n).scaleb(-2))
_FIGURES = st.builds(
    Figures,
    opening_qty=st.one_of(st.just(D(0)), _QTY),
    opening_value=_VALUE,
    receipt_qty=st.one_of(st.just(D(0)), _QTY),
    receipt_value=_VALUE,
)


@st.composite
def _items(draw: st.DrawFn) -> tuple[dict[int, Figures], list[Transfer]]:
    n = draw(st.integers(1, 7))
    figures = draw(st.dictionaries(st.integers(0, n - 1), _FIGURES, max_size=n))
    pairs = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1])
    moves = draw(st.lists(pairs, max_size=12))
    qty = st.integers(1, 5000).map(lambda n: Decimal(n).scaleb(-3))
    transfers = [Transfer(s, r, draw(qty)) for s, r in moves]
    return figures, transfers


@settings(max_examples=300, deadline=None)
@given(item=_items(), standard=_VALUE)
def test_solve_item__solved_averages_satisfy_the_defining_equation(
    item: tuple[dict[int, Figures], list[Transfer]], standard: Decimal
) -> None:
    figures, transfers = item
    result = solve_item(figures, transfers, standard)

    inflow: dict[int, dict[int, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for t in transfers:
        inflow[t.receiver][t.sender] += Fraction(t.qty)
    assert set(result) == set(figures) | {t.sender for t in transfers} | set(inflow)

    for store, average in result.items():
        f = figures.get(store, Figures())
        qty = Fraction(f.opening_qty + f.receipt_qty) + sum(inflow[store].values(), Fraction(0))
        assert average.cost == round_cost(average.exact)
        if average.group is not None:
            assert store in average.group
            assert all(result[s].group == average.group for s in average.group)
        if average.source == "solved":
            own = Fraction(f.opening_value) + Fraction(f.receipt_value)
            received = sum((q * result[s].exact for s, q in inflow[store].items()), Fraction(0))
            assert qty > 0 and not average.singular
            assert average.exact * qty == own + received
        else:
            assert qty <= 0 or average.singular
            if f.opening_qty > 0:
                assert average.source == "fallback_opening"
                assert average.exact == Fraction(f.opening_value) / Fraction(f.opening_qty)
            else:
                assert average.source == "fallback_standard"
                assert average.exact == Fraction(standard)
        if average.singular:
            assert average.group is not None
            assert all(result[s].singular for s in average.group)
