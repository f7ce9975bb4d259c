"""Value-only corrections to goods already partly sold (issue 36, bullet 4).

A landed cost or a supplier's price correction for a receipt of a closed
period posts in the first open period and splits its amount by quantity
between the stock still on hand (1300, and the period's average) and cost
of goods sold (5000); the closed period never changes. A hand-made pair:
10 received in closed November at 5.00, 4 sold there, so 6 open December.
Real PostgreSQL; the flows' own functions and the CLI.
"""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from erp_books import close, cost, post
from erp_checks import assert_costs_equal_reference
from harness import engine_cli, fast_settings, run_of, thread_worker, wait_job_ended
from recost_books import _header, _lines, receipt, sale, stale_pairs
from test_recost import CASES, _random_document, assert_equal_to_full_recost

from engine import Registry, submit
from engine.config import Settings
from engine.reports import render_job_report
from flows.erp import checks
from flows.erp.document_posting import post_documents
from flows.erp.documents import period_documents
from flows.tools.seed import seed

NOV, DEC, JAN = "2026-11", "2026-12", "2027-01"
D = Decimal


@pytest.fixture
def pair(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """A new item: at store 1, 10 received in November at 5.00, 4 sold (December opens
    with 6 at 30.00); at store 2, 3 received and 3 sold; November posted, costed and
    closed; December open."""
    seed(conn, stores=2, brands=1, employees=2, items=3, period=NOV, seed=9)
    row = conn.execute(
        "INSERT INTO erp_items (id, brand_id, sku, name, standard_cost, price) "
        "SELECT max(id) + 1, min(brand_id), 'VC-1', 'corrected item', 4.00, 9.00 FROM erp_items "
        "RETURNING id"
    ).fetchone()
    assert row is not None
    item = int(row["id"])
    got = receipt(conn, 1, item, D(10), D("5.00"), "2026-11-05")
    sale(conn, 1, item, D(4), D("9.00"), "2026-11-10")
    sold_out = receipt(conn, 2, item, D(3), D("2.00"), "2026-11-06")
    sale(conn, 2, item, D(3), D("9.00"), "2026-11-07")
    post(conn, NOV)
    cost(conn, NOV)
    close(conn, NOV)
    return {"store": 1, "item": item, "receipt": got, "sold_out": sold_out}


def correction(
    conn: psycopg.Connection[Any],
    corrects: int | None,
    lines: list[tuple[int, Decimal]],
    on: str = "2026-11-20",
    store: int = 1,
) -> int:
    """A cost correction of ``corrects``: per (item, amount) a line on 1300 (a debit adds,
    a credit takes away), against 2000."""
    doc = _header(conn, "cost_correction", store, on)
    conn.execute("UPDATE erp_documents SET corrects_id = %s WHERE id = %s", (corrects, doc))
    total = sum((a for _, a in lines), D(0))
    _lines(
        conn,
        doc,
        [("1300", item, None, max(a, D(0)), max(-a, D(0)), None) for item, a in lines]
        + [("2000", None, None, max(-total, D(0)), max(total, D(0)), None)],
    )
    return doc


def journal(conn: psycopg.Connection[Any], doc: int) -> dict[str, tuple[Decimal, Decimal]]:
    rows = conn.execute(
        "SELECT j.period, l.account_code, sum(l.debit) AS debit, sum(l.credit) AS credit "
        "FROM erp_journals j JOIN erp_journal_lines l ON l.journal_id = j.id "
        "WHERE j.source_key = %s GROUP BY j.period, l.account_code",
        (f"document:{doc}",),
    ).fetchall()
    assert {r["period"] for r in rows} == {DEC}
    return {r["account_code"]: (r["debit"], r["credit"]) for r in rows}


def status(conn: psycopg.Connection[Any], doc: int) -> tuple[str, str | None]:
    row = conn.execute(
        "SELECT status, reject_reason FROM erp_documents WHERE id = %s", (doc,)
    ).fetchone()
    assert row is not None
    return row["status"], row["reject_reason"]


def closed_books(conn: psycopg.Connection[Any], period: str) -> dict[str, Any]:
    return {
        "costs": conn.execute(
            "SELECT * FROM erp_item_costs WHERE period = %s ORDER BY store_id, item_id", (period,)
        ).fetchall(),
        "balances": conn.execute(
            "SELECT * FROM erp_period_balances WHERE period = %s "
            "ORDER BY account_code, store_id NULLS FIRST",
            (period,),
        ).fetchall(),
        "journals": conn.execute(
            "SELECT count(*) AS n FROM erp_journals WHERE period = %s", (period,)
        ).fetchall(),
    }


def test_split__four_of_ten_sold_puts_60_percent_on_hand_and_40_in_cogs(
    conn: psycopg.Connection[Any], pair: dict[str, int]
) -> None:
    before = closed_books(conn, NOV)
    doc = correction(conn, pair["receipt"], [(pair["item"], D("20.00"))])
    row = conn.execute(
        "SELECT posting_period, date_period FROM erp_documents WHERE id = %s", (doc,)
    ).fetchone()
    assert row == {"posting_period": DEC, "date_period": NOV}, "posts in the first open period"
    with conn.transaction():
        result = post_documents(conn, DEC, 1, 10**9)
    assert status(conn, doc) == ("posted", None)
    assert journal(conn, doc) == {
        "1300": (D("12.00"), D(0)),
        "5000": (D("8.00"), D(0)),
        "2000": (D(0), D("20.00")),
    }
    [split] = result.value_corrections
    assert (split.received_qty, split.on_hand_qty, split.amount) == (D(10), D(6), D("20.00"))
    assert (split.on_hand_value, split.cogs_value) == (D("12.00"), D("8.00"))
    assert split.sold_qty == D(4)
    move = conn.execute(
        "SELECT period, kind, qty, value, store_id, item_id FROM erp_stock_moves "
        "WHERE document_id = %s",
        (doc,),
    ).fetchall()
    assert move == [
        {
            "period": DEC,
            "kind": "revaluation",
            "qty": 0,
            "value": D("12.00"),
            "store_id": pair["store"],
            "item_id": pair["item"],
        }
    ]
    # the closed month never changes, and its check stays green
    assert closed_books(conn, NOV) == before
    assert checks.check_period(conn, NOV).ok, checks.check_period(conn, NOV).problems
    cost(conn, DEC)
    dec = conn.execute(
        "SELECT opening_qty, opening_value, receipt_qty, receipt_value, average_cost "
        "FROM erp_item_costs WHERE period = %s AND store_id = %s AND item_id = %s",
        (DEC, pair["store"], pair["item"]),
    ).fetchone()
    assert dec == {
        "opening_qty": D(6),
        "opening_value": D("30.00"),
        "receipt_qty": D(0),
        "receipt_value": D("12.00"),
        "average_cost": D("7.0000"),  # (30.00 + 12.00) / 6
    }
    assert checks.check_period(conn, DEC).ok, checks.check_period(conn, DEC).problems
    assert_costs_equal_reference(conn, DEC)


def test_split__a_negative_amount_reverses_the_signs_and_rounds_to_the_cent(
    conn: psycopg.Connection[Any], pair: dict[str, int]
) -> None:
    doc = correction(conn, pair["receipt"], [(pair["item"], D("-10.01"))])
    post(conn, DEC)
    # 10.01 x 6 / 10 = 6.006 -> 6.01 on hand, the rest (4.00) to COGS
    assert journal(conn, doc) == {
        "1300": (D(0), D("6.01")),
        "5000": (D(0), D("4.00")),
        "2000": (D("10.01"), D(0)),
    }
    cost(conn, DEC)
    assert checks.check_period(conn, DEC).ok, checks.check_period(conn, DEC).problems
    assert_costs_equal_reference(conn, DEC)


def test_split__goods_all_sold_put_the_whole_amount_in_cogs_and_move_nothing(
    conn: psycopg.Connection[Any], pair: dict[str, int]
) -> None:
    doc = correction(conn, pair["sold_out"], [(pair["item"], D("3.00"))], store=2)
    post(conn, DEC)
    assert journal(conn, doc) == {"5000": (D("3.00"), D(0)), "2000": (D(0), D("3.00"))}
    moves = conn.execute(
        "SELECT count(*) AS n FROM erp_stock_moves WHERE document_id = %s", (doc,)
    ).fetchone()
    assert moves == {"n": 0}
    cost(conn, DEC)
    assert checks.check_period(conn, DEC).ok, checks.check_period(conn, DEC).problems


def test_split__into_a_costed_period_marks_the_pair_and_the_next_costing_recosts_it(
    conn: psycopg.Connection[Any], pair: dict[str, int]
) -> None:
    cost(conn, DEC)
    correction(conn, pair["receipt"], [(pair["item"], D("20.00"))])
    post(conn, DEC)
    assert (DEC, pair["store"], pair["item"]) in stale_pairs(conn)
    assert not checks.check_period(conn, DEC).ok, "stale until recosted"
    cost(conn, DEC)
    assert stale_pairs(conn) == set()
    average = conn.execute(
        "SELECT average_cost FROM erp_item_costs WHERE period = %s AND store_id = %s "
        "AND item_id = %s",
        (DEC, pair["store"], pair["item"]),
    ).fetchone()
    assert average == {"average_cost": D("7.0000")}
    assert checks.check_period(conn, DEC).ok, checks.check_period(conn, DEC).problems
    assert_costs_equal_reference(conn, DEC)
    assert_equal_to_full_recost(conn, DEC)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("names nothing", "a cost correction names no receipt"),
        ("a sale", "is not a posted purchase invoice (a sales invoice, posted)"),
        ("item not received", "is not on receipt BD-"),
        ("receipt still open", "posts in 2026-12, an open period: correct the receipt itself"),
        ("zero amount", "zero amount"),
        ("a quantity", "a cost correction carries no quantity, got 2.000"),
        ("another store", "'s stock, this correction store"),
    ],
)
def test_refused__rejected_with_its_reason_and_never_retried(
    conn: psycopg.Connection[Any], pair: dict[str, int], case: str, reason: str
) -> None:
    item, got = pair["item"], pair["receipt"]
    other = int(conn.execute("SELECT min(id) AS i FROM erp_items").fetchone()["i"])  # type: ignore[index]
    store = 1
    if case == "names nothing":
        target: int | None = None
    elif case == "a sale":
        target = int(
            conn.execute(
                "SELECT min(id) AS i FROM erp_documents WHERE kind = 'sales_invoice' "
                "AND status = 'posted'"
            ).fetchone()["i"]  # type: ignore[index]
        )
    elif case == "receipt still open":
        target = receipt(conn, 1, item, D(2), D("5.00"), "2026-12-02")
    elif case == "another store":
        target, store = got, 2
    else:
        target = got
    amount = D(0) if case == "zero amount" else D("5.00")
    doc = correction(
        conn, target, [(other if case == "item not received" else item, amount)], store=store
    )
    if case == "a quantity":
        conn.execute(
            "UPDATE erp_document_lines SET qty = 2 WHERE document_id = %s AND line_no = 1", (doc,)
        )
    post(conn, DEC)
    state, why = status(conn, doc)
    assert state == "rejected"
    assert why is not None and reason in why, why
    post(conn, DEC)  # never retried: it stays rejected, with its reason
    assert status(conn, doc) == (state, why)


