"""The audit trail (DESIGN.md invariant 19): each operator action writes one entry, in its
own transaction; a refused action writes none; nobody can change or delete an entry."""

from __future__ import annotations

import getpass
import json
import socket
import uuid
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from harness import flows_registry

from engine import BadInput, audit_trail, record_action, submit
from engine.cli.main import main
from engine.config import Settings
from engine.jobs import admin
from engine.schedules.schedules import add_schedule, remove_schedule
from engine.store import dead_letter_insert_message_if_new, dead_letter_insert_step
from engine.store.status import AuditSource
from engine.waits.signals import operator_signal

ME = f"{getpass.getuser()}@{socket.gethostname()}"


def _entries(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in conn.execute(
            "SELECT actor, source, action, target_kind, target_id, job_id, reason, detail "
            "FROM engine_audit ORDER BY id"
        ).fetchall()
    ]


def _job(settings: Settings, flow: str = "chain", **params: Any) -> uuid.UUID:
    return submit(flow, params, settings=settings, registry=flows_registry()).job_id


def test_audit__cancel_records_who_and_why_in_the_entry_and_the_jobs_error(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _job(settings)
    admin.cancel(settings, job, "wrong period", actor="ann")
    assert _entries(conn) == [
        {
            "actor": "ann",
            "source": "cli",
            "action": "cancel",
            "target_kind": "job",
            "target_id": str(job),
            "job_id": job,
            "reason": "wrong period",
            "detail": {},
        }
    ]
    error = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert error == {"error": "cancelled by ann: wrong period"}


def test_audit__cancel_without_an_actor_records_the_os_user_at_this_host(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _job(settings)
    admin.cancel(settings, job)
    (entry,) = _entries(conn)
    assert entry["actor"] == ME and entry["reason"] is None
    error = conn.execute("SELECT error FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert error == {"error": f"cancelled by {ME}"}


def test_audit__a_refused_cancel_or_retry_records_nothing(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _job(settings)
    with pytest.raises(BadInput, match="only failed or cancelled jobs can be retried"):
        admin.retry_job(settings, job, actor="ann")
    admin.cancel(settings, job, actor="ann")
    with pytest.raises(BadInput, match="only pending or running jobs can be cancelled"):
        admin.cancel(settings, job, actor="bob")
    assert [(e["actor"], e["action"]) for e in _entries(conn)] == [("ann", "cancel")]


def test_audit__retry_records_the_step_runs_it_reopened(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _job(settings)
    admin.cancel(settings, job, actor="ann")
    reopened = admin.retry_job(settings, job, actor="bob", reason="fixed the data")
    retry = _entries(conn)[-1]
    assert retry == {
        "actor": "bob",
        "source": "cli",
        "action": "retry",
        "target_kind": "job",
        "target_id": str(job),
        "job_id": job,
        "reason": "fixed the data",
        "detail": {"step_runs": reopened.step_runs, "children": []},
    }


def test_audit__replay_of_a_step_dead_letter_is_one_replay_entry_not_a_retry(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _job(settings)
    admin.cancel(settings, job, actor="ann")
    run = conn.execute("SELECT id FROM engine_step_runs WHERE job_id = %s", (job,)).fetchone()
    assert run is not None
    letter = dead_letter_insert_step(
        conn, job_id=job, step_run_id=run["id"], reason="attempts exhausted", error=None
    )
    assert letter is not None
    admin.replay(settings, letter, actor="cat")
    replay = _entries(conn)[-1]
    assert len(_entries(conn)) == 2
    assert (replay["actor"], replay["action"], replay["target_kind"]) == (
        "cat",
        "replay",
        "dead_letter",
    )
    assert replay["target_id"] == str(letter) and replay["job_id"] == job
    assert replay["detail"]["source"] == "step"


def test_audit__replay_of_a_message_and_purge_record_their_entries(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    letter = dead_letter_insert_message_if_new(conn, "m-1", "not json", "malformed message")
    assert letter is not None
    admin.replay(settings, letter, actor="dan", reason="queue fixed")
    with pytest.raises(BadInput, match="already replayed"):
        admin.replay(settings, letter, actor="dan")
    assert admin.purge(settings, actor="eve") == 1
    replay, purge = _entries(conn)
    assert replay == {
        "actor": "dan",
        "source": "cli",
        "action": "replay",
        "target_kind": "dead_letter",
        "target_id": str(letter),
        "job_id": None,
        "reason": "queue fixed",
        "detail": {"source": "message"},
    }
    assert (purge["actor"], purge["action"], purge["target_id"]) == ("eve", "purge", None)
    assert purge["detail"] == {"deleted": 1}


def test_audit__a_signal_is_recorded_once_and_a_refused_one_not_at_all(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _job(settings, "fan", n=1)
    sent = operator_signal(job, "go", {"ok": True}, settings=settings, actor="fay")
    assert sent.sent_by == "fay" and sent.created
    again = operator_signal(job, "go", {"ok": True}, settings=settings, actor="fay")
    assert not again.created  # nothing changed: nothing recorded
    with pytest.raises(BadInput, match="not declared"):
        operator_signal(job, "stop", settings=settings, actor="fay")
    with pytest.raises(BadInput, match="was sent to job"):
        operator_signal(job, "go", {"ok": False}, settings=settings, actor="fay")
    (entry,) = _entries(conn)
    assert (entry["actor"], entry["action"], entry["target_id"], entry["job_id"]) == (
        "fay",
        "signal",
        str(job),
        job,
    )
    assert entry["detail"] == {"signal": "go", "data": {"ok": True}, "woken": 0}


def test_audit__schedule_add_and_remove_are_recorded(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    add_schedule(
        "nightly",
        "chain",
        "0 2 * * *",
        created_by="gus",
        settings=settings,
        registry=flows_registry(),
        source=AuditSource.CLI,
    )
    with pytest.raises(BadInput, match="exists"):
        add_schedule(
            "nightly",
            "chain",
            "0 3 * * *",
            created_by="gus",
            settings=settings,
            registry=flows_registry(),
        )
    remove_schedule("nightly", settings, actor="hal")
    with pytest.raises(BadInput, match="no schedule named"):
        remove_schedule("nightly", settings, actor="hal")
    added, removed = _entries(conn)
    assert (added["actor"], added["source"], added["action"], added["target_id"]) == (
        "gus",
        "cli",
        "schedule_add",
        "nightly",
    )
    assert added["detail"]["cron"] == "0 2 * * *" and added["detail"]["flow"] == "chain"
    assert (removed["actor"], removed["source"], removed["action"]) == (
        "hal",
        "api",
        "schedule_remove",
    )


def _fail_after_recording(own: psycopg.Connection[Any]) -> None:
    with own.transaction():
        record_action(own, "close", "period", "2026-11", actor="ivy")
        raise RuntimeError("the action failed")


def test_audit__record_action_joins_the_callers_transaction(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(conn.info.dsn) as own:
        with pytest.raises(RuntimeError, match="the action failed"):
            _fail_after_recording(own)
        assert _entries(conn) == []
        with own.transaction():
            entry = record_action(
                own, "reopen", "period", "2026-11", actor="ivy", reason="late invoice"
            )
    assert entry.actor == "ivy" and entry.source == "api" and entry.reason == "late invoice"
    (listed,) = audit_trail(settings)
    assert listed == entry


def test_audit__record_action_refuses_bad_words_before_writing(
    conn: psycopg.Connection[Any],
) -> None:
    with pytest.raises(BadInput, match="invalid audit action 'Close!'"):
        record_action(conn, "Close!", "period", "2026-11")
    with pytest.raises(BadInput, match="invalid audit source 'web'"):
        record_action(conn, "close", "period", "2026-11", source="web")
    assert record_action(conn, "close", "period", "2026-11").actor == ME
    assert len(_entries(conn)) == 1


def test_audit__trail_lists_newest_first_and_by_job(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    first, second = _job(settings), _job(settings, n=2)
    admin.cancel(settings, first, actor="a")
    admin.cancel(settings, second, actor="b")
    admin.retry_job(settings, first, actor="c")
    assert [e.actor for e in audit_trail(settings)] == ["c", "b", "a"]
    assert [e.actor for e in audit_trail(settings, limit=1)] == ["c"]
    assert [e.action for e in audit_trail(settings, job_id=first)] == ["retry", "cancel"]
    # filtered by who, the action and a period (the console's audit page, `engine audit`)
    assert [e.actor for e in audit_trail(settings, actor="b")] == ["b"]
    assert [e.actor for e in audit_trail(settings, action="cancel")] == ["b", "a"]
    at = audit_trail(settings, actor="b")[0].at
    assert [e.actor for e in audit_trail(settings, since=at, action="cancel")] == ["b"]
    assert [e.actor for e in audit_trail(settings, until=at)] == ["a"]
    assert audit_trail(settings, actor="a", action="retry") == []
    assert settings.database_url is not None
    env = {"ENGINE_DATABASE_URL": settings.database_url.get_secret_value()}
    argv = ["audit", "--by", "b", "--action", "cancel", "--json"]
    out = CliRunner().invoke(main, argv, env=env)
    assert out.exit_code == 0, out.output
    assert [e["actor"] for e in json.loads(out.output)["entries"]] == ["b"]
    bad = CliRunner().invoke(main, ["audit", "--from", "yesterday"], env=env)
    assert bad.exit_code == 2 and "yesterday" in bad.output, bad.output


def test_audit__entries_cannot_be_changed_or_deleted_by_anyone(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    record_action(conn, "close", "period", "2026-11", actor="ann")
    # the owner (the migrating role) is refused by the trigger
    with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
        conn.execute("UPDATE engine_audit SET actor = 'someone else'")
    with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
        conn.execute("DELETE FROM engine_audit")
    with pytest.raises(psycopg.errors.RestrictViolation, match="append-only"):
        conn.execute("TRUNCATE engine_audit")
    # the worker's role may read and append, never change or delete
    granted = conn.execute(
        "SELECT privilege_type FROM information_schema.role_table_grants "
        "WHERE table_name = 'engine_audit' AND grantee = 'engine_worker' ORDER BY 1"
    ).fetchall()
    assert [g["privilege_type"] for g in granted] == ["INSERT", "SELECT"]
    with conn.transaction():
        conn.execute("SET LOCAL ROLE engine_worker")
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("UPDATE engine_audit SET actor = 'someone else'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("DELETE FROM engine_audit")
    assert [e["actor"] for e in _entries(conn)] == ["ann"]
