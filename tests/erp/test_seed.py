"""The ERP seed: deterministic rows, the planted faults, and ``engine seed``."""

from __future__ import annotations

import os
import subprocess
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine

from engine import BadInput, Settings
from flows.erp.document_posting import post_documents
from flows.tools.seed import SeedReport, seed
from flows.tools.seed_paper import HOSTILE_MEMOS

TINY: dict[str, Any] = {
    "stores": 5,
    "brands": 2,
    "employees": 12,
    "items": 30,
    "period": "2026-11",
    "new_stores": 1,
}

# every table the seed writes, with the key that orders its rows
TABLES = {
    "erp_brands": "id",
    "erp_stores": "id",
    "erp_employees": "id",
    "erp_items": "id",
    "erp_periods": "period",
    "erp_opening_balances": "store_id, item_id, period",
    "erp_documents": "id",
    "erp_document_lines": "document_id, line_no",
}


def fingerprints(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """md5 of each table's rows in key order: equal fingerprints, equal rows."""
    return {
        table: conn.execute(
            f"SELECT md5(coalesce(string_agg(t::text, E'\\n' ORDER BY {key}), '')) AS h "
            f"FROM {table} AS t"
        ).fetchone()["h"]
        for table, key in TABLES.items()
    }


@pytest.fixture
def seeded(conn: psycopg.Connection[Any]) -> SeedReport:
    return seed(conn, **TINY, seed=7)


@pytest.fixture
def posted(conn: psycopg.Connection[Any], seeded: SeedReport) -> SeedReport:
    """The seeded month with every document of the period posted: its stock moves exist."""
    post_documents(conn, "2026-11", 1, 10**9)
    return seeded


def test_seed__same_seed_gives_identical_rows_another_seed_differs(
    conn: psycopg.Connection[Any], seeded: SeedReport
) -> None:
    first = fingerprints(conn)
    seed(conn, **TINY, seed=7, replace=True)
    assert fingerprints(conn) == first  # replace restarts identities: ids match too

    seed(conn, **TINY, seed=8, replace=True)
    other = fingerprints(conn)
    for table in ("erp_items", "erp_opening_balances", "erp_documents", "erp_document_lines"):
        assert other[table] != first[table], table


def test_seed__counts_match_the_options_and_the_report(
    conn: psycopg.Connection[Any], seeded: SeedReport
) -> None:
    counts = {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in TABLES}
    assert counts == seeded.table_counts()
    assert (counts["erp_brands"], counts["erp_stores"]) == (2, 5)
    assert (counts["erp_employees"], counts["erp_items"]) == (12, 60)
    kinds = conn.execute("SELECT kind, count(*) AS n FROM erp_documents GROUP BY kind")
    assert {r["kind"]: r["n"] for r in kinds} == seeded.documents_by_kind
    assert set(seeded.documents_by_kind) == {
        "sales_invoice", "credit_note", "purchase_invoice", "stock_transfer", "stock_count"
    }  # fmt: skip
    # the seed writes documents; stock moves are posting's
    assert conn.execute("SELECT count(*) AS n FROM erp_stock_moves").fetchone()["n"] == 0
    stores = conn.execute(
        "SELECT s.id, s.brand_id, s.code, count(e.id) AS staff FROM erp_stores s "
        "JOIN erp_employees e ON e.store_id = s.id GROUP BY s.id ORDER BY s.id"
    ).fetchall()
    assert [(s["brand_id"], s["code"]) for s in stores] == [
        (1, "ST001"), (2, "ST002"), (1, "ST003"), (2, "ST004"), (1, "ST005")
    ]  # fmt: skip
    assert all(s["staff"] >= 1 for s in stores)
    periods = conn.execute("SELECT period, status FROM erp_periods ORDER BY period").fetchall()
    assert [(p["period"], p["status"]) for p in periods] == [
        ("2026-10", "closed"),
        ("2026-11", "open"),
    ]


def test_seed__posting_the_documents_makes_the_stock_moves_the_report_announced(
    conn: psycopg.Connection[Any], posted: SeedReport
) -> None:
    per_kind = conn.execute("SELECT kind, count(*) AS n FROM erp_stock_moves GROUP BY kind")
    assert {r["kind"]: r["n"] for r in per_kind} == posted.stock_moves_by_kind
    assert posted.stock_moves == sum(posted.stock_moves_by_kind.values()) > 0
    orphans = conn.execute(
        "SELECT count(*) AS n FROM erp_stock_moves m "
        "LEFT JOIN erp_document_lines l ON (l.document_id, l.line_no) = (m.document_id, m.line_no) "
        "LEFT JOIN erp_documents d ON d.id = m.document_id "
        "WHERE l.item_id IS DISTINCT FROM m.item_id OR d.status <> 'posted' "
        "   OR d.issued_on <> m.moved_on OR abs(m.qty) <> abs(l.qty) AND m.kind <> 'adjustment'"
    ).fetchone()["n"]
    assert orphans == 0  # every move is a line of a posted document, same item, day, quantity


def test_seed__items_have_brand_skus_and_prices_above_cost(
    conn: psycopg.Connection[Any], seeded: SeedReport
) -> None:
    items = conn.execute("SELECT * FROM erp_items ORDER BY id").fetchall()
    assert items[0]["sku"] == "BR1-000001" and items[-1]["sku"] == "BR2-000030"
    for item in items:
        assert Decimal(1) <= item["standard_cost"] <= Decimal(200)
        ratio = item["price"] / item["standard_cost"]
        assert Decimal("1.34") <= ratio <= Decimal("2.11"), item


def test_seed__every_transfer_has_two_sides_at_stores_of_the_same_brand(
    conn: psycopg.Connection[Any], posted: SeedReport
) -> None:
    outs = posted.stock_moves_by_kind["transfer_out"]
    assert outs > 0 and posted.stock_moves_by_kind["transfer_in"] == outs
    matched = conn.execute(
        """
        SELECT count(*) AS n
        FROM erp_stock_moves o
        JOIN erp_stock_moves i ON (i.document_id, i.line_no) = (o.document_id, o.line_no)
        JOIN erp_stores so ON so.id = o.store_id
        JOIN erp_stores si ON si.id = i.store_id
        WHERE o.kind = 'transfer_out' AND i.kind = 'transfer_in'
          AND i.store_id = o.counterpart_store_id AND i.counterpart_store_id = o.store_id
          AND i.store_id <> o.store_id AND si.brand_id = so.brand_id
          AND i.item_id = o.item_id AND i.moved_on = o.moved_on AND i.qty = -o.qty
        """
    ).fetchone()["n"]
    assert matched == outs


def test_seed__new_stores_start_empty_and_forward_what_they_received_and_items_loop(
    conn: psycopg.Connection[Any], posted: SeedReport
) -> None:
    assert posted.new_stores == ["ST005"]
    opening = conn.execute(
        "SELECT count(*) AS n FROM erp_opening_balances o JOIN erp_stores s ON s.id = o.store_id "
        "WHERE s.code = 'ST005'"
    ).fetchone()["n"]
    assert opening == 0
    forwarded = conn.execute(
        """
        SELECT count(DISTINCT o.item_id) AS n
        FROM erp_stock_moves o JOIN erp_stores s ON s.id = o.store_id
        WHERE s.code = 'ST005' AND o.kind = 'transfer_out'
          AND EXISTS (SELECT 1 FROM erp_stock_moves i WHERE i.store_id = o.store_id
                      AND i.item_id = o.item_id AND i.kind = 'transfer_in')
        """
    ).fetchone()["n"]
    assert forwarded >= 1
    looping = conn.execute(
        """
        SELECT count(DISTINCT a.item_id) AS n
        FROM erp_stock_moves a JOIN erp_stock_moves b
          ON b.item_id = a.item_id AND b.store_id = a.counterpart_store_id
         AND b.counterpart_store_id = a.store_id AND b.kind = 'transfer_out'
        WHERE a.kind = 'transfer_out'
        """
    ).fetchone()["n"]
    assert looping >= 1 and posted.loop_items >= 1


def test_seed__only_the_planted_items_end_in_negative_stock(
    conn: psycopg.Connection[Any], posted: SeedReport
) -> None:
    negative = conn.execute(
        """
        SELECT count(*) AS n FROM (
            SELECT store_id, item_id FROM (
                SELECT store_id, item_id, qty FROM erp_opening_balances
                UNION ALL SELECT store_id, item_id, qty FROM erp_stock_moves
            ) AS x GROUP BY store_id, item_id HAVING sum(qty) < 0
        ) AS neg
        """
    ).fetchone()["n"]
    assert negative == posted.negative_stock_items >= 1


def test_seed__moves_fall_inside_the_period_with_more_sales_on_weekends(
    conn: psycopg.Connection[Any], posted: SeedReport
) -> None:
    row = conn.execute(
        """
        SELECT min(moved_on) AS first, max(moved_on) AS last,
               count(*) FILTER (WHERE kind = 'sale' AND extract(isodow FROM moved_on) >= 6)
                   / 9.0 AS weekend,  -- November 2026 has 9 weekend days
               count(*) FILTER (WHERE kind = 'sale' AND extract(isodow FROM moved_on) < 6)
                   / 21.0 AS weekday
        FROM erp_stock_moves WHERE period = '2026-11'
        """
    ).fetchone()
    assert str(row["first"]) >= "2026-11-01" and str(row["last"]) <= "2026-11-30"
    assert row["weekend"] > row["weekday"] * Decimal("1.3")


def test_seed__bad_documents_have_their_fault_and_the_good_ones_balance(
    conn: psycopg.Connection[Any], seeded: SeedReport
) -> None:
    assert set(seeded.bad_documents) == {"closed_period", "unbalanced", "unknown_account"}
    docs = conn.execute(
        """
        SELECT d.id, d.number, d.kind, p.status AS period_status,
               sum(l.debit) = sum(l.credit) AS balanced,
               bool_and(a.code IS NOT NULL) AS accounts_known,
               bool_and(l.item_id IS NULL OR l.kind_ok) AS purchase_costs_add_up
        FROM erp_documents d
        JOIN erp_periods p ON p.period = d.period
        JOIN (SELECT *, (unit_cost IS NULL OR debit = round(qty * unit_cost, 2)) AS kind_ok
              FROM erp_document_lines) l ON l.document_id = d.id
        LEFT JOIN erp_accounts a ON a.code = l.account_code
        GROUP BY d.id, p.status ORDER BY d.id
        """
    ).fetchall()
    faults = {
        "closed_period": [d for d in docs if d["period_status"] == "closed"],
        "unbalanced": [d for d in docs if not d["balanced"]],
        "unknown_account": [d for d in docs if not d["accounts_known"]],
    }
    assert {fault: len(found) for fault, found in faults.items()} == seeded.bad_documents
    bad_ids = [d["id"] for found in faults.values() for d in found]
    assert len(bad_ids) == len(set(bad_ids))  # one fault per bad document
    assert all(d["purchase_costs_add_up"] for d in docs)
    assert {d["number"][:2] for d in docs} == {"SI", "PI", "CN", "TR", "SC"}
    issuers = conn.execute(
        "SELECT count(*) AS n FROM erp_documents d JOIN erp_employees e ON e.id = d.employee_id "
        "WHERE e.store_id <> d.store_id"
    ).fetchone()["n"]
    assert issuers == 0


def test_seed__posting_rejects_exactly_the_bad_documents_of_the_period(
    conn: psycopg.Connection[Any], posted: SeedReport
) -> None:
    rejected = conn.execute(
        "SELECT count(*) AS n FROM erp_documents WHERE status = 'rejected'"
    ).fetchone()["n"]
    in_period = posted.bad_documents["unbalanced"] + posted.bad_documents["unknown_account"]
    assert rejected == in_period
    unposted = conn.execute(
        "SELECT count(*) AS n FROM erp_documents WHERE status = 'unposted'"
    ).fetchone()["n"]
    assert unposted == posted.bad_documents["closed_period"]


def test_seed__hostile_memos_are_stored_byte_exact(
    conn: psycopg.Connection[Any], seeded: SeedReport
) -> None:
    rows = conn.execute(
        "SELECT memo, convert_to(memo, 'UTF8') AS raw FROM erp_documents WHERE memo = ANY(%s)",
        (list(HOSTILE_MEMOS),),
    ).fetchall()
    assert sorted(r["memo"] for r in rows) == sorted(HOSTILE_MEMOS)
    assert sorted(r["raw"] for r in rows) == sorted(m.encode() for m in HOSTILE_MEMOS)


def test_seed__refuses_existing_data_without_replace(
    conn: psycopg.Connection[Any], seeded: SeedReport
) -> None:
    before = fingerprints(conn)
    with pytest.raises(BadInput, match="already holds ERP data"):
        seed(conn, **TINY, seed=8)
    assert fingerprints(conn) == before


def test_seed__rejects_a_bad_period_naming_it(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(BadInput, match=r"'2026-13'.*YYYY-MM"):
        seed(conn, **{**TINY, "period": "2026-13"}, seed=1)


def engine(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    assert settings.database_url is not None
    env = {**os.environ, "ENGINE_DATABASE_URL": settings.database_url.get_secret_value()}
    return run_engine(["seed", *args], env=env, timeout=60)


TINY_ARGS = ("--stores", "3", "--brands", "2", "--employees", "6", "--items", "10")


@pytest.mark.acceptance
def test_cli_seed__prints_counts_then_refuses_a_second_run_unless_replace(
    settings: Settings,
) -> None:
    first = engine(settings, *TINY_ARGS, "--period", "2026-11")
    assert first.returncode == 0, first.stderr
    assert "erp_documents" in first.stdout and "documents by kind: credit_note" in first.stdout

    again = engine(settings, *TINY_ARGS, "--period", "2026-11")
    assert again.returncode == 2
    assert "already holds ERP data" in again.stderr and "--replace" in again.stderr

    replaced = engine(settings, *TINY_ARGS, "--period", "2026-11", "--replace", "--json")
    assert replaced.returncode == 0, replaced.stderr
    report = SeedReport.model_validate_json(replaced.stdout)
    assert report.documents == sum(report.documents_by_kind.values()) > 0


@pytest.mark.acceptance
def test_cli_seed__a_bad_period_exits_2_naming_it(settings: Settings) -> None:
    result = engine(settings, *TINY_ARGS, "--period", "2026-13")
    assert result.returncode == 2
    assert "'2026-13'" in result.stderr and "YYYY-MM" in result.stderr
