"""The ALB header's key look-up: made-up key ids cost the console nothing.

The header is read before any signature is checked, so anyone who copies our
signer, issuer and client into it can name any ``kid``. Each one missing is
looked for once a minute at most, and at most ten keys are fetched a minute
from the region's endpoint. The endpoint itself is unreachable here (no
network): ``urlopen`` is replaced by a counter that answers as a 404 would.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from consolesupport import ALB, alb_key_pair, alb_token

from engine.console import oidc
from engine.console.settings import ConsoleSettings


@pytest.fixture(autouse=True)
def _fresh_caches() -> None:
    oidc._keys.clear()
    oidc._misses.clear()
    oidc._fetches.clear()


def _refused(console: ConsoleSettings, token: str) -> str:
    with pytest.raises(oidc.OidcRefused) as caught:
        oidc.verify_alb_token(console, token)
    return str(caught.value)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs the console asks the key endpoint for; each answered as a 404."""
    urls: list[str] = []

    def urlopen(url: str, timeout: float) -> Any:
        urls.append(url)
        raise OSError("HTTP Error 404: Not Found")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return urls


def test_alb_keys__made_up_kids_fetch_at_most_ten_keys_a_minute(
    tmp_path: Path, asked: list[str]
) -> None:
    console = ConsoleSettings(alb_region="eu-west-1", **ALB)
    key = alb_key_pair(tmp_path)
    for n in range(50):
        _refused(console, alb_token(key, email="eve@x", exp=time.time() + 60, kid=f"made-up-{n}"))
    assert len(asked) == oidc._FETCHES_PER_MIN
    assert all(
        u.startswith("https://public-keys.auth.elb.eu-west-1.amazonaws.com/made-up-") for u in asked
    )


def test_alb_keys__a_kid_not_found_is_not_asked_for_again_within_a_minute(
    tmp_path: Path, asked: list[str]
) -> None:
    console = ConsoleSettings(alb_region="eu-west-1", **ALB)
    token = alb_token(alb_key_pair(tmp_path), email="eve@x", exp=time.time() + 60, kid="gone")
    assert "cannot fetch" in _refused(console, token)
    assert "not found lately" in _refused(console, token)
    assert len(asked) == 1


def test_alb_keys__a_key_found_is_kept_and_verifies(tmp_path: Path) -> None:
    console = ConsoleSettings(alb_keys_dir=tmp_path, **ALB)
    key = alb_key_pair(tmp_path)
    token = alb_token(key, email="ann@x", exp=time.time() + 60)
    assert oidc.verify_alb_token(console, token).name == "ann@x"
    (tmp_path / "kid-1.pem").unlink()  # kept: not read again
    assert oidc.verify_alb_token(console, token).name == "ann@x"
