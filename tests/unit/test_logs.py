"""Log lines: JSON or text, the step run's context where it applies, secrets masked in both."""

from __future__ import annotations

import io
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from engine.infra import logs
from engine.store.rows import Claimed

PASSWORD = "pw-LOGS-" + uuid.uuid4().hex[:10]
URL = f"postgresql://erp:{PASSWORD}@127.0.0.1:5432/erp"


@pytest.fixture
def configured(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """``logs.configure`` on a stream of the test's (format from the parametrisation)."""
    monkeypatch.setattr(logs, "_active_format", logs.active_format())  # restored after
    root = logging.getLogger()
    level = root.level
    stream = io.StringIO()
    handler = logs.configure("DEBUG", request.param, URL, stream=stream)
    try:
        yield logging.getLogger("engine.test_logs"), stream
    finally:
        assert handler is not None
        root.removeHandler(handler)
        root.setLevel(level)


def claimed(attempt: int = 2) -> Claimed:
    return Claimed(
        id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        flow="chain",
        params={},
        step="b",
        fanout_key="",
        fingerprint="f",
        attempt=attempt,
        max_attempts=3,
        token=uuid.uuid4(),
        lease_expires_at=datetime.now(UTC),
        item=None,
        reclaimed_from=None,
    )


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize("configured", ["json"], indirect=True)
def test_json_logs__one_object_per_line_with_the_step_runs_context(
    configured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = configured
    run = claimed()
    logger.info("before")
    with logs.bound(worker="host:1"), logs.step_run(run, lease_owner="host:1/0"):
        logger.warning("inside %s", "the step")
    logger.info("after")
    before, inside, after = lines(stream)
    assert set(before) == {"ts", "level", "logger", "message"}
    assert inside == {
        "ts": inside["ts"],
        "level": "WARNING",
        "logger": "engine.test_logs",
        "message": "inside the step",
        "job_id": str(run.job_id),
        "flow": "chain",
        "step": "b",
        "step_run_id": str(run.id),
        "attempt": 2,
        "worker": "host:1",
        "lease_owner": "host:1/0",
    }
    assert datetime.fromisoformat(str(inside["ts"])).tzinfo is not None
    assert "job_id" not in after and "worker" not in after  # cleared after the step run


@pytest.mark.parametrize("configured", ["json"], indirect=True)
def test_json_logs__secrets_masked_in_the_message_and_the_exc_field(
    configured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = configured
    logger.error("connecting to %s", URL)
    try:
        raise RuntimeError(f"password={PASSWORD} refused")
    except RuntimeError:
        logger.exception("step failed")
    text = stream.getvalue()
    assert PASSWORD not in text
    message, failed = lines(stream)
    assert message["message"] == "connecting to postgresql://erp:***@127.0.0.1:5432/erp"
    assert failed["message"] == "step failed"
    exc = str(failed["exc"])
    assert exc.startswith("Traceback") and "RuntimeError: password=*** refused" in exc


@pytest.mark.parametrize("configured", ["text"], indirect=True)
def test_text_logs__readable_line_with_the_context_appended(
    configured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = configured
    run = claimed(attempt=1)
    logger.info("plain %s", PASSWORD)
    with logs.step_run(run, lease_owner="w/0"):
        logger.info("in step")
    plain, in_step = stream.getvalue().splitlines()
    assert plain.endswith("INFO engine.test_logs: plain ***")
    assert in_step.endswith(
        f"INFO engine.test_logs: in step [job_id={run.job_id} flow=chain step=b "
        f"step_run_id={run.id} attempt=1 lease_owner=w/0]"
    )


@pytest.mark.parametrize("configured", ["json"], indirect=True)
def test_logs_inheriting__a_thread_starts_with_its_creators_context(
    configured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = configured

    def plain() -> None:
        logger.info("plain thread")

    def child() -> None:
        logger.info("inheriting thread")

    with logs.bound(worker="host:7"):
        threads = [threading.Thread(target=plain), threading.Thread(target=logs.inheriting(child))]
    for t in threads:
        t.start()
        t.join()
    plain_line, inherited = lines(stream)
    assert "worker" not in plain_line
    assert inherited["worker"] == "host:7"


def test_logs_configure__a_second_call_replaces_its_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs, "_active_format", logs.active_format())
    root = logging.getLogger()
    level = root.level
    first = logs.configure("INFO", "text", stream=io.StringIO())
    second = logs.configure("INFO", "json", stream=io.StringIO())
    try:
        assert first not in root.handlers and second in root.handlers
        assert logs.active_format() == "json"
    finally:
        root.removeHandler(second)  # type: ignore[arg-type]
        root.setLevel(level)
