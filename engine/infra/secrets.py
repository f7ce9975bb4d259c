"""Secrets kept out of everything printed or logged: passwords, AWS keys, webhook URLs.

:func:`mask_url` masks the password of a URL or conninfo string (error
messages, ``engine db`` output); :func:`mask_secrets` adds the AWS
credentials botocore logs with each request; :class:`SecretsFilter`, on every
log handler, masks those patterns and the values of this process's own
secrets in each record, its traceback included.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from urllib.parse import unquote

from pydantic import SecretStr

__all__ = ["SecretsFilter", "mask_secrets", "mask_url"]

# userinfo of a URL (user:password@); the password part is what gets masked
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):(?P<pw>[^@\s]*)@")
# key=value conninfo form
_CONNINFO_PASSWORD = re.compile(r"(?P<key>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)")
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)(?P<pw>[^&\s]*)")


def mask_url(text: str) -> str:
    """Replace every password in ``text`` (URLs, conninfo strings) by ``***``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}:***@" if m["pw"] else m[0], text)
    text = _CONNINFO_PASSWORD.sub(lambda m: f"{m['key']}***", text)
    return _QUERY_PASSWORD.sub(lambda m: f"{m['key']}***", text)


# botocore logs every request's headers at DEBUG: the access key id
# (Credential=AKIA.../date/region/...) and, with temporary credentials (an ECS
# task role), the whole session token
_AWS_CREDENTIAL = re.compile(r"(?P<key>Credential=)(?P<pw>[A-Z0-9]{16,128})")
_AWS_TOKEN = re.compile(
    r"(?P<key>X-Amz-Security-Token['\"]?\s*[:=]\s*b?['\"]?)(?P<pw>[^'\"\s,}&]+)", re.IGNORECASE
)
_AWS_ENV_SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """:func:`mask_url`, AWS credentials in logged requests, and each of ``secrets``."""
    text = mask_url(text)
    text = _AWS_CREDENTIAL.sub(lambda m: f"{m['key']}***", text)
    text = _AWS_TOKEN.sub(lambda m: f"{m['key']}***", text)
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


class SecretsFilter(logging.Filter):
    """Masks secrets in every record a handler writes, its traceback included.

    Installed on handlers (a logger's own filters miss records propagated from
    other loggers, such as botocore's). The secrets are the database password
    of ``database_url``, the AWS keys and the alert webhook URL of the
    environment, besides the
    patterns of :func:`mask_secrets`.
    """

    def __init__(self, database_url: SecretStr | None = None) -> None:
        super().__init__()
        found = [os.environ.get(name, "") for name in _AWS_ENV_SECRETS]
        # a webhook URL (Slack's) is itself the credential
        found.append(os.environ.get("ENGINE_ALERT_WEBHOOK_URL", "").strip())
        if database_url is not None:
            url = database_url.get_secret_value()
            for pattern in (_URL_PASSWORD, _CONNINFO_PASSWORD, _QUERY_PASSWORD):
                for m in pattern.finditer(url):
                    found += [m["pw"].strip("'"), unquote(m["pw"].strip("'"))]
        # longest first, so a secret containing another is masked whole; short
        # values would mask ordinary words (and are no secret worth the name)
        self._secrets = sorted({v for v in found if len(v) >= 4}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_secrets(message, self._secrets)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_secrets(record.exc_text, self._secrets)
        return True
