"""Sessions end when they should; the load balancer's sign-in accepts only our load balancer.

Over HTTP against the app (Starlette's TestClient, in process) and against a
running ``engine console``; the test's real database. Time is moved by ageing
the session rows, never by sleeping.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from consolesupport import (
    ALB,
    ARN,
    CLIENT,
    ISSUER,
    PASSWORDS,
    SECRET,
    alb_key_pair,
    alb_token,
    csrf_of,
    free_port,
    session_cookie,
    sign_in,
)
from harness import engine_cli
from pydantic import ValidationError
from starlette.testclient import TestClient

from engine.config import Settings
from engine.console.app import create_app
from engine.console.settings import ConsoleSettings
from engine.console.users import add_user, remove_user, set_password, set_role
from engine.errors import ConfigError

H = "x-amzn-oidc-data"
COOKIE = "engine_console"


def _copy(client_for: Callable[[str | None], TestClient], client: TestClient) -> TestClient:
    """Another browser holding a copy of ``client``'s session cookie."""
    thief = client_for(None)
    thief.cookies.set(COOKIE, client.cookies[COOKIE])
    return thief


def _status(client: TestClient, **headers: str) -> int:
    return client.get("/", headers=headers, follow_redirects=False).status_code


def _age(conn: psycopg.Connection[Any], user: str, **columns: str) -> None:
    """Move a session's clocks back: ``column=interval`` (e.g. last_seen_at='31 minutes').

    A session begun earlier had a password set earlier still: moving ``created_at`` back
    moves the user's ``password_changed_at`` back as much (else it would read as a change).
    """
    for column, interval in columns.items():
        assert column in ("created_at", "last_seen_at", "expires_at", "token_expires_at")
        conn.execute(
            f"UPDATE engine_console_sessions SET {column} = {column} - %s::interval"
            " WHERE user_name = %s",
            (interval, user),
        )
        if column == "created_at":
            conn.execute(
                "UPDATE engine_console_users SET password_changed_at = password_changed_at"
                " - %s::interval WHERE name = %s",
                (interval, user),
            )


def _sessions(conn: psycopg.Connection[Any], user: str) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT * FROM engine_console_sessions WHERE user_name = %s ORDER BY created_at", (user,)
    ).fetchall()


# -- sign-out, and changes of the user ----------------------------------------------------


