"""The console's role (engine_console, migrations 0026 and 1006): nothing beyond what it does.

What it does is proven by the console tests, which all run under it
(``create_app`` takes ENGINE_CONSOLE_ROLE). Here, what it must not do, each
refused by PostgreSQL's privileges (SQLSTATE 42501), not by a trigger.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from engine.config import Settings
from engine.store import db

FORBIDDEN: dict[str, str] = {
    # DDL and ways around the triggers
    "create_table": "CREATE TABLE console_made (id int)",
    "alter_audit": "ALTER TABLE engine_audit DISABLE TRIGGER USER",
    "drop_audit": "DROP TABLE engine_audit",
    "skip_triggers": "SET session_replication_role = replica",
    "replace_chain": (
        "CREATE OR REPLACE FUNCTION engine_audit_chain() RETURNS trigger"
        " LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'"
    ),
    # the trail and its head
    "delete_audit": "DELETE FROM engine_audit",
    "update_audit": "UPDATE engine_audit SET actor = 'x'",
    "truncate_audit": "TRUNCATE engine_audit",
    "update_head": "UPDATE engine_audit_head SET seq = 0",
    # a job's identity and outcome, step runs' work, history
    "update_job_params": "UPDATE engine_jobs SET params = '{}'",
    "update_job_submitter": "UPDATE engine_jobs SET submitted_by = 'x'",
    "delete_jobs": "DELETE FROM engine_jobs",
    "update_step_output": "UPDATE engine_step_runs SET output = '{}'",
    "update_step_attempts": "UPDATE engine_step_runs SET attempts = 0",
    "delete_step_runs": "DELETE FROM engine_step_runs",
    "delete_events": "DELETE FROM engine_events",
    "update_events": "UPDATE engine_events SET detail = '{}'",
    "insert_dead_letter": ("INSERT INTO engine_dead_letters (source) VALUES ('message')"),
    "read_queue_bodies": "SELECT body FROM engine_queue",
    "delete_queue": "DELETE FROM engine_queue",
    "read_migrations": "SELECT * FROM engine_migrations",
    "read_alerts": "SELECT * FROM engine_alerts",
    # schedules are added and removed with `engine schedule` (the owner)
    "insert_schedule": (
        "INSERT INTO engine_schedules (name, flow, cron, timezone, next_fire_at)"
        " VALUES ('x', 'x', '* * * * *', 'UTC', now())"
    ),
    "update_schedule_cron": "UPDATE engine_schedules SET cron = '* * * * *'",
    "delete_schedules": "DELETE FROM engine_schedules",
    # users are managed with `engine users` (the owner); the console counts sign-ins
    "insert_user": "INSERT INTO engine_console_users (name, role) VALUES ('eve', 'admin')",
    "update_user_role": "UPDATE engine_console_users SET role = 'admin'",
    "update_user_password": "UPDATE engine_console_users SET password_hash = '$argon2x'",
    "delete_users": "DELETE FROM engine_console_users",
    # the books: read for the periods page, never written but a period's close
    "update_journal_lines": "UPDATE erp_journal_lines SET debit = 0",
    "delete_journals": "DELETE FROM erp_journals",
    "update_documents": "UPDATE erp_documents SET status = 'posted'",
    # a rejected document is requeued through its function only (migration 1011)
    "requeue_by_hand": "UPDATE erp_documents SET status = 'unposted', reject_reason = NULL",
    "insert_document_events": (
        "INSERT INTO erp_document_events (document_id, action, period, actor, reason) "
        "VALUES (1, 'requeued', '2026-11', 'eve', 'x')"
    ),
    "read_employees": "SELECT * FROM erp_employees",
    "update_period_key": "UPDATE erp_periods SET period = '2099-01'",
    "delete_period_events": "DELETE FROM erp_period_events",
}


@pytest.fixture
def console_conn(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    with db.connect(settings.model_copy(update={"session_role": "engine_console"})) as c:
        yield c


@pytest.mark.parametrize("case", sorted(FORBIDDEN))
def test_console_role__refused(case: str, console_conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(errors.InsufficientPrivilege), console_conn.transaction():
        console_conn.execute(FORBIDDEN[case])


def test_console_role__owns_nothing_and_creates_nothing(
    console_conn: psycopg.Connection[Any],
) -> None:
    row = console_conn.execute(
        "SELECT current_user AS role,"
        " has_schema_privilege(current_user, 'public', 'CREATE') AS create_public,"
        " (SELECT count(*) FROM pg_class WHERE relowner = current_user::regrole) AS owned"
    ).fetchone()
    assert row == {"role": "engine_console", "create_public": False, "owned": 0}
