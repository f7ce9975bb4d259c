"""Real PostgreSQL for every test that touches data.

The server is the one the engine itself would use: ``ENGINE_DATABASE_URL``
when set, otherwise the embedded server in ``ENGINE_PGDATA``. A template
database is migrated once per session (per xdist worker); each test gets a
database copied from it and its own ``Settings``. The copies are pooled per
worker and reset between tests (``tests/support/dbpool.py``): a test that
changes the schema, a grant or the database's settings gets its database
dropped after it instead, and tests that need a database of their own
(``empty_db``, migrations) still create one.
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

from dbpool import DatabasePool, pool_prefix  # noqa: E402
from groups import group_by_shared_server  # noqa: E402
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
        # A commit waits for its WAL flush, 2-12 ms on this machine's disk, and
        # the suite commits hundreds of thousands of times. No test crashes the
        # server (workers are killed, never PostgreSQL), so an acknowledged
        # commit is never lost here either way: the flush is only waited for.
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name))
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


@pytest.fixture(scope="session")
def db_pool(pg_admin: str, template_db: str) -> Iterator[DatabasePool]:
    """This worker's migrated databases, reset between tests (see ``tests/support/dbpool.py``)."""
    pool = DatabasePool(
        pg_admin, template_db, pool_prefix(_worker()), create_database, drop_database
    )
    yield pool
    pool.close()


@pytest.fixture
def dbinfo(db_pool: DatabasePool) -> Iterator[str]:
    """conninfo of a migrated database that only this test uses while it runs
    (as fresh as a new copy of the template: rows, sequences and schema)."""
    name = db_pool.acquire()
    yield db_pool.info(name)
    db_pool.release(name)


@pytest.fixture
def settings(dbinfo: str) -> Settings:
    return settings_for(dbinfo)


@pytest.fixture
def conn(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection for arranging and checking rows."""
    with db.connect(settings, autocommit=True) as c:
        yield c


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One PgBouncer and one Chromium per run: the tests that use the session's
    ``pgbouncer`` or ``browser`` run on one xdist worker each (``--dist loadgroup``)."""
    group_by_shared_server(items)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the run, driven by Playwright (every browser test)."""
    from browser import CHROMIUM_MISSING, find_chromium
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        pytest.fail(CHROMIUM_MISSING)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def pgbouncer(pg_admin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PgBouncer in transaction pooling mode (2 server sessions per database) in front
    of the test server, for the whole run (its tests share one xdist worker): any test database is
    reachable through it with ``pgbouncer.url_for(dbname)`` (see ``tests/support/pooler.py``).
    """
    from pooler import PgBouncer

    with PgBouncer(pg_admin, tmp_path_factory.mktemp("pgbouncer"), pool_size=2) as bouncer:
        yield bouncer


@pytest.fixture
def spans() -> Iterator[Any]:
    """Traces on for the test, its spans collected by the SDK's in-memory exporter (the
    tracing tests; OpenTelemetry is imported only by the tests that ask for it)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from engine import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()
