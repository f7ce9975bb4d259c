"""The costing flow end to end through workers, on real books."""

from __future__ import annotations

import json
import os
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from erp_checks import assert_books_balance, assert_costs_equal_reference, books_snapshot
from harness import ROOT, SUPPORT, fast_settings, thread_worker, wait_job_ended

from engine import Refused, Registry, submit
from engine.config import Settings
from engine.jobs.search import RunQuery, search_runs
from engine.reports.context import build_run_report
from engine.store.read import sqlalchemy_engine
from flows.erp import inventory
from flows.tools.search import search_fields

PERIOD = "2026-11"


@pytest.fixture
def registry() -> Registry:
    return Registry.load(["flows.costing"])


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, flow_modules=["flows.costing"], concurrency=2)


@pytest.fixture
def small_erp(conn: psycopg.Connection[Any]) -> None:
    """Two brands, four stores, a handful of items, one month of moves."""
    conn.execute("INSERT INTO erp_brands VALUES (1, 'BR1', 'North'), (2, 'BR2', 'South')")
    conn.execute(
        "INSERT INTO erp_stores VALUES (1, 'ST001', 1, 'a', 'large'), "
        "(2, 'ST002', 1, 'b', 'small'), (3, 'ST003', 2, 'c', 'medium'), "
        "(4, 'ST004', 2, 'd', 'flagship')"
    )
    conn.execute(
        "INSERT INTO erp_items VALUES (1, 1, 'BR1-1', 'shirt', 12.5, 30), "
        "(2, 1, 'BR1-2', 'socks', 1.2345, 4), (3, 2, 'BR2-1', 'lamp', 80, 150), "
        "(4, 2, 'BR2-2', 'bulb', 0.333, 1)"
    )
    conn.execute("INSERT INTO erp_periods (period) VALUES ('2026-11')")
    # every store's books start in November, from the openings below
    conn.execute(
        "INSERT INTO erp_store_periods (store_id, period, opening) "
        "SELECT id, '2026-11', 'loaded' FROM erp_stores"
    )
    conn.execute(
        "INSERT INTO erp_opening_balances VALUES (1, 1, '2026-11', 10, 130), "
        "(1, 2, '2026-11', 3, 3.70), (2, 1, '2026-11', 4, 50), (3, 3, '2026-11', 2, 161),"
        " (4, 4, '2026-11', 1000, 333)"
    )
    moves = [
        (1, 1, "receipt", 20, 13.10, None),
        (1, 1, "sale", -25, None, None),
        (1, 1, "return", 2, None, None),
        (1, 1, "transfer_out", -3, None, 2),
        (2, 1, "transfer_in", 3, None, 1),
        (2, 1, "sale", -9, None, None),  # more than it ever had: negative stock
        (2, 1, "transfer_out", -2, None, 1),  # and back: ST001 and ST002 form a loop
        (1, 1, "transfer_in", 2, None, 2),
        (1, 2, "receipt", 7, 1.3333, None),
        (1, 2, "adjustment", -1, None, None),
        (3, 3, "receipt", 5, 79.99, None),
        (3, 3, "sale", -6, None, None),
        (4, 4, "sale", -333, None, None),
        (4, 4, "transfer_out", -100, None, 3),
        (3, 4, "transfer_in", 100, None, 4),
    ]
    # the moves are lines of one posted document; a transfer's two sides share a line
    conn.execute("INSERT INTO erp_employees VALUES (1, 1, 'Ann', 'clerk')")
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on, "
        "status) VALUES (1, 'SC-1', 'stock_count', %s, 1, 1, '2026-11-10', 'posted')",
        (PERIOD,),
    )
    with conn.cursor().copy(
        "COPY erp_stock_moves (period, store_id, item_id, moved_on, kind, qty, unit_cost, "
        "counterpart_store_id, document_id, line_no) FROM STDIN"
    ) as copy:
        line = 0
        for store, item, kind, qty, cost, cp in moves:
            line += kind != "transfer_in"
            copy.write_row((PERIOD, store, item, "2026-11-10", kind, qty, cost, cp, 1, line))


