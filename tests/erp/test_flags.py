"""The flags an accountant expects (issue 35, bullet 7), each made as a bug or a user would.

Each condition is planted with documents or a row edit that every check lets
through (the books still tie), and must come back as a flag naming the store,
item or document; whether it refuses the close is its ``ERP_FLAG_*`` setting.
"""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dbpool import built_once
from erp_books import close, cost, post
from harness import engine_cli as engine
from harness import fast_settings, run_of, thread_worker, wait_job_ended
from pydantic import ValidationError

from engine import Refused, Registry, submit
from engine.config import Settings
from engine.reports import render_job_report
from flows.erp import checks, flags
from flows.erp.config import ErpSettings
from flows.tools.seed import seed

NOV, DEC = "2026-11", "2026-12"
# (account, sku or None, qty, debit, credit)
Line = tuple[str, str | None, str | None, str, str]
SETTINGS = [f"ERP_{field.upper()}" for field in set(flags.FLAGS.values())]


@pytest.fixture(autouse=True)
def default_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every flag at its default, whatever the shell running the tests says."""
    for variable in SETTINGS:
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def seeded(conn: psycopg.Connection[Any]) -> None:
    """Three stores with a month of documents for November, not posted yet."""
    built_once(
        conn,
        "test_flags.seeded",
        lambda c: seed(
            c, stores=3, brands=1, employees=3, items=5, period=NOV, seed=9, new_stores=1
        ),
    )


def document(
    conn: psycopg.Connection[Any], number: str, kind: str, store: str, lines: list[Line]
) -> None:
    """An unposted document of November at ``store``, as a user would key it in."""
    row = conn.execute(
        "SELECT (SELECT coalesce(max(id), 0) + 1 FROM erp_documents) AS id, s.id AS store_id, "
        "(SELECT min(e.id) FROM erp_employees AS e WHERE e.store_id = s.id) AS employee_id "
        "FROM erp_stores AS s WHERE s.code = %s",
        (store,),
    ).fetchone()
    assert row is not None
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (row["id"], number, kind, NOV, row["store_id"], row["employee_id"], date(2026, 11, 20)),
    )
    for no, (account, sku, qty, debit, credit) in enumerate(lines, start=1):
        conn.execute(
            "INSERT INTO erp_document_lines "
            "(document_id, line_no, account_code, item_id, qty, debit, credit) "
            "VALUES (%s, %s, %s, (SELECT id FROM erp_items WHERE sku = %s), %s, %s, %s)",
            (row["id"], no, account, sku, qty, debit, credit),
        )


def post_and_cost(conn: psycopg.Connection[Any]) -> checks.BooksCheck:
    post(conn, NOV)
    cost(conn, NOV)
    report = checks.check_period(conn, NOV)
    broken = [c.name for c in report.checks if not c.ok]
    assert broken == [], "the books must still tie: only a flag may be raised"
    return report


def by_name(report: checks.BooksCheck) -> dict[str, flags.Flag]:
    return {f.name: f for f in report.flags}


def oversell(conn: psycopg.Connection[Any]) -> None:
    """ST002 sells 10,000 of BR1-000002, far more than it had: its stock and 1300 go below 0."""
    document(
        conn,
        "SI-OVERSOLD-1",
        "sales_invoice",
        "ST002",
        [("1000", None, None, "100.00", "0"), ("4000", "BR1-000002", "10000", "0", "100.00")],
    )


def test_flags__clean_seeded_books_raise_no_refusing_flag(
    conn: psycopg.Connection[Any], seeded: None
) -> None:
    report = post_and_cost(conn)
    assert report.ok, report.problems
    assert not any(f.refuses for f in report.flags)
    assert set(by_name(report)) <= {"negative stock"}


def test_flags__inventory_in_credit_per_store_and_company_wide_refuses_the_close(
    conn: psycopg.Connection[Any], seeded: None
) -> None:
    oversell(conn)
    report = post_and_cost(conn)
    raised = by_name(report)
    store = raised["inventory in credit"]
    assert (store.action, store.setting, store.found) == (
        "refuse",
        "ERP_FLAG_INVENTORY_CREDIT",
        ["ST002"],
    )
    assert "1300 closes as a credit in 1 store(s): ST002 -" in store.detail
    company = raised["inventory in credit company-wide"]
    assert company.refuses and "1300 closes as a credit company-wide: -" in company.detail
    assert not report.ok
    assert any(
        p.startswith("flag inventory in credit (ERP_FLAG_INVENTORY_CREDIT=refuse)")
        for p in report.problems
    )
    with pytest.raises(Refused, match=r"cannot close 2026-11: .*flag inventory in credit"):
        close(conn, NOV)


def test_flags__negative_stock_names_the_store_item_and_how_it_is_valued(
    conn: psycopg.Connection[Any], seeded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    oversell(conn)
    monkeypatch.setenv("ERP_FLAG_INVENTORY_CREDIT", "warn")
    report = post_and_cost(conn)
    negative = by_name(report)["negative stock"]
    assert negative.action == "warn" and "ST002 BR1-000002" in negative.found
    cost_row = conn.execute(
        "SELECT c.closing_qty, c.closing_value, c.average_cost, c.average_from "
        "FROM erp_item_costs AS c JOIN erp_stores AS s ON s.id = c.store_id "
        "JOIN erp_items AS i ON i.id = c.item_id "
        "WHERE c.period = %s AND s.code = 'ST002' AND i.sku = 'BR1-000002'",
        (NOV,),
    ).fetchone()
    assert cost_row is not None and cost_row["closing_qty"] < 0
    assert (
        f"ST002 BR1-000002 qty {cost_row['closing_qty']} valued {cost_row['closing_value']} "
        f"at {cost_row['average_cost']} ({cost_row['average_from']})"
    ) in negative.detail
    # warnings only: the check passes and the period closes
    assert report.ok, report.problems
    monkeypatch.setenv("ERP_FLAG_NEGATIVE_STOCK", "refuse")
    refused = checks.check_period(conn, NOV)
    assert not refused.ok
    assert any(
        "flag negative stock (ERP_FLAG_NEGATIVE_STOCK=refuse)" in p for p in refused.problems
    )
    monkeypatch.setenv("ERP_FLAG_NEGATIVE_STOCK", "warn")
    close(conn, NOV)


def test_flags__a_negative_average_refuses_by_default_and_warns_when_set(
    conn: psycopg.Connection[Any], seeded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    post(conn, NOV)
    # a migrated opening stock valued below zero (a sign lost on the way in)
    conn.execute(
        "UPDATE erp_opening_balances SET value = -100000 "
        "WHERE period = %s AND store_id = 1 AND item_id = 5",
        (NOV,),
    )
    report = post_and_cost(conn)
    negative = by_name(report)["negative average"]
    assert negative.refuses and negative.found == ["ST001 BR1-000005"]
    average = conn.execute(
        "SELECT average_cost, cogs_value FROM erp_item_costs "
        "WHERE period = %s AND store_id = 1 AND item_id = 5",
        (NOV,),
    ).fetchone()
    assert average is not None and average["average_cost"] < 0
    assert f"ST001 BR1-000005 average {average['average_cost']}" in negative.detail
    assert f"at COGS {average['cogs_value']}" in negative.detail
    assert any(p.startswith("flag negative average") for p in report.problems)
    with pytest.raises(Refused, match="flag negative average"):
        close(conn, NOV)
    monkeypatch.setenv("ERP_FLAG_NEGATIVE_AVERAGE", "warn")
    monkeypatch.setenv("ERP_FLAG_INVENTORY_CREDIT", "warn")
    warned = checks.check_period(conn, NOV)
    assert warned.ok, warned.problems
    assert by_name(warned)["negative average"].action == "warn"


def test_flags__a_solved_average_below_zero_is_flagged_before_its_store_is_costed(
    conn: psycopg.Connection[Any], seeded: None
) -> None:
    post(conn, NOV)
    conn.execute(
        "INSERT INTO erp_item_averages (period, item_id, store_id, average_cost, average_from) "
        "VALUES (%s, 3, 2, -4.5000, 'solved')",
        (NOV,),
    )
    negative = by_name(checks.check_period(conn, NOV))["negative average"]
    assert "ST002 BR1-000003 average -4.5000 (solved); store not costed yet" in negative.detail


def test_flags__a_document_posted_to_cogs_is_listed_by_number_and_warns_by_default(
    conn: psycopg.Connection[Any], seeded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    document(
        conn,
        "PI-FREIGHT-7",
        "purchase_invoice",
        "ST001",
        [("5000", None, None, "12.34", "0"), ("2000", None, None, "0", "12.34")],
    )
    report = post_and_cost(conn)
    direct = by_name(report)["direct COGS"]
    assert (direct.action, direct.found) == ("warn", ["PI-FREIGHT-7"])
    assert "PI-FREIGHT-7 (ST001) 5000 12.34" in direct.detail
    assert "(difference 12.34)" in direct.detail
    assert report.ok, report.problems
    monkeypatch.setenv("ERP_FLAG_DIRECT_COGS", "refuse")
    with pytest.raises(Refused, match=r"flag direct COGS .*PI-FREIGHT-7"):
        close(conn, NOV)


def test_flags__an_empty_month_warns_and_refuses_when_set(
    conn: psycopg.Connection[Any], seeded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = post_and_cost(conn)
    assert "empty month" not in by_name(report)
    empty = by_name(checks.check_period(conn, DEC))["empty month"]
    assert (empty.action, empty.found) == ("warn", [DEC])
    assert checks.check_period(conn, DEC).ok
    monkeypatch.setenv("ERP_FLAG_EMPTY_MONTH", "refuse")
    assert not checks.check_period(conn, DEC).ok


@pytest.mark.parametrize("variable", sorted(SETTINGS))
def test_flag_settings__a_bad_value_is_refused_naming_it_and_the_valid_ones(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "maybe")
    with pytest.raises(ValidationError, match=f"{variable[4:].lower()}"):
        ErpSettings()


@pytest.mark.acceptance
def test_books_cli__check_and_trial_balance_show_the_flags(
    settings: Settings, conn: psycopg.Connection[Any], seeded: None
) -> None:
    oversell(conn)
    post_and_cost(conn)
    text = engine(settings, "books", "check", "--period", NOV)
    assert text.returncode == 1, text.stderr
    assert "  REFUSE  flag inventory in credit (ERP_FLAG_INVENTORY_CREDIT=refuse): " in text.stdout
    assert "  WARN    flag negative stock (ERP_FLAG_NEGATIVE_STOCK=warn): " in text.stdout
    assert "flag inventory in credit" in text.stderr
    data = engine(settings, "books", "check", "--period", NOV, "--json")
    report = json.loads(data.stdout)
    assert report["ok"] is False
    actions = {f["name"]: f["action"] for f in report["flags"]}
    assert actions.items() >= {("inventory in credit", "refuse"), ("negative stock", "warn")}
    warned = engine(
        settings, "books", "check", "--period", NOV, env={"ERP_FLAG_INVENTORY_CREDIT": "warn"}
    )
    assert warned.returncode == 0, warned.stderr
    assert "  WARN    flag inventory in credit (ERP_FLAG_INVENTORY_CREDIT=warn)" in warned.stdout
    tb = engine(settings, "books", "trial-balance", "--period", NOV)
    assert tb.returncode == 0, tb.stderr
    assert "  REFUSE  flag inventory in credit" in tb.stdout
    tb_json = json.loads(
        engine(settings, "books", "trial-balance", "--period", NOV, "--json").stdout
    )
    assert (
        "ST002" in next(f for f in tb_json["flags"] if f["name"] == "inventory in credit")["found"]
    )


@pytest.mark.acceptance
def test_books_cli__a_bad_flag_setting_exits_3_naming_it(
    settings: Settings, conn: psycopg.Connection[Any], seeded: None
) -> None:
    result = engine(
        settings, "books", "check", "--period", NOV, env={"ERP_FLAG_NEGATIVE_STOCK": "maybe"}
    )
    assert result.returncode == 3
    assert "bad setting ERP_FLAG_NEGATIVE_STOCK='maybe': expected 'warn' or 'refuse'" in (
        result.stderr
    )


CLOSE_FLOWS = ["flows.close", "flows.costing", "flows.posting"]


def test_close__the_month_end_report_shows_the_flags_and_a_refusing_one_fails_the_close(
    settings: Settings,
    conn: psycopg.Connection[Any],
    seeded: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    document(
        conn,
        "PI-FREIGHT-7",
        "purchase_invoice",
        "ST001",
        [("5000", None, None, "12.34", "0"), ("2000", None, None, "0", "12.34")],
    )
    fast = fast_settings(
        settings, flow_modules=CLOSE_FLOWS, concurrency=2, reports_dir=tmp_path / "reports"
    )
    registry = Registry.load(CLOSE_FLOWS)
    monkeypatch.setenv("ERP_FLAG_DIRECT_COGS", "refuse")
    refused = submit("close", {"period": NOV}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, refused.job_id, timeout=120) == "failed"
    error = run_of(conn, refused.job_id, "check")["error"]["message"]
    assert "flag direct COGS (ERP_FLAG_DIRECT_COGS=refuse)" in error and "PI-FREIGHT-7" in error
    monkeypatch.setenv("ERP_FLAG_DIRECT_COGS", "warn")
    job = submit("close", {"period": NOV}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
    summary = run_of(conn, job.job_id, "month_end")["output"]
    assert {f["name"]: f["action"] for f in summary["checks"]["flags"]}["direct COGS"] == "warn"
    page = Path(render_job_report(fast, job.job_id, registry=registry)).read_text(encoding="utf-8")
    assert "<h3>Flags</h3>" in page
    assert "ERP_FLAG_DIRECT_COGS=warn" in page and "PI-FREIGHT-7 (ST001) 5000 12.34" in page
    assert Decimal(summary["trial_balance"]["debit"]) == Decimal(summary["trial_balance"]["credit"])


def test_readme__lists_every_flag_with_its_setting_and_default() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    defaults = ErpSettings()
    for name, field in flags.FLAGS.items():
        row = f"`ERP_{field.upper()}` (`{getattr(defaults, field)}`)"
        assert row in readme, f"README's Flags table lacks {name}: {row}"
