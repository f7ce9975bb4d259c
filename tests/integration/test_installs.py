"""The API install (``pip install erp-engine``): submitting needs none of the worker's extra.

A child process refuses to import every library of the ``worker`` and
``dev`` extras (an import blocker on ``sys.meta_path``), then does what the
ERP's API does: imports ``engine`` and every flow module, and submits a job
in the caller's transaction on real PostgreSQL, or in its own and relayed to
SQS at once (moto's server on 127.0.0.1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
from sqs_support import AWS_ENV, REGION, moto_server, queue_name

from engine.config import Settings
from engine.store.db import EMBEDDED_MISSING
from engine.transports.sqs import SqsSettings
from engine.transports.sqs_queues import create_queues

# CI runs these on the embedded server too: the API install reaches it without pgserver
pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parents[2]
# import names of the worker and dev extras' libraries (and what they pull in)
BLOCKED = [
    "sqlmodel",
    "sqlalchemy",
    "jinja2",
    "markupsafe",
    "rich",
    "pygments",
    "markdown_it",
    "tenacity",
    "prometheus_client",
    "starlette",
    "uvicorn",
    "itsdangerous",
    "python_multipart",
    "multipart",
    "argon2",
    "jwt",
    "cryptography",
    "pgserver",
    "moto",
    "pytest",
]

CHILD = textwrap.dedent(
    """
    import importlib.abc, json, sys

    BLOCKED = set(sys.argv[1].split(","))
    IN_CALLERS_TRANSACTION = sys.argv[2] == "conn"

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"blocked: {name} (not in the API install)", name=name)
            return None

    sys.meta_path.insert(0, Blocker())

    import engine
    from engine import ConfigError, Registry, Settings, connect, submit

    settings = Settings()
    registry = Registry.load(settings.flow_modules)  # every flow module of the ERP
    if IN_CALLERS_TRANSACTION:  # as the ERP's request does: workers relay after its commit
        with connect(settings) as conn:
            job = submit("example", {"period": "2026-11"}, conn=conn, settings=settings)
            conn.commit()
    else:  # the engine's own transaction, relayed by this process at once
        job = submit("example", {"period": "2026-11"}, settings=settings)
    try:
        connect(Settings(database_url=None, pgdata="/nonexistent/pgdata"))
        embedded = "started"
    except ConfigError as exc:
        embedded = str(exc)
    loaded = sorted({m.partition(".")[0] for m in sys.modules} & BLOCKED)
    print(json.dumps({
        "job_id": str(job.job_id), "created": job.created, "flows": registry.names(),
        "embedded": embedded, "loaded": loaded,
    }))
    """
)


def submit_without_worker_extra(settings: Settings, mode: str, **env: str) -> dict[str, Any]:
    assert settings.database_url is not None
    child_env = {
        "PATH": "/usr/bin:/bin",
        "ENGINE_DATABASE_URL": settings.database_url.get_secret_value(),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(BLOCKED), mode],
        env=child_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_api_install__extras_are_what_the_blocker_blocks() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    worker = {_import_name(r) for r in extras["optional-dependencies"]["worker"]}
    assert worker <= set(BLOCKED)
    assert "pgserver" in {_import_name(r) for r in extras["optional-dependencies"]["dev"]}
    base = {_import_name(r) for r in extras["dependencies"]}
    assert not base & set(BLOCKED), "the API install must not carry worker or dev libraries"


# distributions whose import name is another
_IMPORTED_AS = {"argon2_cffi": "argon2", "pyjwt": "jwt"}


def _import_name(requirement: str) -> str:
    name = requirement.split(">")[0].split("[")[0].split("=")[0].strip().lower()
    name = name.replace("-", "_")
    return _IMPORTED_AS.get(name, name)


def test_api_install__submits_on_postgres_without_worker_extra(
    settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    out = submit_without_worker_extra(settings, "conn", ENGINE_TRANSPORT="postgres")
    assert out["created"] is True
    assert out["loaded"] == []
    assert {"close", "costing", "example", "migration", "posting"} <= set(out["flows"])
    assert out["embedded"] == EMBEDDED_MISSING
    row = conn.execute(
        "SELECT count(*) AS n FROM engine_queue q JOIN engine_step_runs s "
        "ON q.body::jsonb ->> 'step_run_id' = s.id::text WHERE s.job_id = %s",
        (out["job_id"],),
    ).fetchone()
    assert row is not None and row["n"] == 1  # its first message, written in the same commit


@pytest.mark.parametrize(
    ("mode", "unpublished"),
    [
        # its own transaction: this process relays the message at once
        ("own", 0),
        # a psycopg caller's commit cannot be hooked: the outbox row waits for the
        # workers' relay (woken by NOTIFY), and nothing of SQLAlchemy is imported
        ("conn", 1),
    ],
)
def test_api_install__submits_on_sqs_without_worker_extra(
    settings: Settings,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    unpublished: int,
) -> None:
    with moto_server() as endpoint:
        for name, value in AWS_ENV.items():
            monkeypatch.setenv(name, value)
        client = boto3.client("sqs", region_name=REGION, endpoint_url=endpoint)
        made = create_queues(SqsSettings(), visibility_s=60, name=queue_name("api"), client=client)
        out = submit_without_worker_extra(
            settings,
            mode,
            ENGINE_TRANSPORT="sqs",
            ENGINE_SQS_QUEUE_URL=made.url,
            AWS_ENDPOINT_URL=endpoint,
            **AWS_ENV,
        )
        received = client.receive_message(QueueUrl=made.url, MaxNumberOfMessages=10)
    assert out["loaded"] == []
    bodies = [json.loads(m["Body"]) for m in received.get("Messages", [])]
    assert [b["job_id"] for b in bodies] == ([out["job_id"]] if unpublished == 0 else [])
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE o.published_at IS NULL) AS unpublished "
        "FROM engine_outbox o JOIN engine_step_runs s ON s.id = o.step_run_id "
        "WHERE s.job_id = %s",
        (out["job_id"],),
    ).fetchone()
    assert row is not None and row["unpublished"] == unpublished


CLI_CHILD = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    sys.argv = ["engine", "status"]
    from engine.cli import main
    main()
    """
)


def test_api_install__the_engine_command_names_what_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLI_CHILD, ",".join(BLOCKED)],
        env={"PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "pip install 'erp-engine[worker]'" in done.stderr
    assert "Traceback" not in done.stderr