def summary(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    row = conn.execute(
        "SELECT output FROM engine_step_runs WHERE job_id = %s AND step = 'summarize'", (job_id,)
    ).fetchone()
    assert row is not None
    return dict(row["output"])


@pytest.mark.usefixtures("small_erp")
def test_costing__books_equal_the_reference_and_balance(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert assert_costs_equal_reference(conn, PERIOD) == 6
    assert_books_balance(conn)
    result = summary(conn, job.job_id)
    assert result["stores"] == 4
    assert result["negative_items"] == 1
    assert [b["brand"] for b in result["brands"]] == ["BR1", "BR2"]
    assert conn.execute(
        "SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)
    ).fetchone() == {"status": "costed"}
    carried = conn.execute(
        "SELECT count(*) AS n FROM erp_opening_balances WHERE period = '2026-12'"
    ).fetchone()
    assert carried == {"n": 6}
    journals = conn.execute(
        "SELECT count(*) AS n FROM erp_journals WHERE source = 'costing'"
    ).fetchone()
    assert journals == {"n": 4}


@pytest.mark.usefixtures("small_erp")
def test_costing__a_job_run_twice_leaves_the_same_books(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    with thread_worker(fast, registry):
        first = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
        assert wait_job_ended(conn, first.job_id) == "done"
        books = books_snapshot(conn)
        again = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
        assert again.created
        assert wait_job_ended(conn, again.job_id) == "done"
    assert books_snapshot(conn) == books
    assert "already costed" in summary(conn, again.job_id)["note"]


@pytest.mark.usefixtures("small_erp")
def test_costing__a_store_step_that_dies_halfway_leaves_nothing_and_is_retried(
    fast: Settings,
    conn: psycopg.Connection[Any],
    registry: Registry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = inventory.post_costing
    failures = {"left": 2}

    def crash_after_writing(*args: Any, **kwargs: Any) -> dict[str, int]:
        journals = real(*args, **kwargs)
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionResetError("worker lost mid-step, after writing its rows")
        return journals

    monkeypatch.setattr(inventory, "post_costing", crash_after_writing)
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"
    assert failures["left"] == 0
    retried = conn.execute(
        "SELECT count(*) AS n FROM engine_history WHERE job_id = %s AND kind = 'retried'",
        (job.job_id,),
    ).fetchone()
    assert retried == {"n": 2}
    assert_costs_equal_reference(conn, PERIOD)
    assert_books_balance(conn)
    dup = conn.execute(
        "SELECT store_id, count(*) AS n FROM erp_journals WHERE source = 'costing' "
        "GROUP BY store_id HAVING count(*) > 1"
    ).fetchall()
    assert dup == []


@pytest.mark.usefixtures("small_erp")
def test_costing__jit_is_off_for_a_store_costing_transaction_only(
    conn: psycopg.Connection[Any],
) -> None:
    # JIT compiled the store statement for ~1 s at real size (a 0.3 s query)
    default = conn.execute("SELECT reset_val FROM pg_settings WHERE name = 'jit'").fetchone()
    with conn.transaction():
        inventory.solve_averages(conn, PERIOD)
        assert inventory.cost_store(conn, PERIOD, 1)
        inside = conn.execute("SHOW jit").fetchone()
    after = conn.execute("SHOW jit").fetchone()
    assert inside == {"jit": "off"}
    assert default is not None and after == {"jit": default["reset_val"]}


def _plan_keys(node: dict[str, Any]) -> list[str]:
    """Every group and sort key of a JSON plan, its sub-plans included."""
    keys = [*node.get("Group Key", []), *node.get("Sort Key", [])]
    for child in node.get("Plans", []):
        keys += _plan_keys(child)
    return keys


@pytest.mark.usefixtures("small_erp")
def test_costing__store_totals_are_summed_store_by_store_whatever_the_estimates(
    conn: psycopg.Connection[Any],
) -> None:
    """The totals of many stores (a recost job reads all 50 in one step) are summed per
    store over its own index range: grouping or sorting every store's item costs by store
    was planned from the estimates a costing's churn leaves stale ('221 rows' for 100,000
    at ~1M moves) and spilled a sort to disk, most of a recost job through a worker."""
    with conn.transaction():
        inventory.solve_averages(conn, PERIOD)
        for store in (1, 2, 3, 4):
            inventory.cost_store(conn, PERIOD, store)
    params = {"period": PERIOD, "stores": [1, 2, 3, 4]}
    row = conn.execute(
        "EXPLAIN (FORMAT JSON) " + inventory._q["store_costs_totals"], params
    ).fetchone()
    assert row is not None
    plan = next(iter(row.values()))[0]["Plan"]
    assert [k for k in _plan_keys(plan) if "store_id" in k] == []
    one_by_one = {s: inventory.store_totals(conn, PERIOD, s) for s in (1, 2, 3, 4)}
    assert inventory.totals_of_stores(conn, PERIOD, [1, 2, 3, 4]) == one_by_one


def test_costing__a_closed_period_is_refused_at_submit(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, small_erp: None
) -> None:
    conn.execute(
        "UPDATE erp_periods SET status = 'closed', closed_at = now(), closed_by = 'test' "
        "WHERE period = %s",
        (PERIOD,),
    )
    with pytest.raises(Refused, match="period 2026-11 is closed; costing would change closed"):
        submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}


def test_costing__a_period_closed_after_submit_fails_without_touching_the_ledger(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, small_erp: None
) -> None:
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
    conn.execute(
        "UPDATE erp_periods SET status = 'closed', closed_at = now(), closed_by = 'test' "
        "WHERE period = %s",
        (PERIOD,),
    )
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "failed"
    error = conn.execute(
        "SELECT error FROM engine_step_runs WHERE job_id = %s AND status = 'dead'", (job.job_id,)
    ).fetchone()
    assert error is not None and "closed" in error["error"]["message"]
    assert conn.execute("SELECT count(*) AS n FROM erp_journal_lines").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM erp_item_costs").fetchone() == {"n": 0}


def test_costing__period_without_a_starting_point_is_refused_naming_what_it_needs(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, small_erp: None
) -> None:
    conn.execute("INSERT INTO erp_periods (period) VALUES ('2026-12'), ('2027-01')")
    with pytest.raises(Refused) as refused:
        submit("costing", {"period": "2027-01"}, settings=fast, registry=registry)
    assert str(refused.value) == (
        "cannot cost 2027-01: 4 store(s) have no starting point for it; stores ST001, "
        "ST002, ST003, ST004 need 2026-11 costed first (engine submit costing --period 2026-11)"
    )
    assert conn.execute("SELECT count(*) AS n FROM engine_jobs").fetchone() == {"n": 0}


def test_costing__value_is_conserved_and_transfers_net_to_zero(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry, small_erp: None
) -> None:
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"
    row = conn.execute(
        "SELECT sum(transfer_in_value) AS tin, sum(transfer_out_value) AS tout, "
        "sum(opening_value + receipt_value + transfer_in_value - cogs_value "
        "- transfer_out_value - closing_value) AS leak FROM erp_item_costs"
    ).fetchone()
    assert row is not None
    assert row["tin"] == row["tout"]
    assert row["leak"] == Decimal(0)


@pytest.mark.usefixtures("small_erp")
def test_costing__a_loop_between_two_stores_is_solved_exactly_worked_by_hand(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    """Shirt BR1-1: ST001 sends 3 to ST002, ST002 sends 2 back, in the same month.

    ST001: A = 10 opening + 20 received + 2 in = 32; a1 x 32 = 130.00 + 262.00 + 2 x a2
    ST002: A = 4 opening + 3 in = 7;                  a2 x 7 = 50.00 + 3 x a1
    so 218 a1 = 2844: a1 = 2844/218 = 13.04587... -> 13.0459
       a2 = (50 + 3 a1) / 7 = 19432/1526 = 12.73394... -> 12.7339
    ST001 -> ST002: 3 x 13.0459 = 39.1377 -> 39.14 on both sides
    ST002 -> ST001: 2 x 12.7339 = 25.4678 -> 25.47 on both sides
    ST001 COGS: (25 sold - 2 returned) x 13.0459 = 300.0557 -> 300.06;
          closing 10 + 20 + 2 - 23 - 3 = 6 units, 130 + 262 + 25.47 - 300.06 - 39.14 = 78.27
    ST002 COGS: 9 x 12.7339 = 114.6051 -> 114.61;
          closing 4 + 3 - 9 - 2 = -4 units (oversold), 50 + 39.14 - 114.61 - 25.47 = -50.94
    """
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id) == "done"
    rows = {
        r["store_id"]: r
        for r in conn.execute(
            "SELECT * FROM erp_item_costs WHERE period = %s AND item_id = 1", (PERIOD,)
        )
    }
    got = {
        s: (
            r["average_cost"], r["average_from"], r["loop_group"], r["transfer_in_value"],
            r["transfer_out_value"], r["cogs_value"], r["closing_qty"], r["closing_value"],
        )
        for s, r in rows.items()
    }  # fmt: skip
    d = Decimal
    assert got == {
        1: (d("13.0459"), "solved", "ST001+ST002", d("25.47"), d("39.14"), d("300.06"),
            d("6.000"), d("78.27")),
        2: (d("12.7339"), "solved", "ST001+ST002", d("39.14"), d("25.47"), d("114.61"),
            d("-4.000"), d("-50.94")),
    }  # fmt: skip
    result = summary(conn, job.job_id)
    assert (result["moving_items"], result["loops"], result["fallback_groups"]) == (2, 1, [])
    assert "solved exactly" in result["method"]


@pytest.mark.usefixtures("small_erp")
def test_costing__status_and_report_label_each_store_run_by_its_code(
    settings: Settings, fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    # a fan-out is shown by store code (ST001, ...), not by position (0, 1, ...)
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    codes = ["ST001", "ST002", "ST003", "ST004"]

    report = build_run_report(sqlalchemy_engine(fast), job, registry)
    fanned = [s for s in report.steps if s.step == "cost_store"]
    assert sorted(s.label for s in fanned) == [f"cost_store[{c}]" for c in codes]
    assert sorted(s.fanout_key for s in fanned) == ["0", "1", "2", "3"], "stored key unchanged"
    assert {a.label for a in report.attempts} >= {f"cost_store[{c}]" for c in codes}

    assert settings.database_url is not None
    env = {
        **os.environ,
        "ENGINE_DATABASE_URL": settings.database_url.get_secret_value(),
        "ENGINE_FLOW_MODULES": "flows.costing",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(SUPPORT)]),
        "COLUMNS": "250",
    }
    shown = run_engine(["status", str(job), "--json"], env=env)
    assert shown.returncode == 0, shown.stderr
    steps = json.loads(shown.stdout)["steps"]
    assert sorted(s["label"] for s in steps if s["step"] == "cost_store") == codes
    text = run_engine(["status", str(job)], env=env)
    assert text.returncode == 0, text.stderr
    assert all(code in text.stdout for code in codes), text.stdout


def _store(code: str) -> Any:
    """The ERP's ``--store`` as the engine's match (flows.tools.search)."""
    return next(f for f in search_fields if f.name == "store").match(code)


@pytest.mark.usefixtures("small_erp")
def test_costing__each_store_costed_tags_its_job_for_the_runs_search(
    fast: Settings, conn: psycopg.Connection[Any], registry: Registry
) -> None:
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    tags = conn.execute(
        "SELECT value FROM engine_job_tags WHERE job_id = %s AND name = 'store' ORDER BY value",
        (job,),
    ).fetchall()
    assert [t["value"] for t in tags] == ["ST001", "ST002", "ST003", "ST004"]
    for code in ("ST001", "ST004"):  # a costing of every store, found by any one
        assert [r.job_id for r in search_runs(conn, RunQuery(matches=(_store(code),))).rows] == [
            job
        ]
    assert search_runs(conn, RunQuery(matches=(_store("ST005"),))).rows == []
