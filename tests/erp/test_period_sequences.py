"""Random sequences of submits never put the books out of order (hypothesis).

Each example seeds a small ERP (November open with its openings, October
closed) and draws a sequence of operations: costing (all stores or one, for
November, December or January), posting, the month-end close job, a reopen
and a migration of one opening balance, for random stores and periods. Each
runs as a user would run it: a submit (refused or run to its end by a
worker) or the books command. After every operation, ``books check`` holds
for every period, and what the books wrote stays written: an item cost never
changes once there, and a closed period's journals do not change while it is
closed.

``ERP_SEQUENCE_EXAMPLES`` sets the number of sequences (default 8).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import fast_settings, thread_worker, wait_job_ended
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from engine import BadInput, Refused, Registry, submit
from engine.config import Settings
from flows.erp import checks, periods
from flows.tools.seed import seed

PERIODS = ("2026-11", "2026-12", "2027-01")
STORES = ("ST001", "ST002", "ST003", "ST009")  # ST009 is a new store with no books
FLOWS = ["flows.costing", "flows.posting", "flows.close", "flows.migration"]
EXAMPLES = int(os.environ.get("ERP_SEQUENCE_EXAMPLES", "8"))


@dataclass(frozen=True)
class Op:
    kind: str
    period: str
    store: str | None = None

    def __repr__(self) -> str:
        return f"{self.kind}({self.period}{', ' + self.store if self.store else ''})"


# Weighted by repetition, so that sequences reach the interesting states (a
# period costed, closed, reopened, the next one costed) often, not by luck.
period = st.sampled_from(["2026-11"] * 6 + ["2026-12"] * 3 + ["2027-01"])
scope = st.sampled_from([None] * 5 + list(STORES[:3]))
ops = st.one_of(
    st.builds(Op, st.just("cost"), period, scope),
    st.builds(Op, st.just("cost"), period, st.none()),
    st.builds(Op, st.just("post"), period),
    st.builds(Op, st.just("close"), period),
    st.builds(Op, st.just("close"), period),
    st.builds(Op, st.just("reopen"), period),
    st.builds(Op, st.just("migrate"), period, st.sampled_from(STORES)),
)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ENGINE_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "10")
    return fast_settings(
        settings, flow_modules=FLOWS, concurrency=3, reports_dir=tmp_path / "reports"
    )


def fresh_books(conn: psycopg.Connection[Any], new_store: bool) -> str:
    seed(
        conn,
        stores=3,
        brands=1,
        employees=3,
        items=5,
        period="2026-11",
        seed=2,
        replace=True,
    )
    if new_store:  # a store opened with no books: nothing costs for all stores until it has some
        conn.execute("INSERT INTO erp_stores VALUES (9, 'ST009', 1, 'New store', 'small')")
    row = conn.execute("SELECT sku FROM erp_items ORDER BY id LIMIT 1").fetchone()
    assert row is not None
    return str(row["sku"])


def apply(
    op: Op, conn: psycopg.Connection[Any], fast: Settings, registry: Registry, csv: Path, sku: str
) -> str:
    """Run ``op`` as a user would; what happened, for the failure report."""
    if op.kind == "reopen":
        try:
            with conn.transaction():
                periods.reopen(conn, op.period, actor="hypothesis", reason="a drawn reopen")
        except BadInput as exc:  # Refused, or no such period
            return f"refused: {exc}"
        return "reopened"
    if op.kind == "migrate":
        csv.write_text(f"store_code,sku,period,qty,value\n{op.store},{sku},{op.period},3,30\n")
        flow, params = "migration", {"source": str(csv), "kind": "opening-balances"}
    else:
        flow = {"cost": "costing", "post": "posting", "close": "close"}[op.kind]
        params = {"period": op.period} | ({"store": op.store} if op.store else {})
    try:
        job = submit(flow, params, settings=fast, registry=registry)
    except Refused as exc:
        return f"refused: {exc}"
    status = wait_job_ended(conn, job.job_id, timeout=120)
    assert status == "done", f"{op!r} was admitted and then ended {status}"
    return "done"


def written(conn: psycopg.Connection[Any]) -> tuple[dict[Any, Any], dict[str, Any]]:
    costs = {
        (r["period"], r["store_id"], r["item_id"]): r
        for r in conn.execute("SELECT * FROM erp_item_costs")
    }
    closed = {
        r["period"]: r["h"]
        for r in conn.execute(
            "SELECT p.period, md5(coalesce(string_agg(j.source_key || l.line_no || l.debit || "
            "l.credit, ',' ORDER BY j.id, l.line_no), '')) AS h "
            "FROM erp_periods p LEFT JOIN erp_journals j ON j.period = p.period "
            "LEFT JOIN erp_journal_lines l ON l.journal_id = j.id "
            "WHERE p.status = 'closed' GROUP BY p.period"
        )
    }
    return costs, closed


@hsettings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    new_store=st.sampled_from([False, False, True]), sequence=st.lists(ops, min_size=1, max_size=10)
)
def test_sequences__books_check_after_every_submit(
    fast: Settings,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    new_store: bool,
    sequence: list[Op],
) -> None:
    registry = Registry.load(FLOWS)
    sku = fresh_books(conn, new_store)
    costs, closed = written(conn)
    log: list[str] = []
    with thread_worker(fast, registry):
        for op in sequence:
            log.append(f"{op!r}: {apply(op, conn, fast, registry, tmp_path / 'openings.csv', sku)}")
            for period in [r["period"] for r in conn.execute("SELECT period FROM erp_periods")]:
                report = checks.check_period(conn, period)
                assert report.ok, f"{period} after {log}: {report.problems}"
            now_costs, now_closed = written(conn)
            assert {k: v for k, v in now_costs.items() if k in costs} == costs, log
            for period, digest in closed.items():
                if period in now_closed:
                    assert now_closed[period] == digest, f"closed {period} changed: {log}"
            costs, closed = now_costs, now_closed
