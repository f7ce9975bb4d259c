"""The two psycopg internals the engine follows, pinned: a psycopg that changes them fails here.

psycopg documents no hook for either (its documented knobs, ``prepare_threshold``,
``prepared_max`` and ``execute(prepare=...)``, say whether psycopg prepares, not
when it deallocates; nothing runs a statement after its ``BEGIN``), so the
engine follows two private methods and pyproject.toml pins psycopg to the
versions they were tested on (3.2 and 3.3):

- ``PrepareManager.clear()`` (``conn._prepared``): psycopg calls it on a
  rollback, a ``DROP``, an ``ALTER`` and returns true just before it sends
  ``DEALLOCATE ALL``, which drops the engine's own SQL-level prepared
  statements too (``engine.store.prepared``: the connection forgets them then);
- ``Connection._exec_command(command, result_format)`` with
  ``_get_tx_start_command()``: how psycopg sends ``BEGIN``, after which a
  connection behind a transaction pooler sets its bounds and role
  (``engine.store.pooler.PooledConnection``).

A direct connection here (no PgBouncer needed): the seams are psycopg's, not
the pooler's. ``tests/integration/test_pooler.py`` runs them behind PgBouncer.
"""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path
from typing import Any

import psycopg
from packaging.requirements import Requirement
from packaging.version import Version
from psycopg.types.json import Jsonb

from engine import store
from engine.config import Settings
from engine.store import db, pooler, prepared

ROOT = Path(__file__).resolve().parents[2]
ECHO = "-- seam echo --\nSELECT %(a)s::text AS a, %(b)s::jsonb AS b"


def _engine_statements(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM pg_prepared_statements WHERE name LIKE 'engine%%' ORDER BY name"
    )
    return [r["name"] for r in rows]


def _psycopg_statements(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_prepared_statements WHERE name LIKE '\\_pg3\\_%%'",
        prepare=False,
    ).fetchone()
    assert row is not None
    return int(row["n"])


def _echo(conn: psycopg.Connection[Any], text: str) -> Any:
    with conn.transaction():
        batch = store.Batch(conn)
        reply = batch.execute(ECHO, {"a": text, "b": Jsonb([text])})
        batch.send()
    return reply.fetchone()


def test_psycopg__the_installed_version_is_one_pyproject_pins() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [Requirement(d) for d in project["project"]["dependencies"]]
    (pin,) = [r for r in pins if r.name == "psycopg"]
    assert pin.specifier.contains(Version(psycopg.__version__)), (psycopg.__version__, pin)
    # an upper bound: a release nobody tested cannot be installed by accident
    assert any(s.operator == "<" for s in pin.specifier), pin


def test_psycopg_seam__prepare_manager_clear_and_exec_command_keep_their_signatures() -> None:
    conn_class = psycopg.Connection
    assert list(inspect.signature(conn_class._exec_command).parameters) == [
        "self",
        "command",
        "result_format",
    ]
    assert list(inspect.signature(conn_class._get_tx_start_command).parameters) == ["self"]
    assert pooler.HOOKABLE
    from psycopg._preparing import PrepareManager

    assert list(inspect.signature(PrepareManager.clear).parameters) == ["self"]


def test_psycopg_seam__its_deallocate_all_after_a_rollback_is_followed_by_the_engine(
    settings: Settings,
) -> None:
    with db.connect(settings, autocommit=True) as conn:
        assert conn.prepare_threshold is not None  # a direct connection: psycopg prepares too
        manager = conn._prepared
        assert manager.clear.__name__ == "clear_and_forget", "the engine's hook is installed"
        assert _echo(conn, "one") == {"a": "one", "b": ["one"]}
        assert _engine_statements(conn) == [prepared.statement(ECHO).name]
        # psycopg prepares a statement of its own, then a rollback: it sends DEALLOCATE ALL
        conn.execute("SELECT 1 AS one", prepare=True)
        assert _psycopg_statements(conn) == 1
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT 2 AS two")
        assert _psycopg_statements(conn) == 0, "psycopg no longer deallocates after a rollback"
        assert _engine_statements(conn) == [], "DEALLOCATE ALL took the engine's statements"
        # the engine forgot them with psycopg: prepared again, no missing statement, no error
        assert _echo(conn, "two") == {"a": "two", "b": ["two"]}
        assert _engine_statements(conn) == [prepared.statement(ECHO).name]
        assert prepared._session(conn).enabled


def test_psycopg_seam__each_transaction_of_a_pooled_connection_begins_with_its_settings(
    dbinfo: str,
) -> None:
    for autocommit in (False, True):
        with pooler.PooledConnection.connect(
            dbinfo,
            autocommit=autocommit,
            prepare_threshold=None,
            cursor_factory=pooler.PooledCursor,
            row_factory=psycopg.rows.dict_row,
        ) as conn:
            conn._set_local = pooler.set_local(conn, [("lock_timeout", "1234ms")])
            got = "SELECT current_setting('lock_timeout') AS lock"
            with conn.transaction():  # BEGIN sent by conn.transaction()
                assert conn.execute(got).fetchone() == {"lock": "1234ms"}
            # a statement outside a block: psycopg's implicit BEGIN, or (autocommit) the
            # transaction PooledCursor gives it; both go through _exec_command
            assert conn.execute(got).fetchone() == {"lock": "1234ms"}, autocommit
            if not autocommit:
                conn.rollback()
            # and the session itself kept its own setting: SET LOCAL ended with the transaction
            conn._set_local = b""
            with conn.transaction():
                assert conn.execute(got).fetchone() != {"lock": "1234ms"}
