"""The console's security rules, over HTTP: sessions, roles, CSRF, the ALB's header, escaping.

No browser: Starlette's TestClient drives the app in process, on the test's
real database. What a person sees in a browser is tests/console/test_console_browser.py's.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from consolesupport import ALB, ARN, PASSWORDS, SECRET, alb_token, csrf_of, sign_in
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.routing import Route
from starlette.testclient import TestClient

from engine import submit
from engine.config import Settings
from engine.console import users
from engine.console.users import add_user
from engine.flow.registry import Registry

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _job(settings: Settings, **params: Any) -> uuid.UUID:
    """A pending job (no worker runs here)."""
    return submit("chain", params, settings=settings, registry=Registry.load(["testflows"])).job_id


def _audit_rows(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM engine_audit ORDER BY id").fetchall()


def _concrete(path: str, job: uuid.UUID) -> str:
    return (
        path.replace("{job}", str(job))
        .replace("{id:int}", "1")
        .replace("{name}", "nightly")
        .replace("{action}", "pause")
        .replace("{page}", "periods")
    )


def test_console__every_route_but_sign_in_refuses_without_a_session(
    client_for: Any, settings: Settings
) -> None:
    anonymous = client_for(None)
    job = _job(settings)
    routes = [r for r in anonymous.app.routes if isinstance(r, Route)]
    assert len(routes) >= 20
    for route in routes:
        for method in sorted(route.methods or ()):
            if method == "HEAD" or route.path == "/signin":
                continue
            r = anonymous.request(method, _concrete(route.path, job), follow_redirects=False)
            if route.path in ("/console.js", "/favicon.svg", "/favicon.ico"):
                assert r.status_code == 200  # a static script or icon: no data, no action
                continue
            if method == "GET":
                assert r.status_code == 303, (route.path, r.status_code)
                assert r.headers["location"].startswith("/signin")
            else:
                assert r.status_code == 401, (method, route.path, r.status_code)
    assert anonymous.get("/signin").status_code == 200


def test_console__a_post_without_or_with_a_wrong_csrf_token_changes_nothing(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    otto = client_for("otto")
    job = _job(settings)
    for data in ({}, {"csrf": "forged"}, {"csrf": ""}):
        r = otto.post(f"/runs/{job}/cancel", data={**data, "reason": "x"}, follow_redirects=False)
        assert r.status_code == 403
        assert "CSRF" in r.text
    status = conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job,)).fetchone()
    assert status == {"status": "pending"}
    assert [a for a in _audit_rows(conn) if a["action"] == "cancel"] == []
    # a token from another session is wrong too
    other = client_for("adam")
    token = csrf_of(other.get("/").text)
    r = otto.post(f"/runs/{job}/cancel", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 403
    # with its own token the same request works, and is recorded with the signed-in user
    token = csrf_of(otto.get(f"/runs/{job}.html").text)
    r = otto.post(f"/runs/{job}/cancel", data={"csrf": token, "reason": "wrong period"})
    assert r.status_code == 200
    assert f"job {job} cancelled" in r.text
    cancel = [a for a in _audit_rows(conn) if a["action"] == "cancel"]
    assert [(a["actor"], a["source"], a["reason"]) for a in cancel] == [
        ("otto", "console", "wrong period")
    ]


def test_console__roles_decide_what_a_user_may_do(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = _job(settings)
    vera, otto, anna = client_for("vera"), client_for("otto"), client_for("anna")
    page = vera.get(f"/runs/{job}.html").text
    # no button but the ids' copy buttons (type=button: they send nothing)
    body = re.sub(r'<button type="button" class="copy[^>]*>copy</button>', "", page)
    assert "Cancel job" not in page and "<button" not in body.split("</nav>", 1)[1]
    assert "Cancel job" in otto.get(f"/runs/{job}.html").text
    # a viewer and an accountant cannot cancel; an operator cannot approve
    for client in (vera, anna):
        token = csrf_of(client.get("/").text)
        r = client.post(f"/runs/{job}/cancel", data={"csrf": token}, follow_redirects=False)
        assert r.status_code == 403
    token = csrf_of(otto.get("/").text)
    r = otto.post(
        f"/runs/{job}/decide",
        data={"csrf": token, "signal": "go", "decision": "approve"},
        follow_redirects=False,
    )
    assert r.status_code == 403
    assert "needs approve" in r.text
    assert conn.execute("SELECT count(*) AS n FROM engine_signals").fetchone() == {"n": 0}


def test_console__failed_sign_ins_lock_the_user_even_for_the_right_password(
    client_for: Any, people: Any, conn: psycopg.Connection[Any]
) -> None:
    client = client_for(None)
    for _ in range(3):  # signin_failures=3 in these tests
        token = csrf_of(client.get("/signin").text)
        r = client.post("/signin", data={"name": "otto", "password": "nope", "csrf": token})
        assert "/signin" in str(r.url)
    token = csrf_of(client.get("/signin").text)
    r = client.post("/signin", data={"name": "otto", "password": people["otto"][1], "csrf": token})
    assert users.REFUSED in r.text  # locked from this address: answered as a wrong password
    assert client.get("/", follow_redirects=False).status_code == 303
    row = conn.execute("SELECT failures FROM engine_console_signin_failures WHERE name = 'otto'")
    assert row.fetchone() == {"failures": 3}
    # an unknown name answers as a wrong password does
    token = csrf_of(client.get("/signin").text)
    r = client.post("/signin", data={"name": "nobody", "password": "x", "csrf": token})
    assert users.REFUSED in r.text


def test_console__a_sign_in_without_its_csrf_token_is_refused(client_for: Any, people: Any) -> None:
    client = client_for(None)
    client.get("/signin")
    r = client.post(
        "/signin", data={"name": "otto", "password": people["otto"][1]}, follow_redirects=False
    )
    assert r.status_code == 403


def test_console__hostile_strings_are_escaped_and_no_secret_reaches_a_page_or_the_log(
    client_for: Any, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    job = _job(settings, hold_step=HOSTILE)
    adam = client_for("adam")
    token = csrf_of(adam.get(f"/runs/{job}.html").text)
    adam.post(f"/runs/{job}/cancel", data={"csrf": token, "reason": HOSTILE})
    pages = [
        "/",
        "/approvals",
        "/dead-letters",
        "/schedules",
        "/workers",
        "/audit",
        f"/runs/{job}.html",
        f"/runs/{job}/live",
        "/x/periods",
    ]
    for path in pages:
        r = adam.get(path)
        assert r.status_code == 200, path
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, path
        assert "$argon2" not in r.text and SECRET not in r.text, path
        assert r.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert "&lt;script&gt;alert" in adam.get("/audit").text
    cookie = adam.cookies.get("engine_console")
    assert cookie and "argon2" not in cookie
    logged = caplog.text
    assert "$argon2" not in logged and SECRET not in logged
    for _, (_, password) in PASSWORDS.items():
        assert password not in logged


def test_console__the_session_cookie_is_httponly_and_samesite_strict(
    client_for: Any, people: Any
) -> None:
    client = client_for(None)
    page = client.get("/signin")
    r = client.post(
        "/signin",
        data={"name": "vera", "password": people["vera"][1], "csrf": csrf_of(page.text)},
        follow_redirects=False,
    )
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie


def test_console__a_changed_password_ends_the_sessions_signed_in_with_the_old_one(
    client_for: Any, settings: Settings
) -> None:
    from engine.console.users import set_password

    otto, other = client_for("otto"), client_for("adam")
    assert otto.get("/", follow_redirects=False).status_code == 200
    set_password(settings, "otto", "a brand new password 7", actor="otto")
    assert otto.get("/", follow_redirects=False).status_code == 303
    assert other.get("/", follow_redirects=False).status_code == 200  # only otto's ended
    assert sign_in(client_for(None), "otto", "a brand new password 7")


def test_console__a_removed_user_is_refused_at_the_next_request(
    client_for: Any, settings: Settings
) -> None:
    from engine.console.users import remove_user

    otto = client_for("otto")
    assert otto.get("/", follow_redirects=False).status_code == 200
    remove_user(settings, "otto", actor="adam")
    assert otto.get("/", follow_redirects=False).status_code == 303


# -- the load balancer's OIDC header ----------------------------------------------------


@pytest.fixture
def alb_keys(tmp_path: Path) -> tuple[Path, Any, Any]:
    """A key pair the test makes: the public half where the console reads ALB keys."""
    key = ec.generate_private_key(ec.SECP256R1())
    other = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "kid-1.pem").write_bytes(pem)
    return tmp_path, key, other


def test_console__the_albs_signed_header_signs_in_and_a_forged_or_expired_one_is_refused(
    app_for: Any, settings: Settings, alb_keys: tuple[Path, Any, Any]
) -> None:
    folder, key, other = alb_keys
    add_user(settings, "anna@example.com", "accountant", None, actor="test")
    app = app_for(alb_keys_dir=folder, **ALB)
    client = TestClient(app, base_url="http://127.0.0.1")
    h = "x-amzn-oidc-data"
    good = alb_token(key, email="anna@example.com", exp=time.time() + 60)
    r = client.get("/approvals", headers={h: good}, follow_redirects=False)
    assert r.status_code == 200 and "anna@example.com" in r.text
    fresh = TestClient(app, base_url="http://127.0.0.1")
    refused = {
        "forged": alb_token(other, email="anna@example.com", exp=time.time() + 60),
        "expired": alb_token(key, email="anna@example.com", exp=time.time() - 5),
        "other signer": alb_token(
            key, email="anna@example.com", exp=time.time() + 60, signer=ARN + "x"
        ),
        "unknown key": alb_token(key, email="anna@example.com", exp=time.time() + 60, kid="k9"),
        "not a user": alb_token(key, email="eve@example.com", exp=time.time() + 60),
        "garbage": "not.a.token",
    }
    for why, token in refused.items():
        r = fresh.get("/approvals", headers={h: token}, follow_redirects=False)
        assert r.status_code == 401, why
    # without ALB settings the header is ignored: it cannot sign anyone in
    plain = TestClient(app_for(), base_url="http://127.0.0.1")
    r = plain.get("/approvals", headers={h: good}, follow_redirects=False)
    assert r.status_code == 303


def test_console__a_live_job_page_costs_one_query_per_interval_however_many_watch(
    app_for: Any, people: Any, settings: Settings
) -> None:
    job = _job(settings)
    app = app_for(Registry.load(["testflows"]), refresh_s=60)  # one interval spans the test
    clients = [
        sign_in(TestClient(app, base_url="http://127.0.0.1"), "vera", people["vera"][1])
        for _ in range(3)
    ]
    shared = app.state.shared
    before = shared.versions.queries
    answers = {c.get(f"/runs/{job}/version").json()["version"] for c in clients for _ in range(5)}
    assert len(answers) == 1
    assert shared.versions.queries - before == 1


def test_console__sign_in_never_redirects_to_another_host(client_for: Any, people: Any) -> None:
    for target in ("//evil.example/x", "/\\evil.example", "https://evil.example/", "/approvals"):
        client = client_for(None)
        token = csrf_of(client.get("/signin").text)
        r = client.post(
            "/signin",
            data={"name": "vera", "password": people["vera"][1], "csrf": token, "next": target},
            follow_redirects=False,
        )
        expected = "/approvals" if target == "/approvals" else "/"
        assert r.headers["location"] == expected, target
