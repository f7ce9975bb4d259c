"""The month-end close as one job, through workers: and with workers killed (-9) in the middle."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import (
    fast_settings,
    run_of,
    start_worker_process,
    thread_worker,
    wait_job_ended,
    wait_until,
)

from engine import Refused, Registry, render_job_report, submit
from engine.config import Settings
from flows.erp import checks, periods
from flows.erp.seed import seed

PERIOD = "2026-11"
# a killed worker's lease and message come back within seconds, not the FAST minute
QUICK_RECOVERY = {"lease_s": 2.0, "heartbeat_s": 0.5, "visibility_s": 3.0}
FLOWS = ["flows.close", "flows.costing", "flows.posting"]


@pytest.fixture
def registry() -> Registry:
    return Registry.load(FLOWS)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("ERP_POSTING_CHUNK_SIZE", "15")
    return fast_settings(
        settings, flow_modules=FLOWS, concurrency=2, reports_dir=tmp_path / "reports"
    )


@pytest.fixture
def made(conn: psycopg.Connection[Any]) -> Any:
    return seed(
        conn, stores=5, brands=2, employees=10, items=8, period=PERIOD, documents=90, seed=4
    )


def summary(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    return dict(run_of(conn, job_id, "month_end")["output"])


def assert_closed_exactly_once(conn: psycopg.Connection[Any], made: Any, s: dict[str, Any]) -> None:
    """Every document posted or rejected once, every store costed once, the period closed."""
    in_period = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'posted') AS posted, "
        "count(*) FILTER (WHERE status = 'rejected') AS rejected, "
        "count(*) FILTER (WHERE status = 'unposted') AS unposted "
        "FROM erp_documents WHERE period = %s",
        (PERIOD,),
    ).fetchone()
    assert in_period == {
        "posted": s["documents_posted"],
        "rejected": s["documents_rejected"],
        "unposted": 0,
    }
    assert s["documents_rejected"] == made.bad_documents.get(
        "unbalanced", 0
    ) + made.bad_documents.get("unknown_account", 0)
    journals = conn.execute(
        "SELECT count(*) FILTER (WHERE source = 'document') AS documents, "
        "count(*) FILTER (WHERE source = 'costing') AS costing FROM erp_journals"
    ).fetchone()
    assert journals is not None and journals["documents"] == s["documents_posted"]
    assert journals["costing"] == sum(1 for c in s["per_store"] if c["journal_id"] is not None)
    assert s["stores"] == 5 and len({c["store"]["code"] for c in s["per_store"]}) == 5
    report = checks.check_period(conn, PERIOD)
    assert report.ok, report.problems
    assert report.status == "closed"
    # the job checked before closing; afterwards the closed period's own check holds too
    checked = {c["name"] for c in s["checks"]["checks"] if not c["skipped"]}
    assert checked | {"closed books unchanged"} == {c.name for c in report.checks if not c.skipped}
    tb = s["trial_balance"]
    assert tb["debit"] == tb["credit"] != "0.00"


def test_close__the_month_end_as_one_job_posts_costs_checks_and_closes(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    job = submit("close", {"period": PERIOD}, settings=fast, registry=registry, submitted_by="ann")
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
    s = summary(conn, job.job_id)
    assert_closed_exactly_once(conn, made, s)
    assert s["closed_by"] == f"close job {job.job_id} for ann"
    history = periods.history(conn, PERIOD)
    assert [(e.action, e.actor) for e in history] == [
        ("costed", f"close job {job.job_id}"),
        ("closed", f"close job {job.job_id} for ann"),
    ]
    page = Path(render_job_report(fast, job.job_id, registry=registry)).read_text(encoding="utf-8")
    for text in (
        "closed by close job",
        "Trial balance",
        "Books check",
        "COGS per brand",
        "Period history",
    ):
        assert text in page, text
    with pytest.raises(Refused, match="period 2026-11 is closed"):
        submit("close", {"period": PERIOD}, settings=fast, registry=registry)


def test_close__fails_naming_the_broken_identity_and_leaves_the_period_open(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    # a carried-forward balance tampered with: next period's openings != closings
    job = submit("costing", {"period": PERIOD}, settings=fast, registry=registry)
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job.job_id, timeout=120) == "done"
        conn.execute(
            "UPDATE erp_opening_balances SET value = value + 1 WHERE (store_id, item_id) = "
            "(SELECT store_id, item_id FROM erp_opening_balances WHERE period = '2026-12' "
            "ORDER BY 1, 2 LIMIT 1) AND period = '2026-12'"
        )
        close = submit("close", {"period": PERIOD}, settings=fast, registry=registry)
        assert wait_job_ended(conn, close.job_id, timeout=120) == "failed"
    error = conn.execute(
        "SELECT error FROM engine_step_runs WHERE job_id = %s AND step = 'check'", (close.job_id,)
    ).fetchone()
    assert error is not None
    assert "openings of 2026-12 = closings: 1 store(s) differ: ST001 (1 items)" in str(error)
    status = conn.execute("SELECT status FROM erp_periods WHERE period = %s", (PERIOD,)).fetchone()
    assert status == {"status": "costed"}


def test_close__workers_killed_minus_9_in_the_middle_resume_and_close_exactly_once(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], made: Any
) -> None:
    """Each worker process SIGKILLs itself at a step's commit with probability 1/2 (before or
    after it), and a new one takes over, until the job ends."""
    job = submit("close", {"period": PERIOD}, settings=fast, registry=registry)
    kills, rounds = 0, 0

    def job_ended() -> bool:
        row = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job.job_id,)).fetchone()
        return row is not None and row["status"] in ("done", "failed", "cancelled")

    while not job_ended():
        rounds += 1
        assert rounds <= 60, f"no progress after {rounds} worker processes"
        fault = "before_commit" if rounds % 2 else "after_commit"
        worker = start_worker_process(
            fast,
            faults=f"{fault}=kill:0.5",
            concurrency=1,
            flow_modules=FLOWS,
            **QUICK_RECOVERY,
        )
        try:
            wait_until(
                lambda w=worker: not w.alive() or job_ended(),  # type: ignore[misc]
                timeout=90,
                what="the worker to die or the job to end",
            )
            died = not worker.alive()
        finally:
            worker.kill()  # a no-op for a worker that died
        if died and worker.returncode != -9:
            output = worker.stdout.read() if worker.stdout is not None else ""
            raise AssertionError(f"worker exited {worker.returncode}: {output[-2000:]}")
        kills += died
    print(f"close job survived {kills} kill(s) in {rounds} worker processes")
    assert kills >= 1, "no worker was killed: the test proved nothing"
    assert wait_job_ended(conn, job.job_id) == "done"
    assert_closed_exactly_once(conn, made, summary(conn, job.job_id))
