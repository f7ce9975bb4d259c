"""The Makefile provisions what each target's tests need, read through ``make -n``.

``make -n`` prints a target's commands without running them (a line that
calls ``$(MAKE)`` runs, itself under ``-n``): enough to check that a target
installs what it needs before it uses it, on a fresh machine too.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(target: str) -> list[str]:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def _index(lines: list[str], needle: str) -> int:
    found = [i for i, line in enumerate(lines) if needle in line]
    assert found, f"no line with {needle!r} in:\n" + "\n".join(lines)
    return found[0]


@pytest.mark.parametrize(("target", "runs"), [("chaos", "-m tests.chaos"), ("test", "-m pytest")])
def test_makefile__a_target_with_a_pooler_scenario_installs_pgbouncer_before_it_runs(
    target: str, runs: str
) -> None:
    lines = _dry_run(target)
    provision = _index(lines, "make --no-print-directory pgbouncer")
    assert "command -v pgbouncer" in lines[provision]  # only when missing
    assert provision < _index(lines, runs)


def test_makefile__the_pgbouncer_target_installs_the_debian_package() -> None:
    text = "\n".join(_dry_run("pgbouncer"))
    assert "apt-get install -y -qq pgbouncer" in text
    assert "sudo apt-get update && sudo apt-get install -y pgbouncer" in text  # not root
