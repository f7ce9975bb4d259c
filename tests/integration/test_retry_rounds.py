"""`engine retry` of a failed job starts a retry round: "attempt 1 of 5 (retry 2)", never a
growing cap ("attempt 2 of 6", "3 of 7")."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import engine_cli, fast_settings, thread_worker, wait_job_ended

from engine import Registry, submit
from engine.config import Settings
from engine.flow.retry import attempt_label
from engine.jobs import admin
from engine.reports import render_job_report

MODULES = ["approvalflows"]


@pytest.fixture
def registry() -> Registry:
    return Registry.load(MODULES)


@pytest.fixture
def fast(settings: Settings, tmp_path: Path) -> Settings:
    return fast_settings(settings, flow_modules=MODULES, reports_dir=tmp_path / "reports")


def work_run(conn: psycopg.Connection[Any], job: uuid.UUID) -> dict[str, Any]:
    row = conn.execute(
        "SELECT status, attempts, max_attempts, attempt_base, retries FROM engine_step_runs "
        "WHERE job_id = %s AND step = 'work'",
        (job,),
    ).fetchone()
    assert row is not None
    return dict(row)


def error_of(conn: psycopg.Connection[Any], job: uuid.UUID) -> str:
    row = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert row is not None
    return str(row["error"])


def dead_letter_reasons(conn: psycopg.Connection[Any], job: uuid.UUID) -> list[str]:
    rows = conn.execute(
        "SELECT reason FROM engine_dead_letters WHERE job_id = %s ORDER BY id", (job,)
    ).fetchall()
    return [r["reason"] for r in rows]


def test_attempt_label__reads_the_round_not_the_total() -> None:
    assert attempt_label(3, 5) == "attempt 3 of 5"
    assert attempt_label(6, 10, 5, 1) == "attempt 1 of 5 (retry 1)"
    assert attempt_label(11, 15, 10, 2) == "attempt 1 of 5 (retry 2)"


def test_retry__each_round_counts_its_attempts_from_one_of_the_steps_own_budget(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    flag = tmp_path / "broken"
    flag.write_text("the data is broken")
    job = submit("flaky", {"fail_flag": str(flag)}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "failed"
        assert "(attempt 2 of 2)" in error_of(conn, job)
        assert work_run(conn, job) == {
            "status": "dead",
            "attempts": 2,
            "max_attempts": 2,
            "attempt_base": 0,
            "retries": 0,
        }

        admin.retry_job(fast, job)
        assert wait_job_ended(conn, job) == "failed"
        # the second round's last attempt: 2 of 2 again, not "4 of 4" nor "2 of 6"
        assert "(attempt 2 of 2 (retry 1))" in error_of(conn, job)
        assert work_run(conn, job) == {
            "status": "dead",
            "attempts": 4,
            "max_attempts": 4,
            "attempt_base": 2,
            "retries": 1,
        }
        status = engine_cli(fast, "status", str(job))
        assert status.returncode == 0, status.stderr
        assert "2/2 (retry 1)" in status.stdout
        assert "4/4" not in status.stdout

        flag.unlink()  # the fault fixed: the third round succeeds at its first attempt
        admin.retry_job(fast, job)
        assert wait_job_ended(conn, job) == "done"
    assert work_run(conn, job) == {
        "status": "done",
        "attempts": 5,
        "max_attempts": 6,
        "attempt_base": 4,
        "retries": 2,
    }
    first, second = dead_letter_reasons(conn, job)
    assert first.endswith("(attempt 2 of 2)")
    assert second.endswith("(attempt 2 of 2 (retry 1))")
    status = engine_cli(fast, "status", str(job))
    assert "1/2 (retry 2)" in status.stdout
    page = Path(render_job_report(fast, job, out_dir=tmp_path / "r", registry=registry))
    assert "1/2 (retry 2)" in page.read_text()


def test_retry__a_cancelled_step_run_starts_its_round_at_its_own_budget(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Cancelled before any attempt: the round's cap is the step's budget, not the setting's."""
    flag = tmp_path / "broken"
    job = submit("flaky", {"fail_flag": str(flag)}, settings=fast, registry=registry).job_id
    admin.cancel(fast, job, "not now")
    admin.retry_job(fast, job)
    assert work_run(conn, job) == {
        "status": "pending",
        "attempts": 0,
        "max_attempts": 2,
        "attempt_base": 0,
        "retries": 1,
    }
