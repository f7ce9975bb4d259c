"""The `sns` alert sink against moto: read back through an SQS queue subscribed to the topic."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from sqs_support import REGION, moto_in_process

from engine.alerts import Alert
from engine.alerts.sinks import SnsSink, sinks_for
from engine.config import Settings
from engine.errors import AlertSendFailed


@pytest.fixture
def topic_and_queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str, Any]]:
    with moto_in_process(monkeypatch):
        sns = boto3.client("sns", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        topic = sns.create_topic(Name="engine-alerts")["TopicArn"]
        queue_url = sqs.create_queue(QueueName="pager")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
        yield topic, queue_url, sqs


def an_alert() -> Alert:
    return Alert(
        reason="ValueError: boom (attempt 3 of 3)",
        job_id=uuid.UUID("0e8347f4-f91f-4dfa-b276-55efcb124d60"),
        step_run_id=uuid.uuid4(),
        flow="costing",
        step="store",
        attempts=3,
        error="ValueError: boom",
        report_link="https://reports.s3.amazonaws.com/runs/0e8347f4.html",
        alert_id=7,
        created_at=datetime(2026, 12, 4, 15, 0, tzinfo=UTC),
    )


def test_sns_sink__publishes_subject_text_and_json_to_the_topic(
    topic_and_queue: tuple[str, str, Any],
) -> None:
    topic, queue_url, sqs = topic_and_queue
    [sink] = sinks_for(Settings(alert_sinks=["sns"], alert_sns_topic_arn=topic))

    sink.send(an_alert())

    [message] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
    envelope = json.loads(message["Body"])  # SNS's own envelope around what was published
    assert envelope["TopicArn"] == topic
    assert envelope["Subject"] == (
        "dead letter: costing/store of job 0e8347f4-f91f-4dfa-b276-55efcb124d60"
    )
    text, _, data = envelope["Message"].partition("\n\n")
    assert "attempts: 3" in text and "error: ValueError: boom" in text
    fields = json.loads(data)
    assert (fields["alert_id"], fields["flow"], fields["step"], fields["attempts"]) == (
        7,
        "costing",
        "store",
        3,
    )
    assert fields["report"] == "https://reports.s3.amazonaws.com/runs/0e8347f4.html"


def test_sns_sink__a_topic_that_does_not_exist_is_a_failed_send(
    topic_and_queue: tuple[str, str, Any],
) -> None:
    sink = SnsSink(f"arn:aws:sns:{REGION}:123456789012:no-such-topic", timeout_s=5)

    with pytest.raises(AlertSendFailed, match=r"SNS Publish to .*no-such-topic failed"):
        sink.send(an_alert())