def test_sessions__a_cookie_copied_before_sign_out_is_refused_after_it(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    otto = client_for("otto")
    copy = _copy(client_for, otto)
    assert _status(copy) == 200
    r = otto.post("/signout", data={"csrf": csrf_of(otto.get("/").text)}, follow_redirects=False)
    assert r.status_code == 303
    assert _status(copy) == 303
    assert _status(otto) == 303
    assert _sessions(conn, "otto") == []
    # a POST with the copy is refused too, and changes nothing
    r = copy.post("/dead-letters/purge", data={"csrf": "x"}, follow_redirects=False)
    assert r.status_code == 401


def test_sessions__the_database_holds_a_hash_of_the_session_id_never_the_id(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    vera = client_for("vera")
    sid = session_cookie(vera)["sid"]
    assert len(sid) >= 43  # 256 random bits
    rows = _sessions(conn, "vera")
    assert [r["id_hash"] for r in rows] == [hashlib.sha256(sid.encode()).hexdigest()]
    assert sid not in str(rows)
    assert set(session_cookie(vera)) <= {"sid", "csrf", "flash"}  # no name, role or hash
    # each sign-in is a new session id (no fixation): the old cookie ends with it
    again = sign_in(client_for(None), "vera", PASSWORDS["vera"][1])
    assert session_cookie(again)["sid"] != sid


@pytest.mark.parametrize("change", ["password", "role", "removal", "promotion by SQL"])
def test_sessions__a_change_of_the_user_ends_their_sessions_at_the_next_request(
    change: str, client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    otto = client_for("otto")
    copy, adam = _copy(client_for, otto), client_for("adam")
    assert _status(otto) == _status(copy) == 200
    if change == "password":
        set_password(settings, "otto", "a brand new password 7", actor="adam")
    elif change == "role":
        set_role(settings, "otto", "viewer", actor="adam")
    elif change == "removal":
        remove_user(settings, "otto", actor="adam")
    else:  # around `engine users`: the session still ends, made with another role
        conn.execute("UPDATE engine_console_users SET role = 'admin' WHERE name = 'otto'")
    assert _status(otto) == 303
    assert _status(copy) == 303
    assert _status(adam) == 200  # only otto's ended
    if change == "role":  # signed in again, with the new role
        viewer = sign_in(client_for(None), "otto", PASSWORDS["otto"][1])
        r = viewer.post("/dead-letters/purge", data={"csrf": csrf_of(viewer.get("/").text)})
        assert r.status_code == 403 and "needs operate" in r.text


def test_sessions__a_hash_of_older_parameters_signs_in_and_is_left_to_engine_users(
    client_for: Any, people: Any, conn: psycopg.Connection[Any]
) -> None:
    from argon2 import PasswordHasher

    # a hash of weaker parameters than today's: the console's role may not write a hash, so
    # the sign-in leaves it (`engine users passwd` replaces it) and keeps the session
    weak = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1).hash(PASSWORDS["otto"][1])
    conn.execute("UPDATE engine_console_users SET password_hash = %s WHERE name = 'otto'", (weak,))
    otto = client_for("otto")
    row = conn.execute("SELECT password_hash FROM engine_console_users WHERE name = 'otto'")
    assert row.fetchone()["password_hash"] == weak  # not written by the console
    assert _status(otto) == 200  # and still signed in


# -- idle timeout and absolute lifetime ----------------------------------------------------


def test_sessions__an_idle_session_ends_after_the_idle_minutes(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    otto = client_for("otto")  # ENGINE_CONSOLE_SESSION_IDLE_MINUTES: 30 by default
    _age(conn, "otto", last_seen_at="29 minutes")
    assert _status(otto) == 200  # in use: seen again now
    seen = _sessions(conn, "otto")[0]["last_seen_at"]
    assert (
        conn.execute("SELECT clock_timestamp() - %s::timestamptz AS d", (seen,))
        .fetchone()["d"]
        .total_seconds()
        < 60
    )
    _age(conn, "otto", last_seen_at="31 minutes")
    assert _status(otto) == 303
    assert _sessions(conn, "otto") == []  # the ended row goes at once


def test_sessions__a_live_pages_polling_does_not_keep_an_idle_session(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    from engine import submit
    from engine.flow.registry import Registry

    job = submit("chain", {}, settings=settings, registry=Registry.load(["testflows"])).job_id
    otto = client_for("otto")
    _age(conn, "otto", last_seen_at="29 minutes")
    before = _sessions(conn, "otto")[0]["last_seen_at"]
    assert otto.get(f"/runs/{job}/version").status_code == 200  # the tab asks by itself
    assert otto.get(f"/runs/{job}/live").status_code == 200
    assert _sessions(conn, "otto")[0]["last_seen_at"] == before
    _age(conn, "otto", last_seen_at="2 minutes")
    assert otto.get(f"/runs/{job}/version", follow_redirects=False).status_code == 303


def test_sessions__the_idle_minutes_are_a_setting(
    app_for: Any, people: Any, conn: psycopg.Connection[Any]
) -> None:
    app = app_for(session_idle_minutes=5)
    otto = sign_in(TestClient(app, base_url="http://127.0.0.1"), "otto", PASSWORDS["otto"][1])
    _age(conn, "otto", last_seen_at="6 minutes")
    assert _status(otto) == 303


@pytest.mark.parametrize(
    "aged",
    [
        {"created_at": "2 minutes", "expires_at": "2 minutes"},
        {"expires_at": "2 minutes"},
        {"created_at": "2 minutes"},
    ],
    ids=["past its lifetime", "past its expiry", "older than the hours now set"],
)
def test_sessions__a_session_in_use_ends_at_its_absolute_lifetime(
    aged: dict[str, str], client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    otto = client_for("otto")  # ENGINE_CONSOLE_SESSION_HOURS: 12 by default
    row = _sessions(conn, "otto")[0]
    assert (row["expires_at"] - row["created_at"]).total_seconds() == pytest.approx(12 * 3600, 1)
    _age(conn, "otto", created_at="11 hours 59 minutes", expires_at="11 hours 59 minutes")
    assert _status(otto) == 200  # in use all along: never idle
    _age(conn, "otto", **aged)
    assert _status(otto) == 303


def test_sessions__ended_sessions_are_deleted_at_a_sign_in(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    client_for("otto"), client_for("vera"), client_for("anna")
    _age(conn, "otto", last_seen_at="1 hour")
    _age(conn, "vera", expires_at="13 hours")
    client_for("adam")
    left = conn.execute("SELECT user_name FROM engine_console_sessions ORDER BY user_name")
    assert [r["user_name"] for r in left.fetchall()] == ["adam", "anna"]


# -- the cookie ------------------------------------------------------------------------


def test_sessions__the_cookie_is_secure_by_default(
    settings: Settings, people: Any, console_conf: ConsoleSettings
) -> None:
    app = create_app(settings, console_conf.model_copy(update={"secure_cookie": None}))
    client = TestClient(app, base_url="https://console.example")
    page = client.get("/signin")
    r = client.post(
        "/signin",
        data={"name": "vera", "password": PASSWORDS["vera"][1], "csrf": csrf_of(page.text)},
        follow_redirects=False,
    )
    cookie = r.headers["set-cookie"].lower()
    assert "; secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert ConsoleSettings().secure_cookie is None  # unset: Secure (create_app's default)


@pytest.fixture
def served(settings: Settings, people: Any) -> Iterator[Callable[..., Any]]:
    """``served(host, **env)``: ``engine console`` running; (its url, what it said on stderr)."""
    started: list[subprocess.Popen[str]] = []

    def serve(host: str = "127.0.0.1", **env: str) -> tuple[str, str]:
        assert settings.database_url is not None
        port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ENGINE_CONSOLE_")}
        environ.pop("ENGINE_FLOW_MODULES", None)
        environ.update(ENGINE_DATABASE_URL=settings.database_url.get_secret_value(), **env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "console", "--host", host, "--port", str(port)],
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        said = []
        assert proc.stderr is not None
        for line in proc.stderr:  # it says what it serves before it serves
            said.append(line)
            if "console on http" in line:
                break
        assert proc.poll() is None, "".join(said)
        deadline = time.monotonic() + 60
        while True:  # until it accepts connections (a readiness wait, not a tuned sleep)
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "".join(said)
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}", "".join(said)

    yield serve
    for proc in started:
        proc.kill()
        proc.wait(timeout=30)


def test_sessions__engine_console_on_loopback_http_sends_no_secure_cookie_and_says_so(
    served: Callable[..., Any],
) -> None:
    url, said = served("127.0.0.1")
    assert "plain http allowed on the loopback address 127.0.0.1" in said
    assert "not Secure" in said
    with httpx.Client(base_url=url) as client:
        page = client.get("/signin")
        r = client.post(
            "/signin",
            data={"name": "vera", "password": PASSWORDS["vera"][1], "csrf": csrf_of(page.text)},
        )
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "; secure" not in cookie
        assert client.get("/", follow_redirects=False).status_code == 200


def test_sessions__engine_console_refuses_an_insecure_cookie_beyond_loopback(
    settings: Settings, people: Any
) -> None:
    done = engine_cli(
        settings,
        "console",
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
        env={"ENGINE_CONSOLE_SECRET": SECRET, "ENGINE_CONSOLE_SECURE_COOKIE": "false"},
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "ENGINE_CONSOLE_SECURE_COOKIE=false" in done.stderr
    assert "loopback" in done.stderr


# -- the load balancer's sign-in ---------------------------------------------------------


@pytest.fixture
def alb_key(tmp_path: Path) -> Any:
    return alb_key_pair(tmp_path)


def test_alb__a_token_not_of_our_load_balancer_issuer_and_client_or_expired_is_refused(
    app_for: Any, settings: Settings, alb_key: Any, tmp_path: Path
) -> None:
    add_user(settings, "adam@example.com", "admin", None, actor="test")
    other = alb_key_pair(tmp_path, kid="kid-2")  # a key of the region, another load balancer's
    app = app_for(alb_keys_dir=tmp_path, oidc_role="viewer", **ALB)
    now = time.time()

    def token(**kw: Any) -> str:
        return alb_token(
            kw.pop("key", alb_key), email="adam@example.com", **{"exp": now + 60, **kw}
        )

    good = TestClient(app, base_url="http://127.0.0.1")
    r = good.get("/audit", headers={H: token()}, follow_redirects=False)
    assert r.status_code == 200 and "adam@example.com" in r.text
    refused = {
        "another signer": token(signer=ARN.replace("/abc", "/other")),
        "another account's signer": token(signer=ARN.replace("123456789012", "999999999999")),
        "no signer": token(signer=None),
        "another issuer": token(iss="https://evil.example"),
        "no issuer": token(iss=None),
        "another issuer in the claims": token(claim_iss="https://evil.example"),
        "another client": token(client="someone-elses-client"),
        "no client": token(client=None),
        "expired": token(exp=now - 5),
        "expired by its header": token(header_exp=now - 5),
        "another signer with its own key": token(key=other, kid="kid-2", signer=ARN + "x"),
        "a key id that is a path": token(kid="../kid-1"),
        "a key id that is a URL": token(kid="https://evil.example/kid-1"),
    }
    for why, bad in refused.items():
        fresh = TestClient(app, base_url="http://127.0.0.1")
        r = fresh.get("/audit", headers={H: bad}, follow_redirects=False)
        assert r.status_code == 401, why
        assert _status(fresh) == 303, why  # and no session was made


def test_alb__several_load_balancers_may_be_ours(
    app_for: Any, settings: Settings, alb_key: Any, tmp_path: Path
) -> None:
    add_user(settings, "anna@example.com", "accountant", None, actor="test")
    second = ARN.replace("/abc", "/def")
    app = app_for(alb_keys_dir=tmp_path, **{**ALB, "alb_arn": f"{ARN}, {second}"})
    for signer in (ARN, second):
        client = TestClient(app, base_url="http://127.0.0.1")
        t = alb_token(alb_key, email="anna@example.com", exp=time.time() + 60, signer=signer)
        assert _status(client, **{H: t}) == 200, signer
    with pytest.raises(ValidationError, match="invalid load balancer ARN 'arn:aws:s3:::x'"):
        ConsoleSettings(alb_arn=f"{ARN},arn:aws:s3:::x")


def test_alb__a_session_made_from_a_token_ends_when_the_token_expires(
    app_for: Any, settings: Settings, alb_key: Any, tmp_path: Path, conn: psycopg.Connection[Any]
) -> None:
    add_user(settings, "anna@example.com", "accountant", None, actor="test")
    app = app_for(alb_keys_dir=tmp_path, **ALB)
    client = TestClient(app, base_url="http://127.0.0.1")
    exp = time.time() + 60
    assert _status(client, **{H: alb_token(alb_key, email="anna@example.com", exp=exp)}) == 200
    row = _sessions(conn, "anna@example.com")[0]
    assert row["via"] == "oidc" and row["token_expires_at"].timestamp() == int(exp)
    assert _status(client) == 200  # the cookie alone, while the token holds
    # a later token of the same person moves the end forward, in the same session
    later = alb_token(alb_key, email="anna@example.com", exp=exp + 120)
    assert _status(client, **{H: later}) == 200
    rows = _sessions(conn, "anna@example.com")
    assert len(rows) == 1 and rows[0]["token_expires_at"].timestamp() == int(exp + 120)
    _age(conn, "anna@example.com", token_expires_at="10 minutes")
    assert _status(client) == 303


def test_alb__a_token_of_someone_else_replaces_the_session(
    app_for: Any, settings: Settings, alb_key: Any, tmp_path: Path, people: Any
) -> None:
    add_user(settings, "vera@example.com", "viewer", None, actor="test")
    app = app_for(alb_keys_dir=tmp_path, **ALB)
    client = sign_in(TestClient(app, base_url="http://127.0.0.1"), "adam", PASSWORDS["adam"][1])
    assert "adam" in client.get("/").text
    t = alb_token(alb_key, email="vera@example.com", exp=time.time() + 60)
    page = client.get("/", headers={H: t}).text
    assert "vera@example.com" in page
    r = client.post("/dead-letters/purge", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert r.status_code == 403  # a viewer now, not adam


def test_alb__the_console_refuses_to_start_without_the_load_balancers_arn_issuer_and_client(
    settings: Settings, app_for: Any, tmp_path: Path
) -> None:
    region = {"ENGINE_CONSOLE_ALB_REGION": "eu-west-1"}
    cases = [
        (
            region,
            ["ENGINE_CONSOLE_ALB_ARN", "ENGINE_CONSOLE_ALB_ISSUER", "ENGINE_CONSOLE_ALB_CLIENT_ID"],
        ),
        (
            {**region, "ENGINE_CONSOLE_ALB_ARN": ARN, "ENGINE_CONSOLE_ALB_CLIENT_ID": CLIENT},
            ["ENGINE_CONSOLE_ALB_ISSUER"],
        ),
        (
            {"ENGINE_CONSOLE_ALB_KEYS_DIR": str(tmp_path), "ENGINE_CONSOLE_ALB_ISSUER": ISSUER},
            ["ENGINE_CONSOLE_ALB_ARN", "ENGINE_CONSOLE_ALB_CLIENT_ID"],
        ),
    ]
    for env, missing in cases:
        done = engine_cli(settings, "console", "--port", str(free_port()), env=env, timeout=60)
        assert done.returncode == 3, (env, done.stderr)
        assert "refusing to start the console with the load balancer's sign-in" in done.stderr
        for name in missing:
            assert name in done.stderr, (name, done.stderr)
        named = {n for n in ALB_SETTINGS if n in done.stderr.split("without", 1)[1]}
        assert named == set(missing), done.stderr
    # the app itself refuses too, whoever builds it
    with pytest.raises(ConfigError, match="ENGINE_CONSOLE_ALB_ARN"):
        app_for(alb_keys_dir=tmp_path, alb_issuer=ISSUER, alb_client_id=CLIENT)
    # and the refusal of an address beyond this machine no longer suggests the region alone
    done = engine_cli(settings, "console", "--host", "0.0.0.0", "--port", "1")
    assert "ENGINE_CONSOLE_ALB_ARN" in done.stderr


ALB_SETTINGS = [
    "ENGINE_CONSOLE_ALB_ARN",
    "ENGINE_CONSOLE_ALB_ISSUER",
    "ENGINE_CONSOLE_ALB_CLIENT_ID",
]
