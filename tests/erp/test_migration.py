"""The migration flow: validate each row, upsert by natural key, a rerun changes nothing."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended

from engine import Registry, submit
from engine.config import Settings

ITEMS = """sku,brand_code,name,standard_cost,price
BR1-0001,BR1,Shirt,12.5,29.90
BR1-0002,BR1,"Socks, pair",1.2345,3.99
BR1-0003,BR1,=cmd|' /C calc'!A0,2,4
BR9-0001,BR9,Ghost brand item,1,2
BR1-0004,BR1,Negative,-1,2
bad sku!,BR1,Bad sku,1,2
BR1-0005,BR1,Too precise,1.23456,2
BR1-0006,BR1,<script>alert(1)</script>,5,9.5
"""


@pytest.fixture
def registry() -> Registry:
    return Registry.load(["flows.migration"])


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    # the flow reads ENGINE_REPORTS_DIR as a worker process would
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "reports"))
    return fast_settings(
        settings, flow_modules=["flows.migration"], reports_dir=tmp_path / "reports"
    )


@pytest.fixture
def brand(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO erp_brands VALUES (1, 'BR1', 'North')")
    conn.execute("INSERT INTO erp_stores VALUES (1, 'ST001', 1, 'a', 'large')")
    conn.execute("INSERT INTO erp_periods (period) VALUES ('2026-11')")


def run(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, source: Path, kind: str
) -> dict[str, Any]:
    job = submit(
        "migration", {"source": str(source), "kind": kind}, settings=fast, registry=registry
    )
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"
    row = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = 'report'", (job.job_id,)
    ).fetchone()
    assert row is not None
    return dict(row["output"])


@pytest.mark.usefixtures("brand")
def test_migration__items_loaded_rejects_written_and_a_rerun_changes_nothing(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    source.write_text(ITEMS, encoding="utf-8")
    first = run(fast, conn, registry, source, "items")
    assert (first["rows"], first["inserted"], first["rejected"]) == (8, 4, 4)
    names = conn.execute("SELECT sku, name FROM erp_items ORDER BY sku").fetchall()
    assert {r["sku"]: r["name"] for r in names}["BR1-0003"] == "=cmd|' /C calc'!A0"
    assert {r["sku"]: r["name"] for r in names}["BR1-0006"] == "<script>alert(1)</script>"
    rejects = list(csv.reader(Path(first["rejects_file"]).read_text(encoding="utf-8").splitlines()))
    reasons = {int(r[0]): r[1] for r in rejects[1:]}
    assert "unknown brand BR9" in reasons[4]
    assert "standard_cost" in reasons[5] and "-1" in reasons[5]
    assert "sku" in reasons[6]
    assert "standard_cost" in reasons[7]
    assert all(not cell.startswith("=") for r in rejects for cell in r)

    before = conn.execute("SELECT xmin::text AS v, * FROM erp_items ORDER BY id").fetchall()
    # the same file again: a new job (the first one ended) that changes nothing
    again = run(fast, conn, registry, source, "items")
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 4)
    after = conn.execute("SELECT xmin::text AS v, * FROM erp_items ORDER BY id").fetchall()
    assert after == before, "not even a row version changed"

    # an edited row is updated, and only that one
    source.write_text(ITEMS.replace("Shirt,12.5", "Shirt,13.0"), encoding="utf-8")
    edited = run(fast, conn, registry, source, "items")
    assert (edited["inserted"], edited["updated"]) == (0, 1)


@pytest.mark.usefixtures("brand")
def test_migration__opening_balances_by_natural_key(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    conn.execute("INSERT INTO erp_items VALUES (1, 1, 'BR1-0001', 'Shirt', 12.5, 29.9)")
    source = tmp_path / "opening.csv"
    source.write_text(
        "store_code,sku,period,qty,value\n"
        "ST001,BR1-0001,2026-11,10,125.00\n"
        "ST999,BR1-0001,2026-11,1,1\n"
        "ST001,NOPE,2026-11,1,1\n"
        "ST001,BR1-0001,2026-13,1,1\n",
        encoding="utf-8",
    )
    result = run(fast, conn, registry, source, "opening-balances")
    assert (result["inserted"], result["rejected"]) == (1, 3)
    reasons = [
        r["reason"]
        for r in conn.execute("SELECT reason FROM erp_migration_rejects ORDER BY row_number")
    ]
    assert "unknown store ST999" in reasons[0]
    assert "unknown item NOPE" in reasons[1]
    assert "2026-13" in reasons[2]
    balance = conn.execute("SELECT qty, value FROM erp_opening_balances").fetchone()
    assert balance is not None and str(balance["value"]) == "125.00"


def test_migration__missing_columns_fail_with_the_expected_header(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, tmp_path: Path
) -> None:
    source = tmp_path / "items.csv"
    source.write_text("sku,name\nA,b\n", encoding="utf-8")
    job = submit(
        "migration", {"source": str(source), "kind": "items"}, settings=fast, registry=registry
    )
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "failed"
    error = conn.execute(
        "SELECT error FROM engine_step_runs WHERE job_id = %s AND status = 'dead'", (job.job_id,)
    ).fetchone()
    assert error is not None
    assert "missing column(s) brand_code, standard_cost, price" in error["error"]["message"]
