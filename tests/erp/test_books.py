"""The trial balance on real PostgreSQL: the function, and ``engine books`` as a user runs it."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine

from engine import BadInput
from engine.config import Settings
from flows.erp.books import TrialBalance, trial_balance

# (period, source_key, [(account, debit, credit)])
JOURNALS = [
    ("2026-11", "document:1", [("1000", "100.00", "0"), ("4000", "0", "100.00")]),
    ("2026-11", "document:2", [("1300", "40.50", "0"), ("2000", "0", "40.50")]),
    ("2026-11", "costing:x", [("5000", "25.25", "0"), ("1300", "0", "25.25")]),
    ("2026-12", "document:3", [("1000", "999.00", "0"), ("4000", "0", "999.00")]),
]


def insert_journals(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO erp_periods (period) VALUES ('2026-10'), ('2026-11'), ('2026-12')")
    for period, key, lines in JOURNALS:
        row = conn.execute(
            "INSERT INTO erp_journals (period, source, source_key) VALUES (%s, %s, %s) "
            "RETURNING id",
            (period, key.split(":")[0], key),
        ).fetchone()
        assert row is not None
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO erp_journal_lines (journal_id, line_no, account_code, debit, credit) "
                "VALUES (%s, %s, %s, %s, %s)",
                [
                    (row["id"], n, account, Decimal(debit), Decimal(credit))
                    for n, (account, debit, credit) in enumerate(lines, start=1)
                ],
            )


def test_trial_balance__sums_the_period_by_account_whatever_the_source(
    conn: psycopg.Connection[Any],
) -> None:
    insert_journals(conn)

    tb = trial_balance(conn, "2026-11")

    assert (tb.period, tb.debit, tb.credit, tb.lines) == (
        "2026-11",
        Decimal("165.75"),
        Decimal("165.75"),
        6,
    )
    assert tb.balanced
    by_code = {a.code: a for a in tb.accounts}
    assert list(by_code) == ["1000", "1300", "2000", "4000", "5000"]
    assert by_code["1300"].balance == Decimal("15.25")
    assert by_code["4000"].balance == Decimal("-100.00")
    assert by_code["1300"].name == "Inventory"


def test_trial_balance__empty_period_is_zero_and_unknown_period_is_bad_input(
    conn: psycopg.Connection[Any],
) -> None:
    insert_journals(conn)
    empty = trial_balance(conn, "2026-10")
    assert (empty.debit, empty.credit, empty.lines, empty.accounts) == (0, 0, 0, [])
    with pytest.raises(BadInput, match="period 2031-01 does not exist"):
        trial_balance(conn, "2031-01")


def test_trial_balance__json_amounts_have_two_decimals() -> None:
    tb = TrialBalance(
        period="2026-11", debit=Decimal(5), credit=Decimal("5.5"), lines=0, accounts=[]
    )
    assert tb.model_dump(mode="json") == {
        "period": "2026-11",
        "debit": "5.00",
        "credit": "5.50",
        "lines": 0,
        "accounts": [],
    }


@pytest.mark.acceptance
def test_books_cli__json_prints_one_object(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    insert_journals(conn)
    result = engine(settings, "books", "trial-balance", "--period", "2026-12", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "period": "2026-12",
        "debit": "999.00",
        "credit": "999.00",
        "lines": 2,
        "accounts": [
            {
                "code": "1000",
                "name": "Cash",
                "debit": "999.00",
                "credit": "0.00",
                "balance": "999.00",
            },
            {
                "code": "4000",
                "name": "Sales revenue",
                "debit": "0.00",
                "credit": "999.00",
                "balance": "-999.00",
            },
        ],
    }


@pytest.mark.acceptance
def test_books_cli__human_output_is_a_table(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    insert_journals(conn)
    result = engine(settings, "books", "trial-balance", "--period", "2026-11")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Trial balance 2026-11"
    assert lines[1].split() == ["account", "name", "debit", "credit", "balance"]
    assert lines[-2].split() == ["total", "165.75", "165.75", "0.00"]
    assert lines[-1] == "6 journal lines, balanced"


@pytest.mark.acceptance
@pytest.mark.parametrize("bad", ["2026-13", "26-11", "2031-01"])
def test_books_cli__bad_or_unknown_period_exits_2_naming_it(
    settings: Settings, conn: psycopg.Connection[Any], bad: str
) -> None:
    insert_journals(conn)
    result = engine(settings, "books", "trial-balance", "--period", bad, "--json")
    assert result.returncode == 2, result.stderr
    assert bad in result.stderr
    assert result.stdout == ""
