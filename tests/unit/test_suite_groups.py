"""The suite's one PgBouncer and one Chromium rest on xdist's ``loadgroup``: a check that
it still groups here (pytest 9.2 with xdist 3.8 silently stopped: pytest-xdist#1386).

A throwaway suite in a temporary folder, grouped by the project's own hook
(``tests/support/groups.py``), run with ``-n 2 --dist loadgroup``: every test that
uses the shared ``pgbouncer`` fixture records the xdist worker it ran on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "support"

CONFTEST = f"""
import sys
sys.path.insert(0, {str(SUPPORT)!r})
import pytest
from groups import group_by_shared_server


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    group_by_shared_server(items)


@pytest.fixture(scope="session")
def pgbouncer():
    return "one per run"
"""

TESTS = """
import os
import pytest


@pytest.mark.parametrize("n", range(8))
def test_shared(pgbouncer, n):
    with open(os.environ["GROUPS_OUT"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")


@pytest.mark.parametrize("n", range(8))
def test_alone(n):
    pass
"""


def test_suite__tests_of_a_shared_server_run_on_one_xdist_worker(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_grouped.py").write_text(TESTS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--basetemp",
            str(tmp_path / "t"),
            "--rootdir",
            str(tmp_path),
            "-c",
            str(tmp_path / "pytest.ini"),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env={**os.environ, "GROUPS_OUT": str(tmp_path / "workers")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = (tmp_path / "workers").read_text().split()
    assert len(workers) == 8
    assert len(set(workers)) == 1, f"the shared server's tests ran on {sorted(set(workers))}"
