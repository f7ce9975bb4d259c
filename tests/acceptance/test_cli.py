"""The ``engine`` command as a user runs it: a subprocess, real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine

from engine.config import Settings

pytestmark = pytest.mark.acceptance


def test_cli__submit_with_a_bad_period_exits_2_naming_it(settings: Settings) -> None:
    for bad in ("2026-13", "26-11"):
        result = engine(settings, "submit", "example", "--period", bad)
        assert result.returncode == 2, result.stderr
        assert f"'{bad}'" in result.stderr
        assert "YYYY-MM" in result.stderr


def test_cli__submit_of_an_unknown_flow_exits_2_listing_known_ones(settings: Settings) -> None:
    result = engine(settings, "submit", "costnig", "--period", "2026-11")
    assert result.returncode == 2
    assert "unknown flow 'costnig'" in result.stderr
    assert "known flows: close, costing, example, migration, posting" in result.stderr


def test_cli__submit_json_then_resubmit_returns_the_same_job(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    first = engine(settings, "submit", "example", "--period", "2026-11", "--json")
    assert first.returncode == 0, first.stderr
    created = json.loads(first.stdout)
    assert created["created"] is True
    assert created["flow"] == "example"
    assert created["status"] == "pending"
    again = json.loads(
        engine(settings, "submit", "example", "--period", "2026-11", "--json").stdout
    )
    assert again["job_id"] == created["job_id"]
    assert again["created"] is False
    row = conn.execute("SELECT submitted_by FROM engine_jobs").fetchone()
    assert row is not None and "@" in row["submitted_by"]


def test_cli__status_json_shows_the_job_and_its_steps(settings: Settings) -> None:
    job = json.loads(engine(settings, "submit", "example", "--period", "2026-10", "--json").stdout)
    result = engine(settings, "status", job["job_id"], "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["job"]["id"] == job["job_id"]
    assert [s["step"] for s in view["steps"]] == ["plan"]
    assert engine(settings, "status", "not-a-uuid").returncode == 2


def test_cli__migrate_is_idempotent(settings: Settings) -> None:
    result = engine(settings, "migrate")
    assert result.returncode == 0, result.stderr
    assert "0 applied" in result.stdout


def test_cli__flows_list_and_show(settings: Settings) -> None:
    listed = json.loads(engine(settings, "flows", "list", "--json").stdout)
    assert [f["name"] for f in listed["flows"]] == [
        "close",
        "costing",
        "example",
        "migration",
        "posting",
    ]
    shown = engine(settings, "flows", "show", "example")
    assert shown.returncode == 0
    for word in ("plan", "work", "total", "--period", "plan -> work"):
        assert word in shown.stdout
    assert engine(settings, "flows", "show", "nope").returncode == 2


def test_cli__unreachable_database_is_reported_without_the_password() -> None:
    env = {
        **os.environ,
        "ENGINE_DATABASE_URL": "postgresql://erp:s3cret-pw@127.0.0.1:1/erp",
    }
    result = subprocess.run(
        [sys.executable, "-m", "engine", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3
    assert "cannot connect" in result.stderr
    assert "s3cret-pw" not in result.stderr + result.stdout
    assert "erp:***@127.0.0.1" in result.stderr
