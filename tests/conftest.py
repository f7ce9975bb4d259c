"""Real PostgreSQL for every test that touches data.

The server is the one the engine itself would use: ``ENGINE_DATABASE_URL``
when set, otherwise the embedded server in ``ENGINE_PGDATA``. A template
database is migrated once per session (per xdist worker); each test gets a
fresh ``CREATE DATABASE ... TEMPLATE`` copy and its own ``Settings``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from engine.config import Settings
from engine.store import db, migrations

SUPPORT = Path(__file__).parent / "support"
sys.path.insert(0, str(SUPPORT))  # flows and helpers of the runtime tests
sys.path.insert(0, str(Path(__file__).parent / "erp"))  # the costing reference

from testflows import EFFECTS_DDL  # noqa: E402


def _admin_conninfo() -> str:
    return db.conninfo(Settings())


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def create_database(admin: str, name: str, template: str | None = None) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if template is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        else:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
    return make_conninfo(admin, dbname=name)


def drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def settings_for(info: str, **overrides: Any) -> Settings:
    return Settings(database_url=SecretStr(info), **overrides)


@pytest.fixture(scope="session")
def pg_admin() -> str:
    """conninfo of a database on the test server from which databases are created."""
    return _admin_conninfo()


@pytest.fixture(scope="session")
def template_db(pg_admin: str) -> Iterator[str]:
    # the pid too: two pytest sessions on one server must not share a template
    name = f"engine_tpl_{_worker()}_{os.getpid()}"
    info = create_database(pg_admin, name)
    with psycopg.connect(info, autocommit=True) as conn:
        migrations.apply(conn, Settings().migration_dirs)
        conn.execute(EFFECTS_DDL)
    yield name
    drop_database(pg_admin, name)


@pytest.fixture
def empty_db(pg_admin: str) -> Iterator[str]:
    """conninfo of a new database with no tables at all."""
    name = f"engine_e_{_worker()}_{uuid.uuid4().hex[:8]}"
    info = create_database(pg_admin, name)
    yield info
    drop_database(pg_admin, name)


@pytest.fixture
def dbinfo(pg_admin: str, template_db: str) -> Iterator[str]:
    """conninfo of a new, migrated database for this test alone."""
    name = f"engine_t_{_worker()}_{uuid.uuid4().hex[:8]}"
    info = create_database(pg_admin, name, template=template_db)
    yield info
    drop_database(pg_admin, name)


@pytest.fixture
def settings(dbinfo: str) -> Settings:
    return settings_for(dbinfo)


@pytest.fixture
def conn(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection for arranging and checking rows."""
    with db.connect(settings, autocommit=True) as c:
        yield c


@pytest.fixture(scope="session")
def pgbouncer(pg_admin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PgBouncer in transaction pooling mode (2 server sessions per database) in front
    of the test server, for the whole session (per xdist worker): any test database is
    reachable through it with ``pgbouncer.url_for(dbname)`` (see ``tests/support/pooler.py``).
    """
    from pooler import PgBouncer

    with PgBouncer(pg_admin, tmp_path_factory.mktemp("pgbouncer"), pool_size=2) as bouncer:
        yield bouncer
