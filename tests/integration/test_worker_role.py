"""The worker's role (migrations 0006 and 1002): what it may not do, and what it must.

Every case runs on a connection that took the role the way a worker process
does (``Settings.session_role``, libpq ``-c role=``). Refusals are checked by
SQLSTATE 42501 (insufficient privilege), so a trigger or a constraint saying
no does not count. The statements the worker runs are taken from the ``.sql``
files themselves, so a new statement without its grant fails here.
"""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from engine.config import Settings
from engine.errors import ConfigError
from engine.store import db, migrations
from engine.store.queries import parse

ROOT = Path(__file__).resolve().parents[2]
ROLE = "engine_worker"

# The files whose statements worker processes run, and the blocks of them that
# only an operator or the submitting ERP runs (with the owner's role).
WORKER_SQL: dict[str, set[str]] = {
    # a retry (and the children it retries with the job) is an operator's
    "engine/store/sql/step_runs.sql": {"step_reopen_by_jobs"},
    "engine/store/sql/step_waits.sql": {"step_wait_children_if_reopened"},
    # firing a schedule submits its job (0010): the worker inserts pending jobs
    "engine/store/sql/jobs.sql": {
        "job_select_active_by_fingerprint",
        "job_select_status",
        "job_progress",
        "job_reopen_children_if_ended",
        "job_select_parent",
        "job_select_active_with_fingerprint_of",
        # a bulk retry's chunk (issue 38), an operator's
        "job_select_many_locked",
        "job_reopen_many_if_ended",
        "job_pin_if_exists",  # an operator keeps a job past its retention
    },
    # the pruner prunes (the deletes only through engine_retire_jobs, 0031); the closing
    # VACUUM is the tables' owner's (`engine prune`): the worker's role asks first, skips it
    "engine/store/sql/job_summaries.sql": {"job_retired_tables_vacuum"},
    "engine/store/sql/dead_letters.sql": {
        "dead_letter_select_open",
        "dead_letter_select_one",
        "dead_letter_mark_replayed_if_open",
        "dead_letter_mark_replayed_by_job",
        "dead_letter_delete_closed",
        # a bulk replay or purge (issue 38), an operator's
        "dead_letter_select_for_preview",
        "dead_letter_select_locked",
        "dead_letter_delete_if_closed",
        "dead_letter_mark_replayed_by_jobs",
        "dead_letter_select_jobs_of",
        "dead_letter_select_many_locked",
    },
    "engine/store/sql/events.sql": set(),
    # schedules are added, removed, paused and resumed by an operator; workers fire them
    "engine/store/sql/schedules.sql": {
        "schedule_insert_if_absent",
        "schedule_delete_by_name",
        "schedule_pause_if_active",
        "schedule_resume_if_paused",
    },
    "engine/store/sql/server.sql": {"database_select_exists", "database_create"},
    # `engine worker --check` reads which migrations are applied (0008); applying is the owner's
    "engine/store/sql/migrations.sql": {
        "migration_lock",
        "migration_unlock",
        "migration_table_create",
        "migration_insert",
    },
    "engine/store/sql/outbox.sql": set(),
    # a step tags its job (ctx.tag) in its fenced transaction
    "engine/store/sql/tags.sql": set(),
    "engine/store/sql/workers.sql": set(),
    "engine/store/sql/alerts.sql": {"alert_delivery_reset_abandoned"},
    "engine/transports/postgres.sql": set(),
    "flows/erp/sql/costing.sql": set(),
    "flows/erp/sql/posting.sql": set(),
    "flows/erp/sql/migration.sql": set(),
    "flows/erp/sql/books.sql": set(),
    "flows/erp/sql/flags.sql": set(),  # the close's check step raises the flags
    # loosening a period's limit is an operator's (engine books approval-threshold)
    "flows/erp/sql/approvals.sql": {"period_threshold_set"},
    "flows/erp/sql/documents.sql": set(),
    # the close checks the books as the worker: the ties of every figure to its source
    "flows/erp/sql/ties.sql": set(),
    # posting marks stale pairs; the costing's recost rewrites them (issue 36)
    "flows/erp/sql/recost.sql": set(),
}
# Statements of operators, the seed and the migrator that the worker's role must refuse.
ADMIN_SQL: dict[str, list[str]] = {
    "engine/store/sql/dead_letters.sql": [
        "dead_letter_mark_replayed_if_open",
        "dead_letter_delete_closed",
        "dead_letter_mark_replayed_by_job",
        "dead_letter_mark_replayed_by_jobs",
        "dead_letter_delete_if_closed",
        "dead_letter_select_locked",
        "dead_letter_select_many_locked",
    ],
    "engine/store/sql/step_runs.sql": ["step_reopen_by_jobs"],
    "engine/store/sql/jobs.sql": ["job_pin_if_exists"],
    "engine/store/sql/schedules.sql": [
        "schedule_insert_if_absent",
        "schedule_delete_by_name",
        "schedule_pause_if_active",
        "schedule_resume_if_paused",
    ],
    "engine/store/sql/migrations.sql": ["migration_insert"],
    "flows/erp/sql/seed.sql": ["erp_seed_lock", "erp_data_truncate"],
}
_EXPLAINABLE = re.compile(r"^(SELECT|WITH|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_PARAM = re.compile(r"%\((\w+)\)s")
_COPY_IN = re.compile(r"^COPY\b.*\bFROM STDIN;?$", re.IGNORECASE | re.DOTALL)


def _blocks(path: str) -> dict[str, str]:
    return parse((ROOT / path).read_text(encoding="utf-8"), path)


def _statement(block: str) -> str:
    """The block without its comment lines."""
    return "\n".join(line for line in block.splitlines() if not line.startswith("--")).strip()


WORKER_STATEMENTS = [
    (path, name)
    for path, admin_only in WORKER_SQL.items()
    for name in sorted(_blocks(path))
    if name not in admin_only
]
ADMIN_STATEMENTS = [(path, name) for path, names in ADMIN_SQL.items() for name in names]


def as_worker(settings: Settings) -> Settings:
    return settings.model_copy(update={"session_role": ROLE})


@pytest.fixture
def worker_conn(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    with db.connect(as_worker(settings), autocommit=True) as c:
        yield c


@pytest.fixture
def books(conn: psycopg.Connection[Any]) -> None:
    """A posted journal with its two lines, a document and an event: rows to aim at."""
    conn.execute("INSERT INTO erp_brands VALUES (1, 'B1', 'Brand')")
    conn.execute("INSERT INTO erp_stores VALUES (1, 'ST001', 1, 'Store', 'small')")
    conn.execute("INSERT INTO erp_employees VALUES (1, 1, 'Ann', 'clerk')")
    conn.execute("INSERT INTO erp_periods (period) VALUES ('2026-11')")
    conn.execute(
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on,"
        " status) VALUES (1, 'SI-1', 'sales_invoice', '2026-11', 1, 1, '2026-11-02', 'posted')"
    )
    conn.execute(
        "INSERT INTO erp_document_lines (document_id, line_no, account_code, debit, credit)"
        " VALUES (1, 1, '1000', 10, 0), (1, 2, '4000', 0, 10)"
    )
    conn.execute(
        "INSERT INTO erp_journals (period, store_id, source, source_key)"
        " VALUES ('2026-11', 1, 'document', 'document:1')"
    )
    conn.execute(
        "INSERT INTO erp_journal_lines (journal_id, line_no, account_code, store_id, debit, credit)"
        " SELECT id, 1, '1000', 1, 10, 0 FROM erp_journals UNION ALL"
        " SELECT id, 2, '4000', 1, 0, 10 FROM erp_journals"
    )
    conn.execute("INSERT INTO engine_events (kind, detail) VALUES ('submitted', '{}')")


def _snapshot(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    tables = ["erp_journals", "erp_journal_lines", "erp_documents", "engine_events"]
    out: dict[str, Any] = {}
    for table in tables:
        query = sql.SQL(
            "SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) AS h FROM {} AS t"
        ).format(sql.Identifier(table))
        row = conn.execute(query).fetchone()
        assert row is not None
        out[table] = row["h"]
    return out


def test_worker_role__a_connection_takes_it_and_keeps_the_login(
    worker_conn: psycopg.Connection[Any], conn: psycopg.Connection[Any]
) -> None:
    row = worker_conn.execute("SELECT current_user AS role, session_user AS login").fetchone()
    login = conn.execute("SELECT session_user AS login").fetchone()
    assert row == {"role": ROLE, "login": login and login["login"]}


def test_worker_role__options_of_the_url_and_of_the_caller_are_all_applied(
    dbinfo: str,
) -> None:
    info = make_conninfo(dbinfo, options="-c work_mem=7MB")
    worker = as_worker(Settings(database_url=SecretStr(info)))
    with db.connect(worker, options="-c lock_timeout=4321") as c:
        row = c.execute(
            "SELECT current_user AS role, current_setting('work_mem') AS work_mem,"
            " current_setting('lock_timeout') AS lock_timeout"
        ).fetchone()
    assert row == {"role": ROLE, "work_mem": "7MB", "lock_timeout": "4321ms"}


def test_worker_role__sqlalchemy_connections_take_it_too(settings: Settings) -> None:
    # run reports read through SQLAlchemy (engine.store.read), inside the worker process
    from sqlalchemy import text

    from engine.store.read import sqlalchemy_engine

    engine = sqlalchemy_engine(as_worker(settings))
    try:
        with engine.connect() as c:
            assert c.execute(text("SELECT current_user")).scalar() == ROLE
    finally:
        engine.dispose()


def test_worker_role__a_role_the_server_refuses_is_a_config_error_naming_it(
    dbinfo: str,
) -> None:
    canary = f"pw-{uuid.uuid4().hex}"
    settings = Settings(
        database_url=SecretStr(make_conninfo(dbinfo, password=canary)),
        session_role="engine_no_such_role",
    )
    with pytest.raises(ConfigError) as raised:
        db.connect(settings)
    message = str(raised.value)
    assert "engine_no_such_role" in message and "engine migrate" in message
    assert canary not in message


@pytest.mark.parametrize(
    "bad", ["engine worker", "x;DROP", "-c", "role=x", "a" * 64, "é"], ids=repr
)
def test_settings__worker_role_must_be_a_plain_role_name(bad: str) -> None:
    # it goes unquoted into libpq's options (-c role=NAME)
    with pytest.raises(ValueError, match="worker_role"):
        Settings(worker_role=bad)


def test_settings__worker_role_defaults_to_the_migrations_role_and_may_be_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGINE_WORKER_ROLE", raising=False)
    assert Settings().worker_role == ROLE
    assert Settings().session_role == ""
    monkeypatch.setenv("ENGINE_WORKER_ROLE", "")
    assert Settings().worker_role == ""


FORBIDDEN: dict[str, str] = {
    # DDL: the role owns nothing and may create nothing outside pg_temp
    "create_table": "CREATE TABLE worker_made (id int)",
    "create_table_as": "CREATE TABLE worker_copy AS SELECT * FROM erp_journal_lines",
    "create_view": "CREATE VIEW worker_view AS SELECT 1 AS one",
    "create_function": "CREATE FUNCTION worker_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "create_schema": "CREATE SCHEMA worker_schema",
    "create_index": "CREATE INDEX worker_idx ON erp_journal_lines (debit)",
    "create_role": "CREATE ROLE worker_friend",
    "alter_table": "ALTER TABLE erp_journal_lines ADD COLUMN note text",
    "alter_table_drop_check": (
        "ALTER TABLE erp_journal_lines DROP CONSTRAINT erp_journal_lines_check"
    ),
    "disable_append_only_trigger": "ALTER TABLE engine_events DISABLE TRIGGER USER",
    "drop_table_journal_lines": "DROP TABLE erp_journal_lines",
    "drop_table_jobs": "DROP TABLE engine_jobs CASCADE",
    "drop_function": "DROP FUNCTION engine_events_append_only() CASCADE",
    "drop_delete_guard": "DROP FUNCTION engine_events_delete_guard() CASCADE",
    "truncate_journal_lines": "TRUNCATE erp_journal_lines",
    "truncate_journals": "TRUNCATE erp_journals CASCADE",
    "truncate_events": "TRUNCATE engine_events",
    "truncate_queue": "TRUNCATE engine_queue",
    # the books: posted journals and their lines are never changed or removed
    "update_journal_lines": "UPDATE erp_journal_lines SET debit = debit + 1",
    "delete_journal_lines": "DELETE FROM erp_journal_lines",
    "update_journals": "UPDATE erp_journals SET memo = 'edited'",
    "delete_journals": "DELETE FROM erp_journals",
    # a recost rewrites an item cost's figures (flows/erp/recost.py), never its key
    "update_item_costs": "UPDATE erp_item_costs SET item_id = item_id, cogs_value = 0",
    "delete_item_costs": "DELETE FROM erp_item_costs",
    "delete_documents": "DELETE FROM erp_documents",
    "update_document_memo": "UPDATE erp_documents SET memo = 'edited'",
    "update_document_lines": "UPDATE erp_document_lines SET debit = 0",
    "insert_document": (
        "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, issued_on)"
        " VALUES (99, 'X-99', 'sales_invoice', '2026-11', 1, 1, '2026-11-02')"
    ),
    "insert_account": "INSERT INTO erp_accounts VALUES ('9999', 'Worker', 'asset')",
    "close_period": "UPDATE erp_periods SET period = '2026-12'",
    "read_employees": "SELECT * FROM erp_employees",
    # the engine's own history and decisions
    "delete_events": "DELETE FROM engine_events",
    "update_events": "UPDATE engine_events SET detail = '{}'",
    "delete_jobs": "DELETE FROM engine_jobs",
    # it submits pending jobs (a schedule firing), never one already ended or started
    "insert_job_ended": (
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, status, finished_at)"
        " VALUES (gen_random_uuid(), 'x', 1, '{}', repeat('0', 64), 'done', now())"
    ),
    "insert_job_started": (
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, started_at)"
        " VALUES (gen_random_uuid(), 'x', 1, '{}', repeat('0', 64), now())"
    ),
    "update_schedule_calendar": "UPDATE engine_schedules SET cron = '* * * * *'",
    "update_schedule_params": "UPDATE engine_schedules SET params = '{}'",
    "delete_schedules": "DELETE FROM engine_schedules",
    "delete_schedule_fires": "DELETE FROM engine_schedule_fires",
    "insert_schedule": (
        "INSERT INTO engine_schedules (name, flow, cron, timezone, next_fire_at)"
        " VALUES ('x', 'x', '* * * * *', 'UTC', now())"
    ),
    "update_job_params": "UPDATE engine_jobs SET params = '{}'",
    "update_job_fingerprint": "UPDATE engine_jobs SET fingerprint = repeat('1', 64)",
    "delete_step_runs": "DELETE FROM engine_step_runs",
    "update_step_run_cap": "UPDATE engine_step_runs SET max_attempts = 100",
    "update_step_run_job": "UPDATE engine_step_runs SET job_id = job_id",
    "delete_outbox": "DELETE FROM engine_outbox",
    "delete_workers": "DELETE FROM engine_workers",
    "truncate_workers": "TRUNCATE engine_workers",
    "update_alerts": "UPDATE engine_alerts SET episode = now()",
    "delete_dead_letters": "DELETE FROM engine_dead_letters",
    "update_dead_letters": "UPDATE engine_dead_letters SET replayed_at = now()",
    "insert_migration": (
        "INSERT INTO engine_migrations (version, name, checksum) VALUES (9999, 'x', 'x')"
    ),
    "update_migrations": "UPDATE engine_migrations SET checksum = 'x'",
    "delete_migrations": "DELETE FROM engine_migrations",
    # ways around the above
    "skip_triggers": "SET session_replication_role = replica",
    "copy_to_program": "COPY erp_journal_lines TO PROGRAM 'cat'",
    "read_server_file": "SELECT pg_read_file('postgresql.conf')",
    "lock_journal_lines": "LOCK TABLE erp_journal_lines IN ACCESS EXCLUSIVE MODE",
}


@pytest.mark.usefixtures("books")
@pytest.mark.parametrize("case", sorted(FORBIDDEN))
def test_worker_role__refused(
    case: str, worker_conn: psycopg.Connection[Any], conn: psycopg.Connection[Any]
) -> None:
    before = _snapshot(conn)
    with pytest.raises(errors.InsufficientPrivilege), worker_conn.transaction():
        worker_conn.execute(FORBIDDEN[case])
    assert _snapshot(conn) == before


@pytest.mark.usefixtures("books")
def test_worker_role__temporary_tables_are_its_only_ddl(
    worker_conn: psycopg.Connection[Any],
) -> None:
    # the migration flow stages rows in temporary tables (flows/erp/sql/migration.sql)
    with worker_conn.transaction():
        worker_conn.execute("CREATE TEMP TABLE staged (n int) ON COMMIT DROP")
        worker_conn.execute("INSERT INTO staged VALUES (1)")
    row = worker_conn.execute(
        "SELECT has_schema_privilege(current_user, 'public', 'CREATE') AS create_public,"
        " has_database_privilege(current_user, current_database(), 'CREATE') AS create_schema"
    ).fetchone()
    assert row == {"create_public": False, "create_schema": False}


def _run_as_worker(worker_conn: psycopg.Connection[Any], path: str, name: str) -> None:
    """Plan the statement (EXPLAIN checks every privilege it needs) or run it, then roll back."""
    blocks = _blocks(path)
    statement = _statement(blocks[name])
    params = dict.fromkeys(_PARAM.findall(statement))
    with worker_conn.transaction(force_rollback=True):
        # statements of the file that read its temporary tables need them
        for other in blocks.values():
            if _statement(other).upper().startswith("CREATE TEMP TABLE"):
                worker_conn.execute(_statement(other))
        if statement.upper().startswith("ROLLBACK TO SAVEPOINT "):
            # back to a savepoint the worker set earlier in its transaction
            worker_conn.execute("SAVEPOINT " + statement.split()[-1].rstrip(";"))
        if statement.upper().startswith("COPY ") and "FROM STDIN" in statement.upper():
            with worker_conn.cursor().copy(statement):
                pass  # no rows: the privilege is checked when the COPY starts
        elif _EXPLAINABLE.match(statement):
            worker_conn.execute(f"EXPLAIN (COSTS OFF) {statement}", params)
        elif _COPY_IN.match(statement):
            # a stream in (the migration's staging): run as the flow does, with no rows
            with worker_conn.cursor() as cur, cur.copy(statement):
                pass
        elif not _statement(blocks[name]).upper().startswith("CREATE TEMP TABLE"):
            worker_conn.execute(statement, params)


@pytest.mark.parametrize(("path", "name"), WORKER_STATEMENTS, ids=lambda v: Path(v).stem)
def test_worker_role__may_run_every_worker_statement(
    path: str, name: str, worker_conn: psycopg.Connection[Any]
) -> None:
    _run_as_worker(worker_conn, path, name)


@pytest.mark.parametrize(("path", "name"), ADMIN_STATEMENTS, ids=lambda v: Path(v).stem)
def test_worker_role__refuses_statements_of_operators_and_the_migrator(
    path: str, name: str, worker_conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(errors.InsufficientPrivilege):
        _run_as_worker(worker_conn, path, name)


def test_worker_role__tables_created_later_are_append_only_for_it(
    conn: psycopg.Connection[Any],
) -> None:
    # ALTER DEFAULT PRIVILEGES of 0006: the tests' test_effects was created after it
    row = conn.execute(
        "SELECT has_table_privilege(%(r)s, 'test_effects', 'SELECT') AS s,"
        " has_table_privilege(%(r)s, 'test_effects', 'INSERT') AS i,"
        " has_table_privilege(%(r)s, 'test_effects', 'UPDATE') AS u,"
        " has_table_privilege(%(r)s, 'test_effects', 'DELETE') AS d,"
        " has_table_privilege(%(r)s, 'test_effects', 'TRUNCATE') AS t",
        {"r": ROLE},
    ).fetchone()
    assert row == {"s": True, "i": True, "u": False, "d": False, "t": False}


_ACLS = """
SELECT c.relname,
       (SELECT array_agg(e.privilege_type ORDER BY e.privilege_type)
          FROM aclexplode(c.relacl) AS e
         WHERE e.grantee = %(role)s::regrole) AS table_privileges,
       (SELECT array_agg(t.attname || ':' || e.privilege_type ORDER BY t.attname, e.privilege_type)
          FROM pg_attribute AS t, aclexplode(t.attacl) AS e
         WHERE t.attrelid = c.oid AND e.grantee = %(role)s::regrole) AS column_privileges
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'S') AND c.relname <> 'test_effects'
ORDER BY c.relname
"""


def _acls(info: str) -> list[dict[str, Any]]:
    with psycopg.connect(info, row_factory=psycopg.rows.dict_row) as c:
        return c.execute(_ACLS, {"role": ROLE}).fetchall()


def test_worker_grants__the_same_whatever_order_the_migrations_were_applied_in(
    empty_db: str, dbinfo: str, tmp_path: Path
) -> None:
    # a database migrated before 0006 and 1002 existed gets them after 1001,
    # a new one gets 0006 before 1001: the grants must not differ
    early = tmp_path / "early"
    early.mkdir()
    for path in sorted((ROOT / "migrations").glob("*.sql")):
        if path.name < "0006":
            shutil.copy(path, early)
    shutil.copy(ROOT / "flows" / "migrations" / "1001_erp.sql", early)
    with psycopg.connect(empty_db, autocommit=True) as c:
        migrations.apply(c, early)
        migrations.apply(c, Settings().migration_dirs)
    later = _acls(empty_db)
    assert later == _acls(dbinfo)
    by_table = {r["relname"]: r for r in later}
    assert by_table["erp_journal_lines"]["table_privileges"] == ["INSERT", "SELECT"]
    assert by_table["erp_journal_lines"]["column_privileges"] is None


def test_worker_role_migration__creating_the_role_is_idempotent_and_race_safe(
    pg_admin: str,
) -> None:
    # the creation block of 0006, for a role no database knows yet, run by
    # eight sessions at once (as xdist workers migrating templates do) and again
    text = (ROOT / "migrations" / "0006_worker_role.sql").read_text(encoding="utf-8")
    block = re.search(r"^DO \$\$.*?^\$\$;", text, re.DOTALL | re.MULTILINE)
    assert block is not None and ROLE in block[0]
    name = f"engine_worker_race_{uuid.uuid4().hex[:8]}"
    create = block[0].replace(ROLE, name)
    sessions = 8
    barrier = threading.Barrier(sessions)
    failures: list[BaseException] = []

    def migrate_one() -> None:
        try:
            with psycopg.connect(pg_admin) as c:
                barrier.wait(timeout=30)
                c.execute(create)
                c.execute("SELECT pg_sleep(0.1)")  # the winner commits late: losers wait on it
                c.commit()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=migrate_one) for _ in range(sessions)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not failures, failures
        with psycopg.connect(pg_admin, autocommit=True) as c:
            c.execute(create)  # once more, the role long there
            count = c.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (name,))
            row = count.fetchone()
            assert row == (1,)
            login = c.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (name,))
            assert login.fetchone() == (False,)
    finally:
        with psycopg.connect(pg_admin, autocommit=True) as c:
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_worker_role_migration__a_migrator_that_may_not_create_it_is_told_how(
    empty_db: str,
) -> None:
    # a login without CREATEROLE migrating a cluster that lacks the role
    text = (ROOT / "migrations" / "0006_worker_role.sql").read_text(encoding="utf-8")
    block = re.search(r"^DO \$\$.*?^\$\$;", text, re.DOTALL | re.MULTILINE)
    assert block is not None
    name = f"engine_worker_nope_{uuid.uuid4().hex[:8]}"
    plain = f"engine_test_plain_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_db, autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(plain)))
    try:
        with psycopg.connect(empty_db) as c:
            c.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(plain)))
            with pytest.raises(errors.RaiseException) as raised:
                c.execute(block[0].replace(ROLE, name))
            c.rollback()
    finally:
        with psycopg.connect(empty_db, autocommit=True) as c:
            c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(plain)))
    assert f"role {name} does not exist and {plain} may not create it" in str(raised.value)
    assert "CREATE ROLE" in (raised.value.diag.message_hint or "")
