"""Fixtures of the console tests: the app on the test's database, users, signed-in clients.

HTTP-level tests drive the ASGI app in process (Starlette's TestClient,
httpx); the browser tests serve it with uvicorn on 127.0.0.1 and drive the
Debian Chromium through Playwright (``browser``, one for the run: tests/conftest.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from consolesupport import PASSWORDS, SECRET, sign_in
from starlette.testclient import TestClient

from engine.config import Settings
from engine.console.app import create_app
from engine.console.settings import ConsoleSettings
from engine.console.users import add_user
from engine.flow.registry import Registry


@pytest.fixture
def console_conf() -> ConsoleSettings:
    # plain http, as `engine console` on 127.0.0.1 serves it (the TestClient sends no Secure
    # cookie over http)
    return ConsoleSettings(
        secret=SECRET, refresh_s=0.5, signin_failures=3, signin_lock_s=600, secure_cookie=False
    )


@pytest.fixture
def people(settings: Settings) -> dict[str, tuple[str, str]]:
    """One user of each role (name: (role, password)), added as `engine users add` does."""
    for name, (role, password) in PASSWORDS.items():
        add_user(settings, name, role, password, actor="test")
    return PASSWORDS


@pytest.fixture
def app_for(settings: Settings, console_conf: ConsoleSettings) -> Any:
    """``app_for(registry=None, **console overrides)``: a console app on the test's database."""

    def make(registry: Registry | None = None, **overrides: Any) -> Any:
        conf = console_conf.model_copy(update=overrides)
        return create_app(settings, conf, registry)

    return make


@pytest.fixture
def client_for(app_for: Any, people: dict[str, tuple[str, str]]) -> Iterator[Any]:
    """``client_for(name)``: a TestClient signed in as that user (``None``: not signed in)."""
    clients: list[TestClient] = []
    app = app_for(Registry.load(["testflows", "flows.tools"]))

    def make(name: str | None) -> TestClient:
        client = TestClient(app, base_url="http://127.0.0.1")
        clients.append(client)
        if name is not None:
            sign_in(client, name, people[name][1])
        return client

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the browser tests' screenshots go (``CONSOLE_SCREENSHOTS``, else the test's)."""
    folder = Path(os.environ.get("CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
