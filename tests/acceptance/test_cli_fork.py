"""The tests' ``engine`` commands forked from a warm process answer as a fresh start does.

``tests/support/cli_zygote.py`` forks each command from a server that imported
the engine once; these tests hold it to a real ``python -m engine``: the same
exit code, standard output and error for a command that succeeds, one that
refuses its input, one that reads standard input, one that loads a user's
module from ``PYTHONPATH``; and a command past its timeout is killed with
``subprocess.run``'s ``TimeoutExpired``.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import cli_zygote
import pytest
from harness import worker_env

from engine.config import Settings


def _both(args: list[str], env: dict[str, str], stdin: str | None = None) -> list[Any]:
    forked = cli_zygote.SERVER.run(args, env=env, stdin=stdin, timeout=120)
    fresh = cli_zygote.run_cold(args, env=env, stdin=stdin, timeout=120)
    return [(r.returncode, r.stdout, r.stderr) for r in (forked, fresh)]


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["--help"], None),
        (["status", "--json"], None),
        (["status", str(uuid.UUID(int=7))], None),  # no such job: exit 2, naming it
        (["submit", "chian"], None),  # a typo: exit 2, the closest flow suggested
        (["users", "add", "maria", "--role", "viewer"], ""),  # no password on stdin
        (["users", "add", "maria", "--role", "viewer"], "a long password 42\n"),
    ],
    ids=["help", "status", "unknown_job", "unknown_flow", "no_password", "password"],
)
def test_cli_fork__answers_as_a_fresh_start(
    settings: Settings, args: list[str], stdin: str | None
) -> None:
    env = {**worker_env(settings), "COLUMNS": "120"}
    forked, fresh = _both(args, env, stdin)
    if args[:2] == ["users", "add"] and stdin:  # the second add finds the first one's user
        assert forked[0] == 0, forked
        assert fresh[0] == 2 and "exists" in fresh[2], fresh
        return
    assert forked == fresh


def test_cli_fork__takes_the_commands_environment_and_pythonpath(
    settings: Settings, tmp_path: Path
) -> None:
    (tmp_path / "mine.py").write_text(
        "from pydantic import BaseModel\n\n"
        "from engine import Flow\n\n\n"
        "class Nothing(BaseModel):\n"
        "    pass\n\n\n"
        "class One(BaseModel):\n"
        "    n: int\n\n\n"
        "flow = Flow('mine', params=Nothing, description='a user flow')\n\n\n"
        "@flow.step()\n"
        "def only(params: Nothing) -> One:\n"
        "    return One(n=1)\n"
    )
    env = {
        **worker_env(settings),
        "ENGINE_FLOW_MODULES": "mine",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    forked, fresh = _both(["flows", "show", "mine"], env)
    assert forked == fresh
    assert forked[0] == 0 and "mine" in forked[1], forked


def test_cli_fork__a_command_past_its_timeout_is_killed(settings: Settings) -> None:
    env = worker_env(settings)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        # no worker runs: --wait waits for ever
        cli_zygote.SERVER.run(["submit", "chain", "--n", "1", "--wait"], env=env, stdin=None,
                              timeout=3)  # fmt: skip
    assert time.monotonic() - started < 60
