"""``engine worker --check``: the container's health check, one line per check.

In process through click's runner (moto's in-process SQS needs the same
process), on a real PostgreSQL database; the exit code comes from the one
mapping of ``engine/cli/main.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from click.testing import CliRunner, Result
from sqs_support import REGION, moto_in_process

from engine.cli.main import EXIT_ENVIRONMENT, EXIT_OK, main
from engine.config import Settings
from engine.store.migrations import discover
from engine.transports.sqs import SqsSettings
from engine.transports.sqs_queues import create_queues

CHECKS = ["settings", "timing", "flows", "database", "migrations", "queue", "alerts"]


def check(settings: Settings, **env: str | None) -> Result:
    assert settings.database_url is not None
    base: dict[str, str | None] = {
        "ENGINE_DATABASE_URL": settings.database_url.get_secret_value(),
        "ENGINE_FLOW_MODULES": "flows.example",
        "ENGINE_TRANSPORT": "postgres",
        "ENGINE_ALERT_SINKS": None,
        "ENGINE_ALERT_SNS_TOPIC_ARN": None,
        "ENGINE_HEARTBEAT_S": None,
        "ENGINE_SQS_QUEUE_URL": None,
    }
    return CliRunner().invoke(main, ["worker", "--check"], env={**base, **env})


def lines(result: Result) -> dict[str, str]:
    """check name -> its mark (ok, FAIL, skip), from stdout."""
    found = {}
    for line in result.stdout.splitlines():
        mark, name, *_ = line.split()
        found[name] = mark
    return found


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: nothing listens


@pytest.fixture
def sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_in_process(monkeypatch):
        yield boto3.client("sqs", region_name=REGION)


def test_worker_check__passes_with_one_line_per_check(settings: Settings) -> None:
    result = check(settings)
    assert result.exit_code == EXIT_OK, result.output
    assert lines(result) == dict.fromkeys(CHECKS, "ok")
    assert "role engine_worker" in result.stdout  # connected as the worker does


def test_worker_check__heartbeat_not_shorter_than_lease_fails(settings: Settings) -> None:
    result = check(settings, ENGINE_HEARTBEAT_S="90")
    assert result.exit_code == EXIT_ENVIRONMENT
    assert lines(result)["timing"] == "FAIL"
    assert lines(result)["queue"] == "skip"
    assert "worker check failed: timing: refusing to start: heartbeat interval 90 s" in (
        result.stderr
    )


def test_worker_check__bad_setting_names_the_variable(settings: Settings) -> None:
    result = check(settings, ENGINE_LEASE_S="soon")
    assert result.exit_code == EXIT_ENVIRONMENT
    assert lines(result) == {"settings": "FAIL", **dict.fromkeys(CHECKS[1:], "skip")}
    assert "settings: ENGINE_LEASE_S='soon': expected a number" in result.stderr


def test_worker_check__unreachable_database_fails_without_the_password(settings: Settings) -> None:
    url = f"postgresql://worker:s3cr3t-pw@127.0.0.1:{closed_port()}/engine"
    result = check(settings, ENGINE_DATABASE_URL=url)
    assert result.exit_code == EXIT_ENVIRONMENT
    marks = lines(result)
    assert (marks["database"], marks["migrations"], marks["queue"]) == ("FAIL", "skip", "skip")
    assert "worker check failed: database: cannot connect to PostgreSQL" in result.stderr
    assert "s3cr3t-pw" not in result.output


def test_worker_check__unmigrated_database_names_the_missing_migrations(empty_db: str) -> None:
    settings = Settings(database_url=empty_db)
    result = check(settings, ENGINE_WORKER_ROLE="")
    assert result.exit_code == EXIT_ENVIRONMENT
    assert lines(result)["migrations"] == "FAIL"
    shipped = len(discover(Settings().migration_dirs))
    assert f"migrations: {shipped} migration(s) not applied: 0001_engine, " in result.stderr
    assert "run `engine migrate`" in result.stderr


def test_worker_check__one_migration_missing_is_named(settings: Settings, conn: Any) -> None:
    conn.execute("DELETE FROM engine_migrations WHERE version = 8")
    result = check(settings)
    assert result.exit_code == EXIT_ENVIRONMENT
    assert "1 migration(s) not applied: 0008_worker_reads_migrations;" in result.stderr


def test_worker_check__sns_sink_without_topic_fails(settings: Settings) -> None:
    result = check(settings, ENGINE_ALERT_SINKS="log,sns")
    assert result.exit_code == EXIT_ENVIRONMENT
    assert lines(result)["alerts"] == "FAIL"
    assert "alerts: ENGINE_ALERT_SINKS includes sns but ENGINE_ALERT_SNS_TOPIC_ARN is not set" in (
        result.stderr
    )


def test_worker_check__sqs_queue_answers(settings: Settings, sqs: Any) -> None:
    made = create_queues(SqsSettings(), visibility_s=120, name="engine-health", client=sqs)
    arn = f"arn:aws:sns:{REGION}:123456789012:engine-alerts"
    result = check(
        settings,
        ENGINE_TRANSPORT="sqs",
        ENGINE_SQS_QUEUE_URL=made.url,
        ENGINE_ALERT_SINKS="log,sns",
        ENGINE_ALERT_SNS_TOPIC_ARN=arn,
    )
    assert result.exit_code == EXIT_OK, result.output
    assert lines(result) == dict.fromkeys(CHECKS, "ok")
    assert f"SQS {made.url}: ~0 messages, visibility timeout 120 s" in result.stdout


def test_worker_check__missing_sqs_queue_fails(settings: Settings, sqs: Any) -> None:
    url = f"https://sqs.{REGION}.amazonaws.com/123456789012/engine-nowhere"
    result = check(settings, ENGINE_TRANSPORT="sqs", ENGINE_SQS_QUEUE_URL=url)
    assert result.exit_code == EXIT_ENVIRONMENT
    assert lines(result)["queue"] == "FAIL"
    assert f"queue: SQS queue {url} does not exist; create it with `engine queues create`" in (
        result.stderr
    )


def test_worker_check__sqs_visibility_shorter_than_heartbeat_fails(
    settings: Settings, sqs: Any
) -> None:
    # the queue's own timeout (10 s) counts, whatever ENGINE_VISIBILITY_S says
    made = create_queues(SqsSettings(), visibility_s=10, name="engine-short", client=sqs)
    result = check(settings, ENGINE_TRANSPORT="sqs", ENGINE_SQS_QUEUE_URL=made.url)
    assert result.exit_code == EXIT_ENVIRONMENT
    assert (lines(result)["timing"], lines(result)["queue"]) == ("ok", "FAIL")
    assert "the queue visibility timeout 10 s" in result.stderr


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["runs"]])
def test_cli__an_unmigrated_database_says_to_migrate(empty_db: str, command: list[str]) -> None:
    result = CliRunner().invoke(main, command, env={"ENGINE_DATABASE_URL": empty_db})
    assert result.exit_code == EXIT_ENVIRONMENT, result.output
    assert "the database is not migrated" in result.stderr
    assert "run `engine migrate`" in result.stderr
