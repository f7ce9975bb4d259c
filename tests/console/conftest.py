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
from argon2 import PasswordHasher
from consolesupport import PASSWORDS, SECRET, sign_in
from starlette.testclient import TestClient

from engine.config import Settings
from engine.console import users
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


class _HashedOnce(PasswordHasher):
    """argon2id as the console's, each password hashed once per process: the four
    people of ~75 tests cost 0.1-0.2 s of a core a hash (a hash of the same password
    verifies the same; the tests' own hashing is never cached)."""

    def __init__(self) -> None:
        super().__init__()
        self._hashes: dict[str | bytes, str] = {}

    def hash(self, password: str | bytes, *, salt: bytes | None = None) -> str:
        if salt is not None:
            return super().hash(password, salt=salt)
        if password not in self._hashes:
            self._hashes[password] = super().hash(password)
        return self._hashes[password]


_PEOPLE_HASHER = _HashedOnce()


@pytest.fixture
def people(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, str]]:
    """One user of each role (name: (role, password)), added as `engine users add` does
    (with each password's hash made once per process)."""
    with monkeypatch.context() as patched:
        patched.setattr(users, "_hasher", _PEOPLE_HASHER)
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
