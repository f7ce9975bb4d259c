"""Shared fixtures of the SQS tests: moto in process, with SQS's documented receipts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from sqs_support import REGION, documented_receipts, moto_in_process


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    documented_receipts(monkeypatch)
    with moto_in_process(monkeypatch):
        yield boto3.client("sqs", region_name=REGION)