def test_listed__the_documents_list_and_the_cli_show_each_split(
    conn: psycopg.Connection[Any], pair: dict[str, int], settings: Settings
) -> None:
    doc = correction(conn, pair["receipt"], [(pair["item"], D("20.00"))])
    post(conn, DEC)
    [listed] = period_documents(conn, DEC).value_corrections
    number = conn.execute("SELECT number FROM erp_documents WHERE id = %s", (doc,)).fetchone()
    assert number is not None and listed.number == number["number"]
    assert (listed.amount, listed.on_hand_value, listed.cogs_value) == (
        D("20.00"),
        D("12.00"),
        D("8.00"),
    )
    out = engine_cli(settings, "books", "documents", "--period", DEC)
    assert out.returncode == 0, out.stderr
    assert "Value corrections" in out.stdout
    assert "on hand 6 of 10: 12.00" in out.stdout and "sold 4: 8.00" in out.stdout, out.stdout


def test_listed__the_posting_job_reports_the_split(
    conn: psycopg.Connection[Any],
    pair: dict[str, int],
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "reports"))
    flows = ["flows.posting"]
    fast = fast_settings(settings, flow_modules=flows, reports_dir=tmp_path / "reports")
    registry = Registry.load(flows)
    correction(conn, pair["receipt"], [(pair["item"], D("20.00"))])
    with thread_worker(fast, registry):
        job = submit("posting", {"period": DEC}, settings=fast, registry=registry)
        assert wait_job_ended(conn, job.job_id, timeout=60) == "done"
    [split] = run_of(conn, job.job_id, "decide")["output"]["value_corrections"]
    assert (split["amount"], split["on_hand_value"], split["cogs_value"]) == (
        "20.00",
        "12.00",
        "8.00",
    )
    html = Path(render_job_report(fast, job.job_id)).read_text()
    assert "Value corrections" in html
    for text in (">20.00<", ">12.00<", ">8.00<"):
        assert text in html, text


