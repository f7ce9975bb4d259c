"""``engine audit`` and the ``--by`` of the commands that act, as a user runs them."""

from __future__ import annotations

import getpass
import json
import socket
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine

from engine.config import Settings
from engine.store import dead_letter_insert_message_if_new
from flows.tools.seed import seed

pytestmark = pytest.mark.acceptance

PERIOD = "2026-11"
ME = f"{getpass.getuser()}@{socket.gethostname()}"


def _audit(settings: Settings, *args: str) -> list[dict[str, Any]]:
    result = engine(settings, "audit", "--json", *args)
    assert result.returncode == 0, result.stderr
    entries: list[dict[str, Any]] = json.loads(result.stdout)["entries"]
    return entries


def _submit(settings: Settings, flow: str = "example") -> str:
    submitted = engine(settings, "submit", flow, "--period", PERIOD, "--json")
    assert submitted.returncode == 0, submitted.stderr
    job_id: str = json.loads(submitted.stdout)["job_id"]
    return job_id


def test_cli__cancel_and_retry_are_audited_with_by_or_the_os_user(settings: Settings) -> None:
    job = _submit(settings)
    cancelled = engine(settings, "cancel", job[:8], "--by", "ann", "--reason", "wrong period")
    assert cancelled.returncode == 0, cancelled.stderr
    # refused (the job ended): exit 2, and nothing is recorded
    refused = engine(settings, "cancel", job, "--by", "bob")
    assert refused.returncode == 2
    assert "only pending or running jobs can be cancelled" in refused.stderr
    retried = engine(settings, "retry", job)  # no --by: the OS user at this host
    assert retried.returncode == 0, retried.stderr

    entries = _audit(settings)
    assert [(e["action"], e["actor"]) for e in entries] == [("retry", ME), ("cancel", "ann")]
    retry, cancel = entries
    assert cancel["source"] == "cli"
    assert (cancel["target_kind"], cancel["target_id"], cancel["job_id"]) == ("job", job, job)
    assert cancel["reason"] == "wrong period" and retry["reason"] is None
    assert set(cancel) == {
        "id",
        "at",
        "actor",
        "source",
        "action",
        "target_kind",
        "target_id",
        "job_id",
        "reason",
        "detail",
    }
    assert retry["id"] > cancel["id"] and retry["at"] >= cancel["at"]

    assert [e["action"] for e in _audit(settings, "--job", job[:8], "--limit", "1")] == ["retry"]
    human = engine(settings, "audit", "--job", job)
    assert human.returncode == 0, human.stderr
    assert "ann" in human.stdout and "wrong period" in human.stdout and ME in human.stdout


def test_cli__dlq_schedule_and_signal_commands_are_audited(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    letter = dead_letter_insert_message_if_new(conn, "m-1", "not json", "malformed message")
    replayed = engine(settings, "dlq", "replay", str(letter), "--by", "cat")
    assert replayed.returncode == 0, replayed.stderr
    purged = engine(settings, "dlq", "purge", "--yes", "--by", "dan")
    assert purged.returncode == 0, purged.stderr

    add = engine(
        settings,
        "schedule",
        "add",
        "nightly",
        "--flow",
        "example",
        "--cron",
        "0 2 * * *",
        "--param",
        f"period={PERIOD}",
        "--by",
        "eve",
    )
    assert add.returncode == 0, add.stderr
    removed = engine(settings, "schedule", "remove", "nightly")
    assert removed.returncode == 0, removed.stderr

    seed(conn, stores=1, brands=1, employees=2, items=3, period=PERIOD, seed=1)
    posting = _submit(settings, "posting")
    ok = '{"ok": true, "reason": "checked"}'
    sent = engine(settings, "signal", posting, "approve", "--data", ok, "--by", "fay")
    assert sent.returncode == 0, sent.stderr
    typo = engine(settings, "signal", posting, "aprove", "--by", "fay")
    assert typo.returncode == 2

    entries = _audit(settings)
    assert [(e["action"], e["target_kind"], e["target_id"], e["actor"]) for e in entries] == [
        ("signal", "job", posting, "fay"),
        ("schedule_remove", "schedule", "nightly", ME),
        ("schedule_add", "schedule", "nightly", "eve"),
        ("purge", "dead_letter", None, "dan"),
        ("replay", "dead_letter", str(letter), "cat"),
    ]
    assert {e["source"] for e in entries} == {"cli"}
    assert entries[0]["detail"]["signal"] == "approve"
    assert entries[3]["detail"] == {"deleted": 1}


def test_cli__audit_of_an_empty_trail_and_a_bad_job(settings: Settings) -> None:
    assert _audit(settings) == []
    empty = engine(settings, "audit")
    assert empty.returncode == 0 and "no audit entries" in empty.stdout
    bad = engine(settings, "audit", "--job", "not-a-job")
    assert bad.returncode == 2 and "not-a-job" in bad.stderr


def test_cli__audit_verify_passes_then_names_the_entry_the_owner_deleted(
    settings: Settings,
) -> None:
    for name in ("a", "b", "c"):
        job = _submit(settings)
        assert engine(settings, "cancel", job, "--by", name).returncode == 0
    intact = engine(settings, "audit", "verify")
    assert intact.returncode == 0, intact.stderr
    assert intact.stdout.startswith("audit trail intact: 3 entries, head #3 ")
    kept = intact.stdout.split()[-1]
    assert json.loads(engine(settings, "audit", "verify", "--json").stdout)["head_hash"] == kept
    # the table's owner: trigger off, delete the second entry, trigger on, in one transaction
    assert settings.database_url is not None
    with psycopg.connect(settings.database_url.get_secret_value()) as conn:
        conn.execute("ALTER TABLE engine_audit DISABLE TRIGGER engine_audit_no_update_delete")
        conn.execute("DELETE FROM engine_audit WHERE seq = 2")
        conn.execute("ALTER TABLE engine_audit ENABLE TRIGGER engine_audit_no_update_delete")
    caught = engine(settings, "audit", "verify", "--expect-head", kept)
    assert caught.returncode == 1
    assert "entry #2 deleted: the chain goes from #1" in caught.stderr
    report = json.loads(engine(settings, "audit", "verify", "--json").stdout)
    assert (report["ok"], report["first_bad"]) == (False, 2)
    # the listing still works beside the subcommand
    assert [e["actor"] for e in _audit(settings)] == ["c", "a"]
    bad = engine(settings, "audit", "verify", "--expect-head", "not-a-hash")
    assert bad.returncode == 2 and "64 hexadecimal digits" in bad.stderr
