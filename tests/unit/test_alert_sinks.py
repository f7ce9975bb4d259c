"""Alert sinks without services: configuration errors, the log line, the webhook payload."""

from __future__ import annotations

import logging
import uuid

import pytest
from pydantic import SecretStr

from engine.alerts import Alert
from engine.alerts.sinks import LogSink, WebhookSink, sinks_for
from engine.config import Settings
from engine.errors import ConfigError

HOOK = "https://hooks.slack.com/services/T0SECRET/B0SECRET/xoxsecrettoken42"


def an_alert() -> Alert:
    return Alert(
        reason="RuntimeError: disk full\nmore (attempt 2 of 2)",
        job_id=uuid.UUID("0e8347f4-f91f-4dfa-b276-55efcb124d60"),
        flow="posting",
        step="chunk",
        attempts=2,
        error="RuntimeError: disk full",
        report_link="file:///reports/runs/0e8347f4.html",
        alert_id=3,
    )


@pytest.mark.parametrize(
    ("sinks", "missing"),
    [(["sns"], "ENGINE_ALERT_SNS_TOPIC_ARN"), (["log", "webhook"], "ENGINE_ALERT_WEBHOOK_URL")],
)
def test_sinks_for__a_sink_without_its_setting_is_a_startup_error_naming_it(
    sinks: list[str], missing: str
) -> None:
    with pytest.raises(ConfigError, match=missing):
        sinks_for(Settings(alert_sinks=sinks))


def test_sinks_for__bad_values_are_named_but_never_the_webhook_url() -> None:
    with pytest.raises(ConfigError, match="'arn:aws:sqs:x' is not an SNS topic ARN"):
        sinks_for(Settings(alert_sinks=["sns"], alert_sns_topic_arn="arn:aws:sqs:x"))
    with pytest.raises(ConfigError, match="ENGINE_ALERT_WEBHOOK_URL") as caught:
        sinks_for(Settings(alert_sinks=["webhook"], alert_webhook_url=SecretStr("ftp://x/secret1")))
    assert "secret1" not in str(caught.value)
    with pytest.raises(ConfigError, match="ENGINE_ALERT_CLAIM_S"):
        sinks_for(Settings(alert_claim_s=5, alert_send_timeout_s=10))


def test_sinks_for__each_configured_sink_once_in_order() -> None:
    settings = Settings(alert_sinks=["webhook", "log", "log"], alert_webhook_url=SecretStr(HOOK))
    sinks = sinks_for(settings)
    assert [s.name for s in sinks] == ["webhook", "log"]
    assert "xoxsecrettoken42" not in repr(sinks)


def test_log_sink__one_readable_error_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        LogSink().send(an_alert())
    [record] = caplog.records
    assert record.levelno == logging.ERROR and "\n" not in record.getMessage()
    assert record.getMessage() == (
        "ALERT dead letter: posting/chunk of job 0e8347f4-f91f-4dfa-b276-55efcb124d60"
        " | job: 0e8347f4-f91f-4dfa-b276-55efcb124d60 | flow: posting | step: chunk"
        " | attempts: 2 | error: RuntimeError: disk full"
        " | report: file:///reports/runs/0e8347f4.html | alert: 3"
    )


def test_webhook_sink__slack_text_with_every_field_beside_it() -> None:
    payload = WebhookSink(HOOK, timeout_s=5).payload(an_alert())
    assert payload["text"].startswith("dead letter: posting/chunk of job 0e8347f4")
    assert {k: payload[k] for k in ("alert_id", "flow", "step", "attempts", "error")} == {
        "alert_id": 3,
        "flow": "posting",
        "step": "chunk",
        "attempts": 2,
        "error": "RuntimeError: disk full",
    }
    assert payload["job_id"] == "0e8347f4-f91f-4dfa-b276-55efcb124d60"
    assert payload["report"] == "file:///reports/runs/0e8347f4.html"
