"""What an operator reads on the console is true: the workers' running step runs, and an
outage of the database said as one (503, with the console's security headers).
"""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from consolesupport import Served, csrf_of, free_port, sign_in
from harness import fast_settings, flows_registry, thread_worker, wait_until
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from pydantic import SecretStr
from starlette.routing import Route
from starlette.testclient import TestClient

from engine import submit
from engine.config import Settings
from engine.console import users
from engine.console.app import create_app
from engine.console.extension import ConsolePage, PageRequest
from engine.console.settings import ConsoleSettings
from engine.flow.registry import Registry
from engine.infra.outage import is_outage
from engine.reports.context import build_run_report
from engine.store import db
from engine.store.read import sqlalchemy_engine


def _workers(html: str) -> dict[str, int]:
    """The Workers page's rows: worker id -> the step runs it holds (the "running" column)."""
    rows = re.findall(r"<tr><td class=\"mono\">([^<]+)</td>.*?</tr>", html, flags=re.S)
    running = re.findall(
        r"<tr><td class=\"mono\">[^<]+</td>(?:<td[^>]*>.*?</td>){5}<td class=\"num\">(\d+)</td>",
        html,
        flags=re.S,
    )
    assert len(rows) == len(running), html
    return {w: int(n) for w, n in zip(rows, running, strict=True)}


