"""``import engine`` and the ``engine`` command import only what is used (issue 37).

Hundreds of tests and every worker start ``engine ...`` as a process; each one
used to import the whole API (SQLModel, boto3, networkx, pydantic-settings)
before parsing its arguments. Each check runs in a fresh interpreter, since
this one has imported everything already.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click

from engine.cli.main import COMMANDS, main

HEAVY = ("sqlmodel", "sqlalchemy", "boto3", "networkx", "pydantic_settings", "psycopg", "rich")


def _imported_after(code: str, env: dict[str, str] | None = None) -> list[str]:
    """The heavy libraries a fresh interpreter has imported after running ``code``."""
    probe = (
        "import sys\n"
        f"{code}\n"
        f"print(__import__('json').dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_import_engine__imports_neither_the_read_side_nor_the_queue_nor_the_graphs() -> None:
    # the public API is eager (test_public_api.py); what it needs is the settings and psycopg
    assert _imported_after("import engine") == ["pydantic_settings", "psycopg"]


def test_import_engine__declaring_a_flow_builds_no_graph_yet() -> None:
    # networkx is imported when a flow's graph is first checked (the registry's load)
    code = (
        "from pydantic import BaseModel\n"
        "from engine import Flow\n"
        "class P(BaseModel):\n"
        "    n: int = 1\n"
        "flow = Flow('f', params=P)\n"
        "@flow.step()\n"
        "def one(params: P) -> P:\n"
        "    return params\n"
        "print(sorted(flow.steps))"
    )
    assert "networkx" in _imported_after(code)
    assert "networkx" not in _imported_after(code.rpartition("\n")[0])


def test_engine_help__lists_every_command_without_importing_them() -> None:
    code = "from engine.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    # the flow modules are imported (their commands are listed: books, seed, demo), the
    # engine's own commands are not: no read side, no queue, no tables
    imported = _imported_after(code, {"ENGINE_FLOW_MODULES": "flows.example"})
    assert not {"sqlmodel", "sqlalchemy", "boto3", "rich"} & set(imported), imported


def test_cli_commands__each_summary_is_its_commands_own_help() -> None:
    ctx = click.Context(main)
    for name, (module, attribute, summary) in COMMANDS.items():
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command) and command.name == name
        for limit in (45, 80, 300):
            assert click.Command(name, help=summary).get_short_help_str(limit) == (
                command.get_short_help_str(limit)
            ), name
        assert main.get_command(ctx, name) is command
