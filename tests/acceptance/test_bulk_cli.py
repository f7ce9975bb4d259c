"""The bulk forms of ``engine retry|cancel|dlq replay|dlq purge`` as a user runs them: the
preview's id and counts, the apply's outcome, and the exit codes of engine/cli/exits.py."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from harness import engine_cli as engine

from engine.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from engine.config import Settings
from engine.store import dead_letter_insert_message_if_new

pytestmark = pytest.mark.acceptance


def _cancelled_example(settings: Settings) -> str:
    submitted = engine(settings, "submit", "example", "--period", "2026-11", "--json")
    assert submitted.returncode == EXIT_OK, submitted.stderr
    job: str = json.loads(submitted.stdout)["job_id"]
    cancelled = engine(settings, "cancel", job, "--reason", "outage 7")
    assert cancelled.returncode == EXIT_OK, cancelled.stderr
    return job


def test_cli__retry_dry_run_then_apply_once(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _cancelled_example(settings)
    dry = engine(settings, "retry", "--flow", "example", "--error", "outage", "--dry-run")
    assert dry.returncode == EXIT_OK, dry.stderr
    assert "retry of 1 item(s)" in dry.stdout and job in dry.stdout
    preview = dry.stdout.split()[1].rstrip(":")
    as_json = engine(settings, "retry", "--param", "period=2026-11", "--dry-run", "--json")
    assert json.loads(as_json.stdout)["counts"] == [
        {"flow": "example", "state": "cancelled", "n": 1}
    ]

    no_reason = engine(settings, "retry", "--apply", preview)
    assert no_reason.returncode == EXIT_BAD_INPUT and "needs a reason" in no_reason.stderr
    applied = engine(settings, "retry", "--apply", preview, "--reason", "db back", "--by", "ann")
    assert applied.returncode == EXIT_OK, applied.stderr
    assert "retry done for 1 item(s); 0 skipped" in applied.stdout
    again = engine(settings, "retry", "--apply", preview, "--reason", "db back")
    assert again.returncode == EXIT_BAD_INPUT
    assert f"bulk preview {preview} was applied already, by ann" in again.stderr
    entry = conn.execute(
        "SELECT actor, reason, detail FROM engine_audit WHERE action = 'retry'"
    ).fetchone()
    assert entry is not None
    assert (entry["actor"], entry["reason"], entry["detail"]["preview"]) == (
        "ann",
        "db back",
        preview,
    )


def test_cli__expired_preview_exits_2_and_purge_keeps_its_single_form(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    dead_letter_insert_message_if_new(conn, "m-1", "not json", "malformed")
    dry = engine(settings, "dlq", "purge", "--error", "MALFORMED", "--dry-run", "--json")
    assert dry.returncode == EXIT_OK, dry.stderr
    made = json.loads(dry.stdout)
    assert made["total"] == 1 and made["sample"][0]["state"] == "open"
    conn.execute(
        "UPDATE engine_bulk_previews SET created_at = created_at - interval '1 hour', "
        "expires_at = clock_timestamp() - interval '1 second'"
    )
    late = engine(settings, "dlq", "purge", "--apply", made["preview_id"], "--reason", "tidy")
    assert late.returncode == EXIT_BAD_INPUT and "expired at" in late.stderr
    asked = engine(settings, "dlq", "purge", stdin="n\n")  # the single form still asks
    assert asked.returncode != EXIT_OK and "Delete poison-message" in asked.stdout
    purged = engine(settings, "dlq", "purge", "--yes")
    assert purged.returncode == EXIT_OK and "1 dead letter(s) deleted" in purged.stdout
