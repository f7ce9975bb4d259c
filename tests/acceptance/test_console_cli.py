"""`engine users` and `engine console` as a person runs them: passwords from stdin, audited."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from harness import engine_cli

from engine.config import Settings

pytestmark = pytest.mark.acceptance


def test_users__added_listed_changed_and_removed_with_the_password_from_stdin(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    added = engine_cli(
        settings,
        "users",
        "add",
        "maria",
        "--role",
        "accountant",
        "--by",
        "it-desk",
        stdin="a long password 42\n",
    )
    assert added.returncode == 0, added.stderr
    assert "user maria added (accountant)" in added.stdout
    listed = engine_cli(settings, "users", "list", "--json")
    assert json.loads(listed.stdout)["users"] == [
        {
            "name": "maria",
            "role": "accountant",
            "password": True,
            "locked": False,
            "last_signin_at": None,
        }
    ]
    row = conn.execute("SELECT password_hash FROM engine_console_users").fetchone()
    assert row["password_hash"].startswith("$argon2id$")
    assert "a long password" not in listed.stdout + added.stdout + added.stderr
    assert engine_cli(settings, "users", "role", "maria", "viewer").returncode == 0
    changed = engine_cli(settings, "users", "passwd", "maria", stdin="another password 43\n")
    assert changed.returncode == 0, changed.stderr
    assert engine_cli(settings, "users", "remove", "maria").returncode == 0
    trail = conn.execute("SELECT action, actor, target_id FROM engine_audit ORDER BY id").fetchall()
    assert [(t["action"], t["target_id"]) for t in trail] == [
        ("user-add", "maria"),
        ("user-role", "maria"),
        ("user-passwd", "maria"),
        ("user-remove", "maria"),
    ]
    assert trail[0]["actor"] == "it-desk"


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (
            ("users", "add", "maria", "--role", "boss"),
            "a long password 42\n",
            "invalid role 'boss'; valid: viewer, operator, accountant, admin",
        ),
        (
            ("users", "add", "maria", "--role", "viewer"),
            "short\n",
            "password too short (5 characters): at least 12",
        ),
        (
            ("users", "add", "<b>", "--role", "viewer"),
            "a long password 42\n",
            "invalid user name '<b>'",
        ),
        (("users", "remove", "nobody"), None, "no user 'nobody'"),
        (("users", "add", "maria", "--role", "viewer"), "", "no password on standard input"),
    ],
)
def test_users__bad_input_exits_2_naming_the_value(
    settings: Settings, args: tuple[str, ...], stdin: str | None, says: str
) -> None:
    done = engine_cli(settings, *args, stdin=stdin or "")
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr


def test_console__refuses_an_address_beyond_this_machine_without_sign_in_configured(
    settings: Settings,
) -> None:
    done = engine_cli(settings, "console", "--host", "0.0.0.0", "--port", "1")
    assert done.returncode == 2
    assert "refusing to serve the console on 0.0.0.0" in done.stderr
    assert "ENGINE_CONSOLE_SECRET" in done.stderr
    assert "engine users add" in done.stderr
