"""Real `engine worker` processes run under the worker's role, and can do their whole job.

The ERP's month end (costing, posting) and a data migration run end to end
through a worker process whose every connection took ``engine_worker``
(migrations 0006 and 1002), reports included; admin commands do not take it.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from erp_checks import assert_books_balance, assert_costs_equal_reference
from harness import (
    fast_settings,
    flows_registry,
    start_worker_process,
    wait_job_ended,
    worker_env,
)

from engine import Registry, submit
from engine.config import Settings
from engine.worker.processes import WorkerProcess, start_worker
from flows.erp.books import trial_balance
from flows.tools.seed import seed

pytestmark = pytest.mark.acceptance

PERIOD = "2026-11"
ERP_FLOWS = ["flows.costing", "flows.posting", "flows.migration"]


def _stop(proc: WorkerProcess) -> str:
    """Stop the worker (SIGTERM, the graceful path; SIGKILL if it does not end); its output."""
    proc.stop(grace_s=30)
    assert proc.stdout is not None
    return proc.stdout.read()


def _step_errors(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> str:
    rows = conn.execute(
        "SELECT error::text AS e FROM engine_step_runs WHERE job_id = %s AND error IS NOT NULL",
        (job_id,),
    ).fetchall()
    return "\n".join(r["e"] for r in rows)


def test_worker_process__runs_under_the_worker_role_unless_it_is_set_empty(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    # take away one grant a step needs: only a worker under the role notices
    conn.execute("REVOKE INSERT ON test_effects FROM engine_worker")
    fast = fast_settings(settings, max_attempts=1)
    refused = submit("chain", {"n": 1}, settings=fast, registry=flows_registry())
    worker = start_worker_process(settings, max_attempts=1)
    try:
        assert wait_job_ended(conn, refused.job_id, timeout=60) == "failed"
    finally:
        output = _stop(worker)
    assert "role engine_worker" in output
    assert "permission denied for table test_effects" in _step_errors(conn, refused.job_id)

    allowed = submit("chain", {"n": 2}, settings=fast, registry=flows_registry())
    login = start_worker_process(settings, worker_role="")
    try:
        assert wait_job_ended(conn, allowed.job_id, timeout=60) == "done"
    finally:
        output = _stop(login)
    assert "the login's role" in output


def test_worker_process__a_role_the_server_lacks_stops_it_with_a_message_naming_it(
    settings: Settings,
) -> None:
    worker = start_worker(env=worker_env(settings, worker_role="engine_no_such_role"))
    try:
        returncode: int | None = worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        returncode = None
    finally:
        worker.stop(grace_s=30)
    assert worker.stdout is not None
    output = worker.stdout.read()  # stdout and stderr, in one pipe
    assert "refused role 'engine_no_such_role'" in output
    assert "engine migrate" in output and "ENGINE_WORKER_ROLE" in output
    # a ConfigError is not an outage: the worker exits (3) rather than wait
    assert returncode == 3


def test_cli__admin_commands_keep_the_login_role(settings: Settings) -> None:
    # a worker role the server lacks would refuse every connection that took it
    env = worker_env(settings, worker_role="engine_no_such_role")
    for args in (["migrate"], ["status", "--json"], ["dlq", "list", "--json"]):
        result = run_engine(args, env=env)
        assert result.returncode == 0, (args, result.stderr[-2000:])


ITEMS = """sku,brand_code,name,standard_cost,price
BRN-9001,{brand},Migrated shirt,12.5,29.90
BRN-9002,{brand},Migrated socks,1.25,3.99
BRN-9003,NOPE,Ghost brand item,1,2
"""


def test_worker_process__month_end_and_a_migration_under_the_worker_role(
    settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed(conn, stores=4, brands=2, employees=8, items=30, period=PERIOD, seed=5)
    reports = tmp_path / "reports"
    overrides: dict[str, Any] = {
        "flow_modules": ERP_FLOWS,
        "concurrency": 3,
        "report_on_end": True,
        "reports_dir": reports,
    }
    registry = Registry.load(ERP_FLOWS)
    fast = fast_settings(settings, **overrides)
    brand = conn.execute("SELECT code FROM erp_brands ORDER BY id LIMIT 1").fetchone()
    assert brand is not None
    source = tmp_path / "items.csv"
    source.write_text(ITEMS.format(brand=brand["code"]), encoding="utf-8")

    worker = start_worker_process(settings, **overrides)
    try:
        # posting writes the stock moves that costing values: post first
        posted = submit("posting", {"period": PERIOD}, settings=fast, registry=registry)
        assert wait_job_ended(conn, posted.job_id, timeout=120) == "done", _stop(worker)[-4000:]
        jobs = {
            "posting": posted,
            "costing": submit("costing", {"period": PERIOD}, settings=fast, registry=registry),
            "migration": submit(
                "migration",
                {"source": str(source), "kind": "items"},
                settings=fast,
                registry=registry,
            ),
        }
        ended = {name: wait_job_ended(conn, j.job_id, timeout=120) for name, j in jobs.items()}
    finally:
        output = _stop(worker)
    assert ended == dict.fromkeys(jobs, "done"), output[-4000:]
    assert "role engine_worker" in output

    assert assert_costs_equal_reference(conn, PERIOD) > 0
    assert_books_balance(conn)
    tb = trial_balance(conn, PERIOD)
    assert tb.debit == tb.credit
    unposted = conn.execute(
        "SELECT count(*) AS n FROM erp_documents WHERE period = %s AND status = 'unposted'",
        (PERIOD,),
    ).fetchone()
    assert unposted == {"n": 0}
    migrated = conn.execute("SELECT sku FROM erp_items WHERE sku LIKE 'BRN-9%%' ORDER BY sku")
    assert [r["sku"] for r in migrated.fetchall()] == ["BRN-9001", "BRN-9002"]
    assert list(reports.glob("migration-*-rejects.csv")), "the rejects file is written"
    # the worker rendered every job's report, reading under its role
    for job in jobs.values():
        assert (reports / "runs" / f"{job.job_id}.html").is_file()
