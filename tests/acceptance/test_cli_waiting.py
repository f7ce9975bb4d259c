"""The CLI without friction (issue 28): ``waiting`` as a job state, ``--wait`` off a terminal,
a parent's progress counting its children's step runs."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_zygote import run_engine
from harness import ROOT, SUPPORT, fast_settings, thread_worker, wait_until

from engine import signal, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.reports.context import build_index
from engine.store.read import sqlalchemy_engine

pytestmark = pytest.mark.acceptance

MODULES = ["testflows", "waitflows", "childflows"]


@pytest.fixture
def fast(settings: Settings) -> Settings:
    return fast_settings(settings, flow_modules=MODULES)


@pytest.fixture
def registry() -> Registry:
    return Registry.load(MODULES)


def _env(settings: Settings) -> dict[str, str]:
    assert settings.database_url is not None
    return {
        **os.environ,
        "ENGINE_DATABASE_URL": settings.database_url.get_secret_value(),
        "ENGINE_FLOW_MODULES": ",".join(MODULES),
        "ENGINE_REPORT_ON_END": "false",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(SUPPORT)]),
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "250",  # rich wraps tables to 80 columns off a terminal otherwise
    }


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``engine ARGS`` off a terminal (stdout a pipe), loading the test flows."""
    return run_engine(args, env=_env(settings))


def _waiting_steps(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM engine_step_runs WHERE job_id = %s AND status = 'waiting'",
        (job_id,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


def _kids(conn: psycopg.Connection[Any], job_id: uuid.UUID) -> list[uuid.UUID]:
    rows = conn.execute(
        "SELECT id FROM engine_jobs WHERE parent_job_id = %s ORDER BY child_key", (job_id,)
    ).fetchall()
    return [r["id"] for r in rows]


def test_cli__jobs_whose_steps_all_wait_show_as_waiting_and_for_what(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    approval = submit("approval", {"n": 1}, settings=fast, registry=registry).job_id
    nap = submit("nap", {"n": 2}, settings=fast, registry=registry).job_id
    brood = submit("brood", {"children": 1, "hold": True}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        for job in (approval, nap, brood):
            wait_until(lambda job=job: _waiting_steps(conn, job), what=f"{job} waiting")
        (kid,) = wait_until(lambda: _kids(conn, brood), what="the child")
        wait_until(lambda: _waiting_steps(conn, kid), what="the child waiting")
    pending = submit("chain", {"n": 3}, settings=fast, registry=registry).job_id

    listed = cli(fast, "runs", "--status", "waiting", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs = {j["id"]: j for j in json.loads(listed.stdout)["jobs"]}
    assert set(jobs) == {str(approval), str(nap), str(brood), str(kid)}
    assert jobs[str(approval)]["state"] == "waiting"
    assert jobs[str(approval)]["status"] == "running", "the job row is unchanged"
    assert jobs[str(approval)]["waiting_for"] == ["signal go"]
    assert jobs[str(brood)]["waiting_for"] == ["children"]
    assert jobs[str(kid)]["waiting_for"] == ["signal release"]
    assert [w[:6] for w in jobs[str(nap)]["waiting_for"]] == ["until "]

    running = json.loads(cli(fast, "runs", "--status", "running", "--json").stdout)["jobs"]
    assert running == [], "a waiting job is not listed as running"
    either = json.loads(cli(fast, "runs", "--status", "pending", "--json").stdout)["jobs"]
    assert [j["id"] for j in either] == [str(pending)]
    assert either[0]["state"] == "pending" and either[0]["waiting_for"] == []

    status = cli(fast, "status", str(approval), "--json")
    assert status.returncode == 0, status.stderr
    job = json.loads(status.stdout)["job"]
    assert (job["state"], job["waiting_for"]) == ("waiting", ["signal go"])
    text = cli(fast, "status", str(approval))
    assert "status waiting for signal go" in text.stdout, text.stdout
    table = cli(fast, "runs")
    assert "waiting (signal go)" in table.stdout, table.stdout

    index = {r.job_id: r for r in build_index(sqlalchemy_engine(fast)).rows}
    assert index[str(brood)].status == "waiting"
    assert index[str(brood)].waiting_for == ["children"]
    assert index[str(pending)].status == "pending"


class _Reader:
    """A command's stdout read line by line while it runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)


def test_cli__wait_off_a_terminal_prints_each_state_and_counts_the_children(
    fast: Settings, registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    with thread_worker(fast, registry):
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "submit", "brood", "--children=2", "--hold", "--wait"],
            env=_env(fast),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        reader = _Reader(proc)
        try:
            wait_until(lambda: reader.saw("waiting for children"), what="the waiting line")
            job = uuid.UUID(reader.lines[0].split()[3])
            for kid in _kids(conn, job):
                wait_until(lambda kid=kid: _waiting_steps(conn, kid), what="the child waiting")
                signal(kid, "release", settings=fast)
            assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.thread.join(timeout=10)
    short = str(job)[:8]
    states = [line.split(":")[0] for line in reader.lines[1:]]
    assert states[-1] == f"job {short} done", reader.lines
    assert f"job {short} waiting for children" in states, reader.lines
    assert all(a != b for a, b in itertools.pairwise(states)), "a line per change"
    # spawn, sibling and tally, and each child's one step: the children's work counts
    assert reader.lines[-1] == f"job {short} done: 5/5 steps done", reader.lines

    view = json.loads(cli(fast, "status", str(job), "--json").stdout)
    assert view["progress"] == {"done": 5, "total": 5}


def test_cli__wait_off_a_terminal_ends_with_the_failure_and_its_reason_exit_1(
    fast: Settings, registry: Registry, tmp_path: Path
) -> None:
    flag = tmp_path / "broken"
    flag.write_text("the data a retry finds fixed")
    with thread_worker(fast, registry):
        result = cli(
            fast, "submit", "strict", "--children", "2", "--flaky-child", "1",
            "--fail-flag", str(flag), "--wait",
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert " failed: " in last, result.stdout
    assert f"child 1 fails while {flag} exists" in last, result.stdout