def test_tied__a_tampered_split_or_move_is_named_by_the_check(
    conn: psycopg.Connection[Any], pair: dict[str, int]
) -> None:
    doc = correction(conn, pair["receipt"], [(pair["item"], D("20.00"))])
    post(conn, DEC)
    cost(conn, DEC)
    assert checks.check_period(conn, DEC).ok
    conn.execute(
        "UPDATE erp_stock_moves SET value = 11.00 WHERE document_id = %s AND kind = 'revaluation'",
        (doc,),
    )
    problems = " ".join(checks.check_period(conn, DEC).problems)
    assert "value 11.00, split's 12.00" in problems, problems
    conn.execute(
        "UPDATE erp_stock_moves SET value = 12.00 WHERE document_id = %s AND kind = 'revaluation'",
        (doc,),
    )
    conn.execute(
        "UPDATE erp_value_corrections SET on_hand_value = 13.00, cogs_value = 7.00 "
        "WHERE document_id = %s",
        (doc,),
    )
    problems = " ".join(checks.check_period(conn, DEC).problems)
    assert "1300 on" in problems and "journal debit 12.00" in problems, problems


def test_split__into_a_costed_period_with_a_costed_one_after_it_is_recosted_forward(
    conn: psycopg.Connection[Any], pair: dict[str, int]
) -> None:
    cost(conn, DEC)
    cost(conn, JAN)
    correction(conn, pair["receipt"], [(pair["item"], D("-6.00"))])
    post(conn, DEC)
    key = (pair["store"], pair["item"])
    assert {(DEC, *key), (JAN, *key)} <= stale_pairs(conn)
    cost(conn, DEC)
    assert stale_pairs(conn) == set()
    jan = conn.execute(
        "SELECT opening_qty, opening_value FROM erp_item_costs WHERE period = %s "
        "AND store_id = %s AND item_id = %s",
        (JAN, *key),
    ).fetchone()
    assert jan == {"opening_qty": D(6), "opening_value": D("26.40")}  # 30.00 - 6.00 x 6 / 10
    for period in (DEC, JAN):
        assert checks.check_period(conn, period).ok, checks.check_period(conn, period).problems
        assert_costs_equal_reference(conn, period)
    assert_equal_to_full_recost(conn, DEC, JAN)


