"""``engine db status|stop`` against a scratch embedded PostgreSQL (pgserver) of its own.

The embedded server is slow to start (initdb): one test starts it, the
others need none. As root, pgserver runs the server as its own OS user,
whom ``pg_ctl`` must be run as: ``engine db stop`` is tested as whoever runs
the suite (root in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.embedded]


def _engine(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "engine", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _status(env: dict[str, str]) -> dict[str, Any]:
    result = _engine(env, "db", "status", "--json")
    assert result.returncode == 0, result.stderr
    status: dict[str, Any] = json.loads(result.stdout)
    return status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture
def embedded_env() -> Iterator[dict[str, str]]:
    """A scratch data folder outside pytest's base temp: as root, pgserver's server user
    traverses its parent folders (pgserver opens them g+rx,o+rx at start), and any other
    pytest session starting meanwhile makes ``/tmp/pytest-of-root`` private again (0700),
    which locked ``pg_ctl stop`` out ("could not access directory ...: Permission denied")."""
    with tempfile.TemporaryDirectory(prefix="engine-test-db-cli-") as scratch:
        env = {k: v for k, v in os.environ.items() if k != "ENGINE_DATABASE_URL"}
        env["ENGINE_PGDATA"] = str(Path(scratch) / "pgdata")
        yield env
        if _status(env)["running"]:  # the test failed half-way: leave no server behind
            _engine(env, "db", "stop")


def test_db__status_and_stop_of_a_scratch_embedded_server(embedded_env: dict[str, str]) -> None:
    env = embedded_env
    before = _status(env)
    assert (before["running"], before["initialised"], before["url"]) == (False, False, None)
    assert before["pgdata"] == env["ENGINE_PGDATA"] and not before["database_url_set"]
    idle = _engine(env, "db", "status")
    assert "embedded PostgreSQL: not running" in idle.stdout

    started = _engine(env, "migrate")  # the first command that needs it starts it
    assert started.returncode == 0, started.stderr

    running = _status(env)
    assert running["running"] and running["initialised"] and running["status"] == "ready"
    assert running["url"].startswith("postgresql://postgres@/engine?host=")
    with psycopg.connect(running["url"]) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("engine",)
    human = _engine(env, "db", "status")
    assert f"running (pid {running['pid']}" in human.stdout
    assert env["ENGINE_PGDATA"] in human.stdout and "engine db stop" in human.stdout

    stopped = _engine(env, "db", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"embedded PostgreSQL stopped (pid {running['pid']}" in stopped.stdout
    wait_until(lambda: not _alive(running["pid"]), what="the server process to end")
    assert not _status(env)["running"]

    again = _engine(env, "db", "stop")
    assert again.returncode == 0, again.stderr
    assert "is not running; nothing to stop" in again.stdout


def test_db__stop_with_a_database_url_and_no_embedded_server_exits_2(tmp_path: Path) -> None:
    env = {**os.environ, "ENGINE_PGDATA": str(tmp_path / "none")}
    env.setdefault("ENGINE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    status = _engine(env, "db", "status")
    assert status.returncode == 0, status.stderr
    assert "ENGINE_DATABASE_URL is set" in status.stdout and "not running" in status.stdout
    refused = _engine(env, "db", "stop")
    assert refused.returncode == 2
    assert "stops only the embedded one" in refused.stderr
