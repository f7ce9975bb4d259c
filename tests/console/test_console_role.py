"""The console connects as a role of its own (ENGINE_CONSOLE_ROLE, migration 0026).

Every console test runs under it (``create_app`` takes it), so the pages and
actions those tests drive are what the role allows; here: that it is the
role, that an action through it lands in the audit chain, and that the role
cannot undo the trail.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from consolesupport import csrf_of
from psycopg import errors

from engine import submit
from engine.config import Settings
from engine.console.settings import ConsoleSettings
from engine.flow.registry import Registry
from engine.jobs.audit import verify_chain
from engine.store import db


def test_console_role__every_connection_of_the_app_takes_engine_console(
    app_for: Any, settings: Settings
) -> None:
    app = app_for()
    assert app.state.settings.session_role == "engine_console"
    with db.connect(app.state.settings, autocommit=True) as c:
        row = c.execute("SELECT current_user AS role").fetchone()
        assert row == {"role": "engine_console"}
        # the console's role cannot undo the trail, nor skip its triggers
        for statement in (
            "DELETE FROM engine_audit",
            "ALTER TABLE engine_audit DISABLE TRIGGER ALL",
            "UPDATE engine_audit_head SET seq = 0",
            "SET session_replication_role = replica",
        ):
            with pytest.raises(errors.InsufficientPrivilege), c.transaction():
                c.execute(statement)
    # empty: the login's own role
    assert app_for(role="").state.settings.session_role == ""


def test_console_role__is_a_plain_role_name_from_its_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGINE_CONSOLE_ROLE", raising=False)
    assert ConsoleSettings().role == "engine_console"
    monkeypatch.setenv("ENGINE_CONSOLE_ROLE", "erp_console")
    assert ConsoleSettings().role == "erp_console"
    for bad in ("engine console", "x;DROP", "-c", "role=x"):
        with pytest.raises(ValueError, match="role"):
            ConsoleSettings(role=bad)


def test_console_role__an_action_through_it_is_chained_in_the_trail(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    otto = client_for("otto")
    job = submit("chain", {}, settings=settings, registry=Registry.load(["testflows"])).job_id
    token = csrf_of(otto.get(f"/runs/{job}.html").text)
    r = otto.post(f"/runs/{job}/cancel", data={"csrf": token, "reason": "wrong period"})
    assert r.status_code == 200 and f"job {job} cancelled" in r.text
    row = conn.execute(
        "SELECT actor, source, seq, hash FROM engine_audit WHERE action = 'cancel'"
    ).fetchone()
    assert row is not None and (row["actor"], row["source"]) == ("otto", "console")
    report = verify_chain(settings)
    assert report.ok and report.head_hash == row["hash"]
