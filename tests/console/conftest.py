"""Fixtures of the console tests: the app on the test's database, users, signed-in clients.

HTTP-level tests drive the ASGI app in process (Starlette's TestClient,
httpx); the browser tests serve it with uvicorn on 127.0.0.1 and drive the
Debian Chromium through Playwright (one browser per xdist worker).
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from starlette.testclient import TestClient

from engine.config import Settings
from engine.console.app import create_app
from engine.console.settings import ConsoleSettings
from engine.console.users import add_user
from engine.flow.registry import Registry

SECRET = "s3cret-session-key-of-the-tests-0123456789"
PASSWORDS = {
    "vera": ("viewer", "vera-password-123"),
    "otto": ("operator", "otto-password-123"),
    "anna": ("accountant", "anna-password-123"),
    "adam": ("admin", "adam-password-123"),
}
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def console_conf() -> ConsoleSettings:
    return ConsoleSettings(secret=SECRET, refresh_s=0.5, signin_failures=3, signin_lock_s=600)


@pytest.fixture
def people(settings: Settings) -> dict[str, tuple[str, str]]:
    """One user of each role (name: (role, password)), added as `engine users add` does."""
    for name, (role, password) in PASSWORDS.items():
        add_user(settings, name, role, password, actor="test")
    return PASSWORDS


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


def sign_in(client: TestClient, name: str, password: str) -> TestClient:
    page = client.get("/signin")
    r = client.post(
        "/signin",
        data={"name": name, "password": password, "csrf": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/", f"sign-in of {name} refused"
    return client


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """The console served by uvicorn on 127.0.0.1 in a thread, for a real browser."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise AssertionError("the console did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