def _random_correction(conn: psycopg.Connection[Any], rng: random.Random) -> None:
    """A cost correction of a random November receipt: one or two of its items, + or -."""
    receipts = conn.execute(
        "SELECT d.id, d.store_id, array_agg(DISTINCT l.item_id) AS items FROM erp_documents d "
        "JOIN erp_document_lines l ON l.document_id = d.id AND l.item_id IS NOT NULL "
        "WHERE d.kind = 'purchase_invoice' AND d.status = 'posted' AND d.posting_period = %s "
        "GROUP BY d.id ORDER BY d.id",
        (NOV,),
    ).fetchall()
    got = rng.choice(receipts)
    items = rng.sample(sorted(got["items"]), min(len(got["items"]), rng.randint(1, 2)))
    lines = [(i, D(rng.choice((-1, 1)) * rng.randint(1, 5000)) / 100) for i in items]
    correction(conn, got["id"], lines, on=f"{NOV}-{rng.randint(1, 30):02d}", store=got["store_id"])


@pytest.mark.parametrize("case", range(CASES))
def test_split__any_mix_of_value_corrections_equals_the_reference_and_a_full_recost(
    conn: psycopg.Connection[Any], case: int
) -> None:
    rng = random.Random(case)
    seed(conn, stores=4, brands=1, employees=4, items=4, period=NOV, seed=200 + case, new_stores=1)
    stores = [r["id"] for r in conn.execute("SELECT id FROM erp_stores ORDER BY id")]
    items = [r["id"] for r in conn.execute("SELECT id FROM erp_items ORDER BY id")]
    post(conn, NOV)
    cost(conn, NOV)
    close(conn, NOV)
    for _ in range(4):  # December's own month, and corrections of November's receipts
        _random_document(conn, rng, DEC, stores, items)
        _random_correction(conn, rng)
    post(conn, DEC)
    cost(conn, DEC)
    for _round in range(2):  # more, into costed December (and January), recosted
        for _ in range(rng.randint(1, 4)):
            _random_correction(conn, rng)
            _random_document(conn, rng, rng.choice((DEC, JAN)), stores, items)
        post(conn, DEC)
        post(conn, JAN)
        cost(conn, DEC)
        cost(conn, JAN)
        assert stale_pairs(conn) == set()
        for period in (DEC, JAN):
            report = checks.check_period(conn, period)
            assert all(c.ok for c in report.checks), (period, report.problems)
    splits = conn.execute("SELECT count(*) AS n FROM erp_value_corrections").fetchone()
    assert splits is not None and splits["n"] > 0
    assert_costs_equal_reference(conn, DEC)
    assert_costs_equal_reference(conn, JAN)
    assert_equal_to_full_recost(conn, DEC, JAN)


def test_tied__a_correction_re_aimed_after_posting_is_named_by_the_check(
    conn: psycopg.Connection[Any], pair: dict[str, int]
) -> None:
    doc = correction(conn, pair["receipt"], [(pair["item"], D("20.00"))])
    post(conn, DEC)
    cost(conn, DEC)
    assert checks.check_period(conn, DEC).ok
    conn.execute("UPDATE erp_documents SET corrects_id = %s WHERE id = %s", (pair["sold_out"], doc))
    report = checks.check_period(conn, DEC)
    assert not report.ok
    number = conn.execute("SELECT number FROM erp_documents WHERE id = %s", (doc,)).fetchone()
    assert number is not None
    assert number["number"] in " ".join(report.problems), report.problems
