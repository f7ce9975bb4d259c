"""Secrets are masked in every log record the worker writes (engine.infra.secrets.SecretsFilter)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from engine.infra.secrets import SecretsFilter, mask_secrets

# the shape botocore logs at DEBUG ("Sending http request: <AWSPreparedRequest ...>")
BOTOCORE_LINE = (
    "Sending http request: <AWSPreparedRequest method=POST, headers={'Authorization': "
    "b'AWS4-HMAC-SHA256 Credential=ASIAEXAMPLEKEY123456/20261203/us-east-1/sqs/aws4_request, "
    "SignedHeaders=host;x-amz-date, Signature=abc123', 'X-Amz-Security-Token': "
    "b'IQoJb3JpZ2luX2VjEXAMPLE+token/=='}>"
)


def test_mask_secrets__the_key_id_and_session_token_of_a_logged_request() -> None:
    masked = mask_secrets(BOTOCORE_LINE)
    assert "ASIAEXAMPLEKEY123456" not in masked
    assert "IQoJb3JpZ2luX2VjEXAMPLE" not in masked
    assert "Credential=***/20261203" in masked and "'X-Amz-Security-Token': b'***'" in masked


def test_mask_secrets__urls_and_given_values() -> None:
    masked = mask_secrets("postgresql://erp:pw-1@db/erp and hunter22", ["hunter22"])
    assert masked == "postgresql://erp:***@db/erp and ***"


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDFROMTHEENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret/from+the=env")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretsFilter(SecretStr("postgresql://erp:p%40ss-word@127.0.0.1/erp")))
    logger = logging.getLogger(f"test.secrets.{id(stream)}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_secrets_filter__messages_arguments_and_tracebacks(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    logger.info("keys %s and %s", "AKIDFROMTHEENV", "secret/from+the=env")
    logger.info("password as libpq knows it: p@ss-word, in the URL: p%40ss-word")
    try:
        raise RuntimeError("connecting with password=p@ss-word failed")
    except RuntimeError:
        logger.exception("step failed")
    text = stream.getvalue()
    for secret in ("AKIDFROMTHEENV", "secret/from+the=env", "p@ss-word", "p%40ss-word"):
        assert secret not in text
    assert "step failed" in text and "RuntimeError" in text and text.count("***") >= 5


def test_every_cli_command_masks_its_log_lines() -> None:
    # not only `engine worker`: any command (here `flows`) whose code logs a
    # secret, as botocore does at DEBUG, writes it masked
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import logging, sys\n"
        "from engine.cli import main\n"
        "try:\n"
        "    main(['--log-level', 'DEBUG', 'flows'], standalone_mode=False)\n"
        "finally:\n"
        "    logging.getLogger('botocore').debug('Credential=AKIDFROMTHEENV/x password=pw-9z8y')\n"
    )
    root = Path(__file__).resolve().parent.parent.parent
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "AKIDFROMTHEENV",
        "ENGINE_DATABASE_URL": "postgresql://erp:pw-9z8y@127.0.0.1:1/erp",
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests" / "support")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert "Credential=" in done.stderr, done.stderr[-2000:]
    assert "AKIDFROMTHEENV" not in done.stderr and "pw-9z8y" not in done.stderr
