"""The audit trail's hash chain and its writers (migration 0026, issue 34 item 4).

Tampering is done the way the table's owner can: in one transaction, disable
the append-only trigger, change the rows, enable it again. Verify must name
the first entry deleted, changed or reordered. The roles are real PostgreSQL
roles taken as the console and the worker take them (``-c role=``), and a
separate login that is only a member of ``engine_console``.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from engine import BadInput, record_action
from engine.config import Settings
from engine.jobs.audit import GENESIS, entry_hash, verify_chain
from engine.store import db

OWNER_TAMPERS = (
    "ALTER TABLE engine_audit DISABLE TRIGGER engine_audit_no_update_delete",
    "{}",
    "ALTER TABLE engine_audit ENABLE TRIGGER engine_audit_no_update_delete",
)


def _record(conn: psycopg.Connection[Any], n: int, **kw: Any) -> list[int]:
    ids = []
    for i in range(n):
        entry = record_action(
            conn, "close", "period", f"2026-{i + 1:02d}", actor=f"ann{i}", detail={"i": i}, **kw
        )
        ids.append(entry.id)
    return ids


def _tamper(conn: psycopg.Connection[Any], statement: str, params: Any = None) -> None:
    """What the table's owner can do: trigger off, change, trigger on, in one transaction."""
    with conn.transaction():
        conn.execute(OWNER_TAMPERS[0])
        conn.execute(statement, params)
        conn.execute(OWNER_TAMPERS[2])


def _seq_of(conn: psycopg.Connection[Any], entry_id: int) -> int:
    row = conn.execute("SELECT seq FROM engine_audit WHERE id = %s", (entry_id,)).fetchone()
    assert row is not None
    return int(row["seq"])


