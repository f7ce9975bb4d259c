"""No secret in a log, a report or an error message (../shared/RELIABILITY.md).

The database password and the AWS keys are canaries: the test server trusts
local connections, so a URL carrying a password still connects, and moto
accepts any AWS keys. Worker output (at DEBUG, the most talkative level),
every file under the reports folder, and the output of CLI commands that
fail (a malformed URL, a refused connection, an unknown database, an
unreachable SQS endpoint) are searched for each canary.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from cli_zygote import run_engine
from harness import (
    FAST,
    ROOT,
    SUPPORT,
    flows_registry,
    wait_job_ended,
    wait_until,
)
from psycopg.conninfo import conninfo_to_dict
from pydantic import SecretStr
from sqs_support import fast_moto_clock, moto_server, queue_name, server_env

from engine import submit
from engine.config import Settings
from engine.transports.sqs import SqsSettings, SqsTransport
from engine.transports.sqs_queues import create_queues
from engine.worker.processes import settings_env, start_worker

pytestmark = pytest.mark.acceptance

_TOKEN = uuid.uuid4().hex
PASSWORD = f"pw-CANARY-{_TOKEN[:12]}"
AWS_KEY_ID = f"AKIACANARY{_TOKEN[:10].upper()}"
AWS_SECRET = f"CANARY+secret/{_TOKEN}"
SECRETS = {"database password": PASSWORD, "AWS key id": AWS_KEY_ID, "AWS secret": AWS_SECRET}


def assert_no_secret(where: str, text: str) -> None:
    found = [name for name, value in SECRETS.items() if value in text]
    assert not found, f"{', '.join(found)} in {where}"


def url_with_password(dbinfo: str, **changes: str) -> str:
    """``postgresql://user:PASSWORD@/db?host=...&port=...`` for the test's database."""
    parts = {k: str(v) for k, v in conninfo_to_dict(dbinfo).items()}
    parts.update(changes)
    query = f"host={quote(parts['host'], safe='')}"
    if parts.get("port"):
        query += f"&port={parts['port']}"
    return f"postgresql://{quote(parts['user'])}:{PASSWORD}@/{parts['dbname']}?{query}"