def test_workers__a_worker_holding_two_step_runs_shows_two_running(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    fast = fast_settings(settings, concurrency=2)
    holds = [tmp_path / "one", tmp_path / "two"]
    for n, hold in enumerate(holds):
        params = {"n": n, "hold_file": str(hold), "hold_step": "a"}
        submit("chain", params, settings=settings, registry=flows_registry())
    with thread_worker(fast, worker_id="ops-host:4242") as worker:
        try:
            for hold in holds:
                wait_until(
                    lambda h=hold: Path(f"{h}.started").exists(), what=f"{hold.name} to start"
                )
            owners = {
                r["lease_owner"]
                for r in conn.execute(
                    "SELECT lease_owner FROM engine_step_runs WHERE status = 'running'"
                )
            }
            # as a worker writes them: one lease per slot, the slot after the worker's id
            assert owners == {"ops-host:4242/0", "ops-host:4242/1"}
            page = client_for("vera").get("/workers").text
            assert _workers(page) == {worker.worker_id: 2}
        finally:
            for hold in holds:
                Path(f"{hold}.release").touch()


# what every page and action answers while the database cannot be reached
UNREACHABLE = "the engine's database is unreachable; try again in a moment"
NEEDS_NO_DATABASE = {
    ("GET", "/signin"),
    ("GET", "/console.js"),
    ("GET", "/favicon.svg"),
    ("GET", "/favicon.ico"),
}
PASSWORD_IN_URL = "hunter2-not-for-pages"


def _concrete(path: str, job: uuid.UUID) -> str:
    return (
        path.replace("{job}", str(job))
        .replace("{id:int}", "1")
        .replace("{name}", "nightly")
        .replace("{action}", "pause")
        .replace("{page}", "periods")
    )


def _assert_unavailable(r: Any, what: object) -> None:
    assert r.status_code == 503, (what, r.status_code, r.text[:300])
    assert UNREACHABLE in r.text, what
    assert PASSWORD_IN_URL not in r.text and "Traceback" not in r.text, what
    assert r.headers["x-frame-options"] == "DENY", what
    assert r.headers["x-content-type-options"] == "nosniff", what
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"], what
    assert r.headers["cache-control"] == "no-store", what


def _down_settings(settings: Settings) -> Settings:
    """The test's settings pointed at a closed port on 127.0.0.1 (with a password to keep)."""
    url = f"postgresql://postgres:{PASSWORD_IN_URL}@127.0.0.1:{free_port()}/postgres"
    return settings.model_copy(update={"database_url": SecretStr(url), "connect_timeout_s": 2})


def test_console__every_page_and_action_answers_503_with_its_headers_while_the_database_is_down(
    client_for: Any,
    settings: Settings,
    console_conf: ConsoleSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adam = client_for("adam")  # signed in while the database answered
    token = csrf_of(adam.get("/").text)
    job = uuid.uuid4()
    registry = Registry.load(["testflows", "flows.tools"])
    down = TestClient(create_app(_down_settings(settings), console_conf, registry))
    down.base_url = adam.base_url
    down.cookies = adam.cookies
    caplog.set_level(logging.INFO)
    answered = 0
    routes = [r for r in down.app.routes if isinstance(r, Route)]
    assert len(routes) >= 20
    for route in routes:
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            path = _concrete(route.path, job)
            data = {"csrf": token, "name": "adam", "password": "x"} if method == "POST" else None
            # the guard reads the user from the database first: it is where most fail
            r = down.request(method, path, data=data, follow_redirects=False)
            if (method, route.path) in NEEDS_NO_DATABASE and r.status_code == 200:
                assert r.headers["x-frame-options"] == "DENY"
                continue
            _assert_unavailable(r, (method, path))
            answered += 1
    # signed out: a sign-in needs the database too
    anonymous = TestClient(create_app(_down_settings(settings), console_conf, registry))
    anonymous.base_url = adam.base_url
    signin = anonymous.get("/signin")
    r = anonymous.post(
        "/signin", data={"name": "adam", "password": "x", "csrf": csrf_of(signin.text)}
    )
    _assert_unavailable(r, "POST /signin signed out")
    answered += 1
    # one line per answer, no traceback, no password
    said = [rec for rec in caplog.records if "unreachable" in rec.getMessage()]
    assert len(said) == answered, [rec.getMessage() for rec in said]
    assert all(rec.exc_info is None for rec in caplog.records)
    assert PASSWORD_IN_URL not in caplog.text


def test_console__a_database_that_stops_accepting_connections_is_said_over_http_then_recovers(
    app_for: Any,
    people: Any,
    settings: Settings,
    pg_admin: str,
    dbinfo: str,
) -> None:
    dbname = conninfo_to_dict(dbinfo)["dbname"]
    app = app_for(Registry.load(["testflows", "flows.tools"]))
    with Served(app) as served, httpx.Client(base_url=served.url, follow_redirects=True) as http:
        signin = http.get("/signin")
        r = http.post(
            "/signin",
            data={"name": "otto", "password": people["otto"][1], "csrf": csrf_of(signin.text)},
        )
        assert r.status_code == 200 and "Runs" in r.text, r.text[:300]
        token = csrf_of(r.text)
        with psycopg.connect(pg_admin, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(
                    sql.Identifier(dbname)
                )
            )
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (dbname,),
            )
            try:
                _assert_unavailable(http.get("/workers"), "GET /workers")
                _assert_unavailable(http.get(f"/runs/{uuid.uuid4()}/version"), "version")
                cancel = http.post(f"/runs/{uuid.uuid4()}/cancel", data={"csrf": token})
                _assert_unavailable(cancel, "POST cancel")
            finally:
                admin.execute(
                    sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(
                        sql.Identifier(dbname)
                    )
                )
        back = http.get("/workers")
        assert back.status_code == 200 and "Workers" in back.text


def test_console__each_way_a_page_reads_the_database_fails_as_an_outage_when_it_is_down(
    settings: Settings,
) -> None:
    """Past the guard too: the psycopg connections and the reports' SQLAlchemy engine."""
    down = _down_settings(settings)
    failures: list[BaseException] = []
    for read in (
        lambda: db.connect(down, autocommit=True),
        lambda: build_run_report(sqlalchemy_engine(down), uuid.uuid4(), None),
        lambda: users.account(down, "adam"),
    ):
        with pytest.raises(Exception) as raised:  # noqa: PT011 (any: what matters is below)
            read()
        failures.append(raised.value)
    assert all(is_outage(exc) for exc in failures), [repr(e) for e in failures]
    assert all(PASSWORD_IN_URL not in str(exc) for exc in failures)


def test_console__an_unexpected_error_answers_500_with_the_security_headers(
    app_for: Any, people: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(request: PageRequest) -> list[Any]:
        raise RuntimeError("a bug in a page")

    registry = Registry.load(["testflows"])
    registry.console_pages.append(ConsolePage(name="broken", title="Broken", view=broken))
    client = TestClient(app_for(registry), raise_server_exceptions=False)
    client.base_url = "http://127.0.0.1"
    sign_in(client, "vera", people["vera"][1])
    r = client.get("/x/broken")
    assert r.status_code == 500 and "Traceback" not in r.text and "a bug" not in r.text
    assert r.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert not [rec for rec in caplog.records if "unreachable" in rec.getMessage()]
