"""``engine books check | close | reopen | history`` and refused submits, as a user runs them."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from dbpool import built_once
from erp_books import cost, post
from harness import engine_cli as engine

from engine.config import Settings
from flows.tools.seed import seed

pytestmark = pytest.mark.acceptance
NOV = "2026-11"


@pytest.fixture
def books(conn: psycopg.Connection[Any]) -> None:
    def build(c: psycopg.Connection[Any]) -> None:
        seed(c, stores=3, brands=1, employees=3, items=5, period=NOV, seed=9, new_stores=1)
        post(c, NOV)

    built_once(conn, "test_books_cli.books", build)


def cost_all(conn: psycopg.Connection[Any]) -> None:
    """Cost November for every store (as the costing steps do), without a worker."""
    cost(conn, NOV)


def test_books_cli__check_of_a_fresh_period_passes_with_skips(
    settings: Settings, books: None
) -> None:
    result = engine(settings, "books", "check", "--period", NOV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "Books check 2026-11 (open; 0 of 3 stores costed)"
    assert "  skip  transfers net to zero: skipped: 3 store(s) not costed" in result.stdout


def test_books_cli__check_exits_1_naming_each_broken_identity(
    settings: Settings, conn: psycopg.Connection[Any], books: None
) -> None:
    cost_all(conn)
    ok = engine(settings, "books", "check", "--period", NOV, "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] is True and report["stores_costed"] == 3
    assert {c["name"] for c in report["checks"] if not c["skipped"]} >= {
        "journals balance",
        "inventory conservation per store",
        "inventory conservation company-wide",
        "transfers net to zero",
        "COGS journals = item costs",
        "openings of 2026-12 = closings",
        "GL inventory = stock ledger per store",
        "GL inventory = stock ledger company-wide",
        "inter-store account nets to zero",
        "opening = last closing",
        "item costs = stock moves",
    }
    # an unbalanced journal and a COGS journal that no longer matches its costs: the
    # database refuses it at commit (erp_journal_balanced), unless its triggers are off
    # (replica mode, as a superuser restoring a dump would have them)
    conn.execute("SET session_replication_role = replica")
    conn.execute(
        "UPDATE erp_journal_lines SET debit = debit + 1 WHERE (journal_id, line_no) = "
        "(SELECT journal_id, 1 FROM erp_journal_lines l JOIN erp_journals j ON j.id = l.journal_id "
        "WHERE j.source = 'costing' AND l.debit > 0 ORDER BY journal_id LIMIT 1)"
    )
    conn.execute("SET session_replication_role = DEFAULT")
    broken = engine(settings, "books", "check", "--period", NOV)
    assert broken.returncode == 1, broken.stderr
    assert "FAIL  journals balance: 1 journal(s) do not balance (costing:2026-11:" in broken.stdout
    assert "FAIL  COGS journals = item costs: 1 store(s): " in broken.stdout
    assert "books of 2026-11: 2 check(s) failed: journals balance:" in broken.stderr
    closing = engine(settings, "books", "close", "--period", NOV)
    assert closing.returncode == 2
    assert "cannot close 2026-11: the books do not check: journals balance" in closing.stderr


def test_books_cli__close_reopen_history_and_refused_submits(
    settings: Settings, conn: psycopg.Connection[Any], books: None
) -> None:
    refused = engine(settings, "books", "close", "--period", NOV)
    assert refused.returncode == 2
    assert "cannot close 2026-11: stores ST001, ST002, ST003 not costed for it" in refused.stderr
    cost_all(conn)
    # costing out of order: December is refused while a store has no start there
    # (its carried openings set aside, as they refer to that start)
    conn.execute(
        "CREATE TEMP TABLE carried AS SELECT * FROM erp_opening_balances "
        "WHERE period = '2026-12' AND store_id = 3"
    )
    conn.execute("DELETE FROM erp_opening_balances WHERE period = '2026-12' AND store_id = 3")
    conn.execute("DELETE FROM erp_store_periods WHERE period = '2026-12' AND store_id = 3")
    dec = engine(settings, "submit", "costing", "--period", "2026-12")
    assert dec.returncode == 2
    assert (
        "cannot cost 2026-12: 1 store(s) have no starting point for it; store ST003 needs"
        in dec.stderr
    )
    conn.execute("INSERT INTO erp_store_periods VALUES (3, '2026-12', 'carried', NULL)")
    conn.execute("INSERT INTO erp_opening_balances SELECT * FROM carried")

    closed = engine(settings, "books", "close", "--period", NOV, "--by", "ann")
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout.startswith("period 2026-11 closed by ann at ")
    # every document of the period, not one job's batch
    assert "document(s) dated in 2026-11: " in closed.stdout.splitlines()[1]
    posting = engine(settings, "submit", "posting", "--period", NOV)
    assert posting.returncode == 2
    assert (
        "period 2026-11 is closed; posting its documents would change closed books"
        in posting.stderr
    )
    no_reason = engine(settings, "books", "reopen", "--period", NOV)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    reopened = engine(
        settings, "books", "reopen", "--period", NOV, "--reason", "late invoice", "--by", "bob"
    )
    assert reopened.returncode == 0, reopened.stderr
    history = engine(settings, "books", "history", "--period", NOV, "--json")
    events = json.loads(history.stdout)["events"]
    assert [(e["action"], e["actor"], e["reason"]) for e in events] == [
        ("costed", "test", ""),
        ("closed", "ann", ""),
        ("reopened", "bob", "late invoice"),
    ]
    again = engine(settings, "books", "reopen", "--period", NOV, "--reason", "x")
    assert again.returncode == 2 and "period 2026-11 is costed, not closed" in again.stderr
    # the engine's audit trail has the close and the reopen, and none of the refused ones
    audit = engine(settings, "audit", "--json")
    assert audit.returncode == 0, audit.stderr
    entries = json.loads(audit.stdout)["entries"]
    assert [
        (e["action"], e["target_kind"], e["target_id"], e["actor"], e["source"], e["reason"])
        for e in entries
    ] == [
        ("reopen", "period", NOV, "bob", "cli", "late invoice"),
        ("close", "period", NOV, "ann", "cli", None),
    ]
    bad = engine(settings, "books", "check", "--period", "2026-13")
    assert bad.returncode == 2 and "'2026-13'" in bad.stderr