@pytest.fixture
def canary_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Canary AWS keys here and, through os.environ, in every child process.

    boto3 is pointed at a closed port of 127.0.0.1 unless a test starts moto.
    """
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def child_env(url: str, **overrides: Any) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT)]),
        **settings_env(database_url=url, **{**FAST, **overrides}),
    }


class Worker:
    """``engine worker`` at DEBUG, its output in a file (a pipe nobody reads would fill up)."""

    def __init__(self, log: Path, url: str, **overrides: Any) -> None:
        self.log = log
        self.proc = start_worker(env=child_env(url, **overrides), output=log, log_level="DEBUG")

    def stop(self) -> str:
        """SIGTERM (SIGKILL if it does not end); everything it wrote."""
        self.proc.stop(grace_s=30)
        return self.proc.output()


def engine(url: str, *args: str, timeout: float = 60, **overrides: Any) -> tuple[int, str]:
    result = run_engine(args, env=child_env(url, **overrides), timeout=timeout)
    return result.returncode, result.stdout + result.stderr


def files_under(folder: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            yield path, path.read_text(encoding="utf-8", errors="replace")


def run_jobs(url: str, conn: psycopg.Connection[Any], publisher: Any = None) -> list[uuid.UUID]:
    """One job that succeeds and one that fails for good (its traceback reaches the report)."""
    settings = Settings(database_url=SecretStr(url), **FAST)
    jobs = [
        submit(
            "chain", {"n": 1}, settings=settings, registry=flows_registry(), publisher=publisher
        ),
        submit(
            "chain",
            {"n": 2, "fail_times": 99},
            settings=settings,
            registry=flows_registry(),
            publisher=publisher,
        ),
    ]
    ended = [wait_job_ended(conn, job.job_id, timeout=90) for job in jobs]
    assert ended == ["done", "failed"]
    return [job.job_id for job in jobs]


@pytest.mark.usefixtures("canary_env")
def test_secrets__worker_logs_and_reports_on_the_postgres_transport(
    dbinfo: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    url = url_with_password(dbinfo)
    reports = tmp_path / "reports"
    worker = Worker(
        tmp_path / "worker.log", url, report_on_end=True, reports_dir=reports, max_attempts=2
    )
    try:
        job_ids = run_jobs(url, conn)
    finally:
        output = worker.stop()
    assert "***" in output, "the worker names its (masked) database"
    assert_no_secret("the worker's output", output)
    for job_id in job_ids:
        assert (reports / "runs" / f"{job_id}.html").is_file()
    code, built = engine(url, "reports", "build", "--out", str(tmp_path / "built"))
    assert code == 0, built
    assert_no_secret("engine reports build", built)
    for code_args in (["status", "--json"], ["runs", "--json"], ["dlq", "list", "--json"]):
        code, shown = engine(url, *code_args)
        assert code == 0, shown
        assert_no_secret(f"engine {' '.join(code_args)}", shown)
    scanned = 0
    for folder in (reports, tmp_path / "built"):
        for path, text in files_under(folder):
            assert_no_secret(str(path), text)
            scanned += 1
    assert scanned >= 4


@pytest.mark.usefixtures("canary_env")
def test_secrets__worker_logs_on_the_sqs_transport(
    dbinfo: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = url_with_password(dbinfo)
    fast_moto_clock(monkeypatch)
    with moto_server() as endpoint, server_env(monkeypatch, endpoint):
        # server_env set moto's usual keys: the canaries go back on top
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        name = queue_name("secrets")
        code, created = engine(url, "queues", "create", "--name", name)
        assert code == 0, created
        assert_no_secret("engine queues create", created)
        made = create_queues(SqsSettings(), visibility_s=60, name=name)
        publisher = SqsTransport(SqsSettings(queue_url=made.url))
        overrides = {"transport": "sqs", "sqs_queue_url": made.url, "max_attempts": 2}
        worker = Worker(tmp_path / "worker.log", url, **overrides)
        try:
            run_jobs(url, conn, publisher)
        finally:
            output = worker.stop()
            publisher.close()
    assert "botocore" in output, "DEBUG shows the SQS calls"
    assert_no_secret("the SQS worker's output", output)


@pytest.mark.usefixtures("canary_env")
@pytest.mark.parametrize(
    "case",
    [
        "refused_connection",
        "malformed_url",
        "unknown_database",
        "bad_sslmode",
        "password_in_query",
        "conninfo_form",
    ],
)
def test_secrets__failing_commands_do_not_show_the_password(case: str, dbinfo: str) -> None:
    url = {
        "refused_connection": f"postgresql://erp:{PASSWORD}@127.0.0.1:1/erp",
        "malformed_url": f"postgresql://erp:{PASSWORD}@127.0.0.1:notaport/erp",
        "unknown_database": url_with_password(dbinfo, dbname=f"no_such_{_TOKEN[:8]}"),
        "bad_sslmode": url_with_password(dbinfo) + "&sslmode=bogus",
        "password_in_query": f"postgresql://erp@127.0.0.1:1/erp?password={PASSWORD}",
        "conninfo_form": f"host=127.0.0.1 port=1 user=erp password='{PASSWORD}' dbname=erp",
    }[case]
    for args in (
        ["migrate"],
        ["status"],
        ["submit", "chain", "--n", "1"],
        ["dlq", "purge", "--yes"],
    ):
        code, output = engine(url, *args)
        assert code != 0, (args, output)
        assert_no_secret(f"engine {' '.join(args)} ({case})", output)


@pytest.mark.usefixtures("canary_env")
def test_secrets__a_worker_that_cannot_reach_the_database_does_not_show_the_password(
    tmp_path: Path,
) -> None:
    # a worker waits an outage out; whether it waits or exits, its words are checked
    worker = Worker(tmp_path / "worker.log", f"postgresql://erp:{PASSWORD}@127.0.0.1:1/erp")
    try:
        # the driver's own words about the refused connection are where a leak would be
        wait_until(
            lambda: worker.proc.poll() is not None or "cannot connect" in worker.log.read_text(),
            timeout=60,
            what="the worker to report the refused connection",
        )
    finally:
        output = worker.stop()
    assert "cannot connect to PostgreSQL at postgresql://erp:***@127.0.0.1:1/erp" in output
    assert_no_secret("the worker's output", output)


@pytest.mark.usefixtures("canary_env")
def test_secrets__an_unreachable_sqs_endpoint_does_not_show_the_aws_keys(dbinfo: str) -> None:
    url = url_with_password(dbinfo)
    code, output = engine(
        url,
        "queues",
        "create",
        "--name",
        queue_name("nowhere"),
        timeout=120,
        sqs_api_max_attempts=1,
    )
    assert code != 0
    assert_no_secret("engine queues create (SQS unreachable)", output)
