"""A newcomer's first flow, as the README gives it (issue 38, item 6).

The README's first flow is a whole file: this test copies it from the README,
runs the README's commands on it (a real worker process), and checks that
``engine status`` shows the job's result. Then what a newcomer meets around it:
their module beside the installed tools, and a typo's closest name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import FAST, ROOT, engine_cli

from engine.config import Settings
from engine.worker.processes import settings_env, start_worker

pytestmark = pytest.mark.acceptance

README = ROOT / "README.md"


def _first_flow() -> str:
    """The README's first flow: the python block after "Your first flow"."""
    text = README.read_text()
    after = text[text.index("**Your first flow**") :]
    found = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert found is not None, "the README's first flow has no python block"
    return found.group(1)


def _user(settings: Settings, folder: Path, modules: str = "hello") -> dict[str, str]:
    """A user's shell after the README's `export PYTHONPATH=$PWD ENGINE_FLOW_MODULES=hello`."""
    assert settings.database_url is not None
    return {
        **settings_env(database_url=settings.database_url, **FAST),
        "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
        "ENGINE_FLOW_MODULES": modules,
    }


def _engine(
    settings: Settings, folder: Path, *args: str, modules: str = "hello"
) -> subprocess.CompletedProcess[str]:
    return engine_cli(settings, *args, env=_user(settings, folder, modules))


def test_readme__the_first_flow_runs_end_to_end(settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text(_first_flow())
    assert _engine(settings, tmp_path, "migrate").returncode == 0
    worker = start_worker(env=_user(settings, tmp_path), output="discard", cwd=tmp_path)
    try:
        submitted = _engine(settings, tmp_path, "submit", "hello", "--name", "Ada", "--wait")
        assert submitted.returncode == 0, submitted.stderr
        job = re.search(r"submitted hello job ([0-9a-f-]{36})", submitted.stdout)
        assert job is not None, submitted.stdout
    finally:
        worker.send_signal(15)
        worker.wait(timeout=60)
    shown = _engine(settings, tmp_path, "status", job.group(1)[:8])
    assert shown.returncode == 0, shown.stderr
    assert 'result (count, the last checkpoint): {"letters": 8, "text": "Hello, Ada!"}' in (
        shown.stdout
    )
    view: dict[str, Any] = json.loads(
        _engine(settings, tmp_path, "status", job.group(1), "--json").stdout
    )
    assert view["job"]["status"] == "done"
    assert view["result"]["step"] == "count"
    assert view["result"]["output"] == {"letters": 8, "text": "Hello, Ada!"}


def test_status__a_job_without_a_checkpoint_has_no_result(settings: Settings) -> None:
    job = json.loads(
        engine_cli(settings, "submit", "example", "--period", "2026-10", "--json").stdout
    )
    view = json.loads(engine_cli(settings, "status", job["job_id"], "--json").stdout)
    assert view["result"] is None
    assert "result" not in engine_cli(settings, "status", job["job_id"]).stdout


def test_cli__a_users_modules_keep_the_installed_tools(settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text(_first_flow())
    listed = _engine(settings, tmp_path, "--help")
    assert listed.returncode == 0, listed.stderr
    for command in ("books", "seed", "demo", "submit", "status"):
        assert re.search(rf"^  {command} ", listed.stdout, re.MULTILINE), command
    books = _engine(settings, tmp_path, "books", "--help")
    assert books.returncode == 0, books.stderr  # was: No such command 'books'
    alone = json.loads(_engine(settings, tmp_path, "flows", "list", "--json").stdout)
    assert [f["name"] for f in alone["flows"]] == ["hello"]
    # `flows,hello`: the installed package's flows, and hello added to them
    both = _engine(settings, tmp_path, "flows", "list", "--json", modules="flows,hello")
    assert [f["name"] for f in json.loads(both.stdout)["flows"]] == [
        "close",
        "costing",
        "example",
        "hello",
        "migration",
        "posting",
    ]


@pytest.mark.parametrize(
    ("args", "suggested"),
    [
        (("submit", "postng", "--period", "2026-11"), "did you mean 'posting'?"),
        (("stauts",), "Did you mean 'status'?"),
        (("submit", "posting", "--perod", "2026-11"), "Did you mean '--period'?"),
        (("submit", "posting", "--period", "2026-1"), "did you mean '2026-01'?"),
        (("submit", "posting", "--period", "202611"), "did you mean '2026-11'?"),
    ],
)
def test_cli__a_typo_suggests_the_closest_name_and_exits_2(
    settings: Settings, args: tuple[str, ...], suggested: str
) -> None:
    result = engine_cli(settings, *args)
    assert result.returncode == 2, result.stderr
    assert suggested in result.stderr
    assert "Traceback" not in result.stderr