def test_audit_chain__an_intact_trail_verifies_with_its_count_and_head(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    assert verify_chain(settings).head_hash == GENESIS
    _record(conn, 3)
    report = verify_chain(settings)
    assert report.ok, report.problems
    head = conn.execute("SELECT seq, hash FROM engine_audit_head").fetchone()
    assert (report.count, report.head_seq, report.head_hash) == (3, 3, head and head["hash"])
    # the Python hash agrees with the trigger's, entry by entry
    rows = conn.execute(
        "SELECT prev_hash, hash, engine_audit_canonical(a) AS c FROM engine_audit a ORDER BY seq"
    ).fetchall()
    assert [entry_hash(r["prev_hash"], r["c"]) for r in rows] == [r["hash"] for r in rows]
    assert rows[0]["prev_hash"] == GENESIS
    assert [r["prev_hash"] for r in rows[1:]] == [r["hash"] for r in rows[:-1]]


def test_audit_chain__the_owners_delete_with_the_trigger_disabled_is_named(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    ids = _record(conn, 4)
    _tamper(conn, "DELETE FROM engine_audit WHERE id = %s", (ids[1],))
    report = verify_chain(settings)
    assert not report.ok and report.first_bad == 2
    assert report.problems[0].startswith("entry #2 deleted: the chain goes from #1")


def test_audit_chain__a_deleted_last_entry_is_named_by_the_head(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    ids = _record(conn, 3)
    _tamper(conn, "DELETE FROM engine_audit WHERE id = %s", (ids[-1],))
    report = verify_chain(settings)
    assert report.first_bad == 3
    assert report.problems == (
        f"entry #3 deleted: the head records #3 (id {ids[-1]}), the chain ends at #2",
    )


def test_audit_chain__a_changed_entry_is_named(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    ids = _record(conn, 3)
    _tamper(conn, "UPDATE engine_audit SET actor = 'mallory' WHERE id = %s", (ids[1],))
    report = verify_chain(settings)
    assert report.first_bad == 2
    assert report.problems == (
        f"entry #2 (id {ids[1]}) changed or moved: its content no longer matches its hash",
    )


def test_audit_chain__a_changed_and_rehashed_entry_is_named_by_the_next_link(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    ids = _record(conn, 3)
    _tamper(
        conn,
        "UPDATE engine_audit AS a SET detail = '{\"i\": 99}',"
        " hash = encode(sha256(convert_to(a.prev_hash || engine_audit_canonical("
        "   ROW(a.id, a.at, a.actor, a.source, a.action, a.target_kind, a.target_id, a.job_id,"
        "       a.reason, '{\"i\": 99}'::jsonb, a.seq, a.prev_hash, a.hash)::engine_audit),"
        "   'UTF8')), 'hex') WHERE id = %s",
        (ids[0],),
    )
    report = verify_chain(settings)
    assert report.first_bad == 1
    assert report.problems[0].startswith(f"entry #1 (id {ids[0]}) changed or replaced")


def test_audit_chain__reordered_entries_are_named(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    ids = _record(conn, 4)
    # swap the positions of the 2nd and 3rd entries
    _tamper(
        conn,
        "UPDATE engine_audit SET seq = CASE id WHEN %(a)s THEN -3 ELSE -2 END"
        " WHERE id IN (%(a)s, %(b)s)",
        {"a": ids[1], "b": ids[2]},
    )
    _tamper(conn, "UPDATE engine_audit SET seq = -seq WHERE seq < 0")
    report = verify_chain(settings)
    assert report.first_bad == 2
    assert report.problems[0].startswith(f"entry #2 (id {ids[2]}) changed, moved or replaced")


def test_audit_chain__an_entry_written_with_the_chain_off_is_named(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    _record(conn, 2)
    with conn.transaction():
        conn.execute("ALTER TABLE engine_audit DISABLE TRIGGER engine_audit_chain")
        row = conn.execute(
            "INSERT INTO engine_audit (actor, source, action, target_kind)"
            " VALUES ('mallory', 'cli', 'purge', 'dead_letters') RETURNING id"
        ).fetchone()
        conn.execute("ALTER TABLE engine_audit ENABLE TRIGGER engine_audit_chain")
    assert row is not None
    report = verify_chain(settings)
    assert report.problems == (
        f"entry id {row['id']} is not in the chain (written with the chain's trigger disabled)",
    )


def test_audit_chain__a_whole_rewrite_passes_only_without_the_kept_head(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    ids = _record(conn, 3)
    kept = verify_chain(settings).head_hash
    _record(conn, 1)
    assert verify_chain(settings, expect_head=kept).ok  # the chain grew past the kept head
    # the owner deletes the first entry and rebuilds the chain and the head consistently
    with conn.transaction():
        conn.execute(OWNER_TAMPERS[0])
        conn.execute("DELETE FROM engine_audit WHERE id = %s", (ids[0],))
        # renumbered through negatives: one UPDATE of seq - 1 meets the unique index
        # row by row, in storage order, which need not be seq order
        conn.execute("UPDATE engine_audit SET seq = -seq")
        conn.execute("UPDATE engine_audit SET seq = -seq - 1")
        prev = GENESIS
        for r in conn.execute(
            "SELECT id, engine_audit_canonical(a) AS c FROM engine_audit a ORDER BY seq"
        ).fetchall():
            h = entry_hash(prev, r["c"])
            conn.execute(
                "UPDATE engine_audit SET prev_hash = %s, hash = %s WHERE id = %s",
                (prev, h, r["id"]),
            )
            prev = h
        conn.execute("UPDATE engine_audit_head SET seq = seq - 1, hash = %s", (prev,))
        conn.execute(OWNER_TAMPERS[2])
    assert verify_chain(settings).ok
    report = verify_chain(settings, expect_head=kept)
    assert report.problems == (
        f"the head hash you kept ({kept}) is not in the chain: the trail was rewritten or "
        "cut short since",
    )
    with pytest.raises(BadInput, match="64 hexadecimal digits"):
        verify_chain(settings, expect_head="abc")


def test_audit_chain__the_hash_does_not_depend_on_the_sessions_settings(
    dbinfo: str, settings: Settings
) -> None:
    odd = "-c TimeZone=Pacific/Chatham -c DateStyle=ISO,DMY -c extra_float_digits=-5"
    other = Settings(database_url=SecretStr(make_conninfo(dbinfo, options=odd)))
    with db.connect(other, autocommit=True) as c:
        record_action(
            c, "close", "period", "x", actor="ann", detail={"r": 0.1, "z": [1e-7], "é": "ü"}
        )
    assert verify_chain(settings).ok
    assert verify_chain(other).ok


def test_audit_chain__concurrent_writers_stay_one_linear_chain(settings: Settings) -> None:
    writers = 8
    barrier = threading.Barrier(writers)
    failures: list[BaseException] = []

    def write(i: int) -> None:
        try:
            with db.connect(settings) as c, c.transaction():
                # the action's own lock first, as a cancel takes its job row
                c.execute("SELECT pg_advisory_xact_lock(%s)", (1000 + i,))
                record_action(c, "cancel", "job", str(i), actor=f"w{i}")
                barrier.wait(timeout=30)  # every writer has its entry, none committed
                c.execute("SELECT pg_advisory_xact_lock(%s)", (2000 + i,))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures
    report = verify_chain(settings)
    assert report.ok, report.problems
    assert report.count == writers


# -- who may write what ---------------------------------------------------------------------


@pytest.fixture
def console_conn(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    with db.connect(settings.model_copy(update={"session_role": "engine_console"})) as c:
        yield c


@pytest.fixture
def worker_conn(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    with db.connect(settings.model_copy(update={"session_role": "engine_worker"})) as c:
        yield c


def _entry(conn: psycopg.Connection[Any], **kw: Any) -> None:
    values = {"actor": "ann", "source": "console", "job_id": None, **kw}
    conn.execute(
        "INSERT INTO engine_audit (actor, source, action, target_kind, job_id)"
        " VALUES (%(actor)s, %(source)s, 'cancel', 'job', %(job_id)s)",
        values,
    )


TAMPERING = {
    "disable_trigger": "ALTER TABLE engine_audit DISABLE TRIGGER engine_audit_no_update_delete",
    "disable_all_triggers": "ALTER TABLE engine_audit DISABLE TRIGGER ALL",
    "delete": "DELETE FROM engine_audit",
    "update": "UPDATE engine_audit SET actor = 'mallory'",
    "truncate": "TRUNCATE engine_audit",
    "rewrite_head": "UPDATE engine_audit_head SET seq = 0",
    "drop_chain": "DROP TRIGGER engine_audit_chain ON engine_audit",
    "replace_function": (
        "CREATE OR REPLACE FUNCTION engine_audit_chain() RETURNS trigger"
        " LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'"
    ),
    "skip_triggers": "SET session_replication_role = replica",
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_audit_roles__the_console_cannot_tamper_with_the_trail(
    case: str, console_conn: psycopg.Connection[Any], conn: psycopg.Connection[Any]
) -> None:
    _record(conn, 2)
    with pytest.raises(errors.InsufficientPrivilege), console_conn.transaction():
        console_conn.execute(TAMPERING[case])
    assert conn.execute("SELECT count(*) AS n FROM engine_audit").fetchone() == {"n": 2}


def test_audit_roles__a_login_of_the_console_role_writes_console_entries_only(
    dbinfo: str, pg_admin: str, settings: Settings
) -> None:
    login = "engine_test_console_login"
    with psycopg.connect(pg_admin, autocommit=True) as admin:
        with contextlib.suppress(errors.DuplicateObject, errors.UniqueViolation):
            admin.execute(f"CREATE ROLE {login} LOGIN")
        admin.execute(f"GRANT engine_console TO {login}")
    as_login = Settings(database_url=SecretStr(make_conninfo(dbinfo, user=login)))
    with db.connect(as_login) as c:
        assert c.execute("SELECT current_user AS u").fetchone() == {"u": login}
        with c.transaction():
            _entry(c, source="console")  # inherited from engine_console
        for source in ("cli", "api"):
            with (
                pytest.raises(errors.InsufficientPrivilege, match="source console only"),
                c.transaction(),
            ):
                _entry(c, source=source)
        with pytest.raises(errors.InsufficientPrivilege), c.transaction():
            c.execute("DELETE FROM engine_audit")
    assert verify_chain(settings).count == 1


def _job(
    conn: psycopg.Connection[Any], submitted_by: str | None, status: str = "running"
) -> uuid.UUID:
    job = uuid.uuid4()
    conn.execute(
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, submitted_by,"
        " status, started_at, finished_at) VALUES (%s, 'close', 1, '{}', %s, %s, %s, now(),"
        " CASE WHEN %s THEN now() END)",
        (job, uuid.uuid4().hex * 2, submitted_by, status, status == "done"),
    )
    return job


def test_audit_roles__the_worker_writes_only_for_its_job_as_its_submitter(
    worker_conn: psycopg.Connection[Any], conn: psycopg.Connection[Any], settings: Settings
) -> None:
    job = _job(conn, "ann@erp")
    anonymous = _job(conn, None)
    with worker_conn.transaction():
        _entry(worker_conn, source="api", actor="ann@erp", job_id=job)
        _entry(worker_conn, source="api", actor=f"job {job}", job_id=job)
        _entry(worker_conn, source="api", actor=f"job {anonymous}", job_id=anonymous)
    refused = {
        "as_console": {"source": "console", "actor": "ann@erp", "job_id": job},
        "as_cli": {"source": "cli", "actor": "ann@erp", "job_id": job},
        "in_anothers_name": {"source": "api", "actor": "admin", "job_id": job},
        "as_another_job": {"source": "api", "actor": f"job {anonymous}", "job_id": job},
        "without_a_job": {"source": "api", "actor": "ann@erp", "job_id": None},
        "for_an_ended_job": {
            "source": "api",
            "actor": "ann@erp",
            "job_id": _job(conn, "ann@erp", "done"),
        },
        "for_no_such_job": {"source": "api", "actor": "ann@erp", "job_id": uuid.uuid4()},
    }
    for case, values in refused.items():
        with pytest.raises(errors.InsufficientPrivilege), worker_conn.transaction():  # noqa: PT012
            _entry(worker_conn, **values)
            pytest.fail(f"{case} was written")
    assert verify_chain(settings).count == 3


def test_audit_roles__the_worker_cannot_make_up_a_submitter_to_write_in_their_name(
    worker_conn: psycopg.Connection[Any], conn: psycopg.Connection[Any]
) -> None:
    insert = (
        "INSERT INTO engine_jobs (id, flow, flow_version, params, fingerprint, submitted_by,"
        " parent_job_id, parent_step_run_id, child_key)"
        " VALUES (gen_random_uuid(), 'x', 1, '{}', %(fp)s, %(by)s, %(parent)s, %(step)s, %(key)s)"
    )
    parent = _job(conn, "ann@erp")
    step = uuid.uuid4()
    conn.execute(
        "INSERT INTO engine_step_runs (id, job_id, step, fingerprint, max_attempts)"
        " VALUES (%s, %s, 'a', repeat('0', 64), 1)",
        (step, parent),
    )
    conn.execute(
        "INSERT INTO engine_schedules (name, flow, cron, timezone, next_fire_at)"
        " VALUES ('nightly', 'x', '0 2 * * *', 'UTC', now())"
    )
    none = {"parent": None, "step": None, "key": None}
    child = {"parent": parent, "step": step, "key": "0"}
    with worker_conn.transaction(force_rollback=True):
        worker_conn.execute(insert, {"fp": "a" * 64, "by": "schedule nightly", **none})
        worker_conn.execute(insert, {"fp": "b" * 64, "by": f"job {parent}", **child})
    for by, where in (
        ("ann@erp", none),
        ("schedule other", none),
        ("ann@erp", child),
        (None, none),
    ):
        with pytest.raises(errors.InsufficientPrivilege), worker_conn.transaction():
            worker_conn.execute(insert, {"fp": "c" * 64, "by": by, **where})


def test_audit_chain__an_entry_written_before_the_actions_last_lock_does_not_deadlock(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    # T1 records its entry, then waits for a row T2 holds; T2 records its own entry and
    # commits. Had the chain's lock been taken at the insert (a BEFORE trigger), T1
    # would hold it while waiting for T2, and T2 wait for it: a deadlock.
    job = _job(conn, "ann@erp")
    t2_holds, t1_failed = threading.Event(), []

    def t1() -> None:
        try:
            with db.connect(settings) as c, c.transaction():
                t2_holds.wait(timeout=30)
                record_action(c, "cancel", "job", "1", actor="one")
                c.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (job,))
        except BaseException as exc:
            t1_failed.append(exc)

    first = threading.Thread(target=t1)
    first.start()
    with db.connect(settings) as c2, c2.transaction():
        c2.execute("SELECT 1 FROM engine_jobs WHERE id = %s FOR UPDATE", (job,))
        t2_holds.set()
        # until T1 waits for the row (its entry written), seen in pg_locks
        for _ in range(3000):
            waiting = conn.execute(
                "SELECT count(*) AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                " WHERE NOT l.granted AND a.datname = current_database()"
            ).fetchone()
            if waiting and waiting["n"]:
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("T1 never waited for the row")
        record_action(c2, "retry", "job", "2", actor="two")
    first.join(timeout=60)
    assert not t1_failed
    report = verify_chain(settings)
    assert report.ok and report.count == 2
    actors = conn.execute("SELECT actor FROM engine_audit ORDER BY seq").fetchall()
    assert [a["actor"] for a in actors] == ["two", "one"]
