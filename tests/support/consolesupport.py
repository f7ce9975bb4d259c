"""What the console tests share beside their fixtures: the users, signing in, serving the app.

A module of its own (not the console tests' conftest), so that tests import it
by a name no other folder's conftest shadows.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from typing import Any

import uvicorn
from starlette.testclient import TestClient

SECRET = "s3cret-session-key-of-the-tests-0123456789"
PASSWORDS = {
    "vera": ("viewer", "vera-password-123"),
    "otto": ("operator", "otto-password-123"),
    "anna": ("accountant", "anna-password-123"),
    "adam": ("admin", "adam-password-123"),
}
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


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
