"""Every command that takes a job id takes a unique prefix of it, as ``engine runs`` shows them."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from harness import engine_cli as engine

from engine.config import Settings

pytestmark = pytest.mark.acceptance


def _submit(settings: Settings, period: str) -> str:
    result = engine(settings, "submit", "example", "--period", period, "--json")
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["job_id"])


def test_cli__job_commands_take_a_unique_id_prefix(settings: Settings) -> None:
    job = _submit(settings, "2026-11")
    cut = job[:16]  # `engine runs` shows "acb145ad-837f-48…"

    shown = engine(settings, "status", job[:8], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["job"]["id"] == job

    cancelled = engine(settings, "cancel", cut + "…")
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"job {job} cancelled" in cancelled.stdout

    retried = engine(settings, "retry", cut.replace("-", ""))
    assert retried.returncode == 0, retried.stderr
    assert f"job {job} resumed" in retried.stdout

    # the prefix resolved: what is refused now is the signal's name, not the id
    signalled = engine(settings, "signal", job[:8].upper(), "nope")
    assert signalled.returncode == 2
    assert "expected a UUID" not in signalled.stderr
    assert "'nope'" in signalled.stderr

    reported = engine(settings, "report", job[:6])
    assert reported.returncode == 0, reported.stderr


def test_cli__an_ambiguous_prefix_exits_2_naming_the_candidates(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    for n, flow in enumerate(["costing", "posting"]):
        conn.execute(
            "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint) "
            "VALUES (%s, %s, 1, '{}', %s)",
            (f"beef000{n}-0000-4000-8000-000000000000", flow, str(n) * 64),
        )
    for command in (["status"], ["cancel"], ["retry"], ["report"], ["signal"]):
        args = [*command, "beef", *(["approve"] if command == ["signal"] else [])]
        result = engine(settings, *args)
        assert result.returncode == 2, (command, result.stderr)
        assert "job id prefix 'beef' is ambiguous" in result.stderr
        assert "beef0000-0000-4000-8000-000000000000 (costing, pending, " in result.stderr
        assert "beef0001-0000-4000-8000-000000000000 (posting, pending, " in result.stderr


def test_cli__an_unknown_or_malformed_id_exits_2_naming_it(settings: Settings) -> None:
    unknown = engine(settings, "status", "0123abcd")
    assert unknown.returncode == 2
    assert "no job id starts with '0123abcd'" in unknown.stderr
    short = engine(settings, "cancel", "abc")
    assert short.returncode == 2
    assert "'abc' is too short: give at least 4 hex digits" in short.stderr
    bad = engine(settings, "retry", "not-a-job")
    assert bad.returncode == 2
    assert "invalid job id 'not-a-job'" in bad.stderr


def test_cli__runs_off_a_terminal_prints_whole_ids_that_status_takes(settings: Settings) -> None:
    jobs = {_submit(settings, period) for period in ("2026-10", "2026-11")}
    assert settings.database_url is not None
    env = {
        k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "ENGINE_FLOW_MODULES")
    }
    env["ENGINE_DATABASE_URL"] = settings.database_url.get_secret_value()
    for command in (["runs"], ["status"]):  # `status` without an id lists the runs too
        # stdout is a pipe, and no COLUMNS: rich would cut a table to 80 columns
        piped = run_engine(command, env=env)
        assert piped.returncode == 0, piped.stderr
        assert "…" not in piped.stdout, piped.stdout
        shown = set(re.findall(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", piped.stdout))
        assert shown == jobs, piped.stdout
    for job in jobs:
        status = engine(settings, "status", job, "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["job"]["id"] == job
        # a job's own tables too: its step names and concurrency keys whole
        table = run_engine(["status", job], env=env)
        assert table.returncode == 0, table.stderr
        assert "…" not in table.stdout, table.stdout
        assert "concurrency" in table.stdout and "attempts" in table.stdout
