"""Alert sinks: where a dead letter's alert goes (``ENGINE_ALERT_SINKS``).

- ``log``: one ERROR line (the default);
- ``sns``: a message published to ``ENGINE_ALERT_SNS_TOPIC_ARN`` (boto3), its
  subject the alert's title and its body the readable text, then the JSON;
- ``webhook``: an HTTP POST of JSON to ``ENGINE_ALERT_WEBHOOK_URL``, Slack
  compatible (``text``) with every field of the alert beside it.

A sink's ``send`` raises :class:`AlertSendFailed` when the alert did not get
there; the dispatcher then tries again later. Its message never holds the
webhook URL (a Slack URL is a credential) or any other secret.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from engine.alerts import Alert, AlertSink
from engine.config import Settings
from engine.errors import AlertSendFailed, ConfigError
from engine.infra.secrets import mask_secrets

__all__ = ["AlertSendFailed", "LogSink", "SnsSink", "WebhookSink", "sinks_for"]

log = logging.getLogger("engine.alerts")

# arn:aws:sns:REGION:ACCOUNT:NAME
_SNS_ARN = re.compile(r"^arn:aws[a-z-]*:sns:(?P<region>[a-z0-9-]+):\d{12}:[A-Za-z0-9_-]{1,256}$")


class LogSink:
    """One readable ERROR line per alert."""

    name = "log"

    def send(self, alert: Alert) -> None:
        log.error("ALERT %s", " | ".join(alert.text().splitlines()))


class SnsSink:
    """Publishes each alert to an SNS topic (e-mail, SMS, a pager subscribed to it)."""

    name = "sns"

    def __init__(self, topic_arn: str, *, timeout_s: float, client: Any | None = None) -> None:
        match = _SNS_ARN.match(topic_arn)
        if match is None:
            raise ConfigError(
                f"ENGINE_ALERT_SNS_TOPIC_ARN {topic_arn!r} is not an SNS topic ARN; "
                "expected arn:aws:sns:REGION:ACCOUNT:NAME"
            )
        self.topic_arn = topic_arn
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                region_name=match["region"],
                retries={"total_max_attempts": 2, "mode": "standard"},
                connect_timeout=timeout_s,
                read_timeout=timeout_s,
            )
            # a session of its own: boto3's default session is not thread-safe
            client = boto3.session.Session().client("sns", config=config)
        self.client = client

    def send(self, alert: Alert) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        message = f"{alert.text()}\n\n{json.dumps(alert.fields(), sort_keys=True)}"
        try:
            self.client.publish(
                TopicArn=self.topic_arn, Subject=_subject(alert.title), Message=message
            )
        except (BotoCoreError, ClientError) as exc:
            raise AlertSendFailed(
                f"SNS Publish to {self.topic_arn} failed: {mask_secrets(str(exc))[:300]}"
            ) from None


def _subject(title: str) -> str:
    """SNS subjects: ASCII, no line breaks, under 100 characters."""
    ascii_only = title.encode("ascii", "replace").decode("ascii")
    return re.sub(r"[\x00-\x1f\x7f]", " ", ascii_only)[:99]


class WebhookSink:
    """POSTs each alert as JSON: Slack's ``text``, and the alert's fields beside it.

    stdlib ``urllib``: one POST with a timeout needs no HTTP library in the
    worker image, and retrying belongs to the dispatcher (durable, with
    backoff), not to a client's in-memory retry loop.
    """

    name = "webhook"

    def __init__(self, url: str, *, timeout_s: float) -> None:
        if not re.match(r"^https?://[^/\s]+", url):
            # never echo the URL: it is a credential
            raise ConfigError(
                "ENGINE_ALERT_WEBHOOK_URL is not an http:// or https:// URL (value not shown: "
                "a webhook URL is a secret)"
            )
        self._url = url
        self.timeout_s = timeout_s

    def payload(self, alert: Alert) -> dict[str, Any]:
        """Slack reads ``text``; other receivers read the fields (``alert_id`` de-duplicates)."""
        return {"text": alert.text(), **alert.fields()}

    def send(self, alert: Alert) -> None:
        body = json.dumps(self.payload(alert)).encode()
        request = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
            self._url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "engine-alerts"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                status = response.status
        except urllib.error.HTTPError as exc:  # a non-2xx answer
            exc.close()
            raise AlertSendFailed(f"webhook answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise AlertSendFailed(f"webhook POST failed: {self._masked(str(reason))}") from None
        if not 200 <= status < 300:
            raise AlertSendFailed(f"webhook answered HTTP {status}")

    def _masked(self, text: str) -> str:
        return mask_secrets(text, [self._url, *_url_parts(self._url)])[:300]

    def __repr__(self) -> str:
        return "WebhookSink(url=***)"


def _url_parts(url: str) -> list[str]:
    """The parts of a URL that may hold its secret (path and query), longest first."""
    rest = url.split("://", 1)[-1]
    _, _, path = rest.partition("/")
    return [p for p in (path, path.split("?", 1)[0]) if len(p) >= 8]


def sinks_for(settings: Settings, *, sns_client: Any | None = None) -> list[AlertSink]:
    """The configured sinks, or a :class:`ConfigError` naming the setting that is missing."""
    if settings.alert_claim_s <= settings.alert_send_timeout_s:
        raise ConfigError(
            f"ENGINE_ALERT_CLAIM_S ({settings.alert_claim_s:g} s) must be longer than "
            f"ENGINE_ALERT_SEND_TIMEOUT_S ({settings.alert_send_timeout_s:g} s): a send still "
            "in flight would be sent again by another worker"
        )
    sinks: list[AlertSink] = []
    for name in _unique(settings.alert_sinks):
        if name == "log":
            sinks.append(LogSink())
        elif name == "sns":
            if not settings.alert_sns_topic_arn:
                raise ConfigError(
                    "ENGINE_ALERT_SINKS includes sns but ENGINE_ALERT_SNS_TOPIC_ARN is not set; "
                    "set it to the topic's ARN (arn:aws:sns:REGION:ACCOUNT:NAME) or drop sns"
                )
            sinks.append(
                SnsSink(
                    settings.alert_sns_topic_arn,
                    timeout_s=settings.alert_send_timeout_s,
                    client=sns_client,
                )
            )
        elif name == "webhook":
            url = settings.alert_webhook_url
            if url is None or not url.get_secret_value().strip():
                raise ConfigError(
                    "ENGINE_ALERT_SINKS includes webhook but ENGINE_ALERT_WEBHOOK_URL is not "
                    "set; set it to the URL to POST alerts to or drop webhook"
                )
            sinks.append(
                WebhookSink(url.get_secret_value().strip(), timeout_s=settings.alert_send_timeout_s)
            )
    return sinks


def _unique(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(names))
