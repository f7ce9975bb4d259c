"""Sign-in cannot be used against the console (issue 34), over HTTP on the test's database.

Every argon2 computation is counted where it happens (a PasswordHasher that
counts its own calls and how many run at once, in place of the console's):
a refusal before hashing costs none, every answer that hashes costs one.
"""

from __future__ import annotations

import re
import threading
from ipaddress import ip_network
from typing import Any

import httpx
import psycopg
import pytest
from argon2 import PasswordHasher
from consolesupport import SECRET, Served, csrf_of, sign_in
from starlette.testclient import TestClient

from engine.config import Settings
from engine.console import users
from engine.console.users import add_user, list_users


class CountingHasher(PasswordHasher):
    """argon2 as the console uses it, counting hashes and the most computed at once."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def _counted(self, work: Any) -> Any:
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return work()
        finally:
            with self._lock:
                self.in_flight -= 1

    def verify(self, hash: str | bytes, password: str | bytes) -> bool:
        return bool(self._counted(lambda: super(CountingHasher, self).verify(hash, password)))

    def hash(self, password: str | bytes, *, salt: bytes | None = None) -> str:
        return str(self._counted(lambda: super(CountingHasher, self).hash(password, salt=salt)))


@pytest.fixture
def hasher(monkeypatch: pytest.MonkeyPatch) -> CountingHasher:
    counting = CountingHasher()
    monkeypatch.setattr(users, "_hasher", counting)
    return counting


def _client(app: Any, address: str) -> TestClient:
    """A client whose requests come from ``address`` (the socket peer the app sees)."""
    return TestClient(app, base_url="http://127.0.0.1", client=(address, 40000))


def _attempt(client: Any, name: str, password: str) -> Any:
    """One sign-in as a browser makes it: the form, then its POST (the refusal page followed)."""
    token = csrf_of(client.get("/signin").text)
    return client.post("/signin", data={"name": name, "password": password, "csrf": token})


def _answer(r: Any) -> tuple[tuple[int, ...], int, str, str]:
    """What a refused person sees: the redirects, the status, where they end and the page."""
    return tuple(h.status_code for h in r.history), r.status_code, str(r.url), r.text


def test_signin__a_flood_from_one_address_is_refused_before_hashing(
    app_for: Any, people: Any, hasher: CountingHasher, conn: psycopg.Connection[Any]
) -> None:
    app = app_for(signin_per_address_per_min=4, signin_per_s=1000)
    flooder = _client(app, "203.0.113.7")
    answers = {_answer(_attempt(flooder, f"nobody{i}", "guess-guess-guess")) for i in range(30)}
    answers |= {_answer(_attempt(flooder, "adam", "guess-guess-guess")) for _ in range(10)}
    assert hasher.calls == 4  # the address's allowance; the 36 others refused before any hash
    assert len(answers) == 1  # and answered alike
    (answer,) = answers
    assert answer[:3] == ((303,), 200, "http://127.0.0.1/signin")
    assert users.REFUSED in answer[3]
    # the flood counted nothing against adam and keeps nobody else out
    row = conn.execute("SELECT count(*) AS n FROM engine_console_signin_failures").fetchone()
    assert row == {"n": 0}
    assert sign_in(_client(app, "192.0.2.10"), "adam", people["adam"][1])
    assert hasher.calls == 5


def test_signin__hashes_in_flight_never_exceed_the_bound(
    app_for: Any, people: Any, hasher: CountingHasher
) -> None:
    n, bound = 12, 2
    app = app_for(signin_per_address_per_min=1000, signin_per_s=1000, signin_hashes=bound)
    start = threading.Barrier(n)
    pages: list[str] = []
    lock = threading.Lock()
    with Served(app) as served:

        def attempt(i: int) -> None:
            with httpx.Client(base_url=served.url, follow_redirects=True, timeout=120) as client:
                token = csrf_of(client.get("/signin").text)
                start.wait()
                name = "adam" if i % 2 else f"nobody{i}"
                r = client.post(
                    "/signin", data={"name": name, "password": "wrong-password-x", "csrf": token}
                )
                with lock:
                    pages.append(r.text)

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert hasher.max_in_flight <= bound
    assert 1 <= hasher.calls <= n
    assert len(pages) == n
    assert all(users.REFUSED in p for p in pages)
    gate = app.state.shared.signins
    assert gate.max_in_flight <= bound
    assert gate.hashes == hasher.calls  # every hash went through the gate
    assert gate.hashes + gate.refused["busy"] == n


def test_signin__unknown_locked_and_wrong_are_answered_alike_after_one_hash_each(
    app_for: Any, people: Any, hasher: CountingHasher, settings: Settings
) -> None:
    add_user(settings, "olga", "viewer", None, actor="test")  # signs in through the ALB only
    app = app_for(signin_per_address_per_min=1000, signin_per_s=1000)  # signin_failures=3
    client = _client(app, "198.51.100.1")
    for _ in range(3):
        _attempt(client, "otto", "not-otto-password")
    cases = {
        "unknown name": ("nobody", "some-password-1"),
        "invalid name": ("../etc/passwd", "some-password-1"),
        "wrong password": ("vera", "not-vera-password"),
        "no password (OIDC only)": ("olga", "some-password-1"),
        "locked, wrong password": ("otto", "not-otto-password"),
        "locked, right password": ("otto", people["otto"][1]),
    }
    answers = {}
    for case, (name, password) in cases.items():
        before = hasher.calls
        answers[case] = _answer(_attempt(client, name, password))
        assert hasher.calls == before + 1, f"{case}: not exactly one hash"
    first = next(iter(answers.values()))
    assert first[:3] == ((303,), 200, "http://127.0.0.1/signin")
    assert users.REFUSED in first[3]
    for case, answer in answers.items():
        assert answer == first, f"{case} answers differently"
    # refused before hashing (this address's allowance spent) looks the same too
    spent = app_for(signin_per_address_per_min=1, signin_per_s=1000)
    late = _client(spent, "198.51.100.2")
    _attempt(late, "vera", "not-vera-password")
    before = hasher.calls
    throttled = _answer(_attempt(late, "vera", "not-vera-password"))
    assert hasher.calls == before
    assert throttled[:3] == first[:3]
    assert users.REFUSED in throttled[3]


def test_signin__a_strangers_wrong_passwords_do_not_lock_the_user_out_from_another_address(
    app_for: Any, people: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    app = app_for(signin_per_address_per_min=1000, signin_per_s=1000)  # signin_failures=3
    stranger = _client(app, "203.0.113.66")
    for _ in range(5):
        _attempt(stranger, "adam", "guess-guess-guess")
    # the stranger's address is locked out, even with the right password
    r = _attempt(stranger, "adam", people["adam"][1])
    assert users.REFUSED in r.text
    assert {u.name: u.locked for u in list_users(settings)}["adam"]
    # the real admin signs in from theirs
    assert sign_in(_client(app, "192.0.2.10"), "adam", people["adam"][1])
    rows = conn.execute(
        "SELECT name, address, failures FROM engine_console_signin_failures"
    ).fetchall()
    assert rows == [{"name": "adam", "address": "203.0.113.66", "failures": 3}]


def test_signin__a_good_sign_in_clears_its_addresss_failures_and_a_new_password_every_lock(
    app_for: Any, people: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    app = app_for(signin_per_address_per_min=1000, signin_per_s=1000)
    mine, other = _client(app, "192.0.2.10"), _client(app, "203.0.113.66")
    for _ in range(2):
        _attempt(mine, "adam", "mistyped-password")
    for _ in range(3):
        _attempt(other, "adam", "guess-guess-guess")
    assert sign_in(mine, "adam", people["adam"][1])
    rows = conn.execute("SELECT address FROM engine_console_signin_failures").fetchall()
    assert rows == [{"address": "203.0.113.66"}]  # the stranger's lock stays
    users.set_password(settings, "adam", "a brand new password 8", actor="test")
    rows = conn.execute("SELECT address FROM engine_console_signin_failures").fetchall()
    assert rows == []
    assert sign_in(other, "adam", "a brand new password 8")


def test_signin__the_forwarded_address_counts_only_behind_a_trusted_proxy(
    app_for: Any, people: Any, hasher: CountingHasher
) -> None:
    untrusted = _client(app_for(signin_per_address_per_min=2, signin_per_s=1000), "10.0.3.4")
    for i in range(5):  # a made-up header per attempt buys no fresh allowance
        untrusted.headers["x-forwarded-for"] = f"203.0.113.{i}"
        _attempt(untrusted, "nobody", "guess-guess-guess")
    assert hasher.calls == 2
    app = app_for(
        signin_per_address_per_min=2, signin_per_s=1000, trusted_proxies=[ip_network("10.0.0.0/16")]
    )
    behind = _client(app, "10.0.3.4")  # the load balancer
    for i in range(5):  # five people behind it
        behind.headers["x-forwarded-for"] = f"198.51.100.99, 203.0.113.{i}"
        _attempt(behind, "nobody", "guess-guess-guess")
    assert hasher.calls == 2 + 5


def test_signin__a_refusal_page_names_no_user_and_no_reason(app_for: Any, people: Any) -> None:
    app = app_for(signin_per_address_per_min=1000, signin_per_s=1000)
    client = _client(app, "198.51.100.1")
    for _ in range(4):
        r = _attempt(client, "otto", "not-otto-password")
    assert "too many failed" not in r.text
    assert "locked" not in r.text
    assert not re.search(r"\botto\b", r.text)
    assert SECRET not in r.text
