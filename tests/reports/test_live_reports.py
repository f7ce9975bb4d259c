"""`engine reports serve` shows running jobs live: pages reload themselves until their job ends."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from browser import evaluate
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended, wait_until

from engine import submit
from engine.config import Settings
from engine.reports import render_job_report
from engine.reports.serve import make_server

REFRESH = '<meta http-equiv="refresh" content="1">'
# what a test reads of the page the browser shows now (None while it is being replaced)
RUN_STATE = """(() => document.readyState !== "complete" ? null : {
  status: document.querySelector("h1 .badge").textContent,
  refresh: (document.querySelector('meta[http-equiv="refresh"]') || {}).content || null,
  live: document.getElementById("live") !== null,
  loaded: performance.timeOrigin,
})()"""
INDEX_STATE = """(() => document.readyState !== "complete" ? null : {
  status: document.querySelector("#runs tbody tr").dataset.status,
  flow: document.getElementById("f-flow").value,
  refresh: (document.querySelector('meta[http-equiv="refresh"]') || {}).content || null,
  live: document.getElementById("live") !== null,
  loaded: performance.timeOrigin,
})()"""


@pytest.fixture
def fast(settings: Settings, tmp_path: Path) -> Settings:
    return fast_settings(settings, reports_dir=tmp_path / "out")


@pytest.fixture
def server(fast: Settings) -> Iterator[str]:
    httpd = make_server(fast, "127.0.0.1", 0, refresh_s=1)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=30)


@pytest.fixture
def held(fast: Settings, tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A chain job whose step b is held running in a worker until ``<hold>.release`` exists."""
    hold = tmp_path / "hold"
    job = submit("chain", {"hold_file": str(hold)}, settings=fast, registry=flows_registry())
    with thread_worker(fast):
        wait_until(lambda: Path(f"{hold}.started").exists(), what="step b to start")
        yield job, hold
        Path(f"{hold}.release").touch()  # a failed test must not leave the worker held


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.headers["Cache-Control"] == "no-store"
        return str(response.read().decode("utf-8"))


def test_serve__pages_reload_while_their_job_runs_and_stop_when_it_ended(
    fast: Settings, conn: psycopg.Connection[Any], server: str, held: tuple[Any, Path]
) -> None:
    job, hold = held
    page = f"{server}/runs/{job.job_id}.html"
    running = _get(page)
    assert REFRESH in running and "until the job ends" in running
    assert ">running</span></h1>" in running
    assert REFRESH in _get(server + "/")
    # a stored report never reloads, even of a running job
    stored = Path(render_job_report(fast, job.job_id)).read_text(encoding="utf-8")
    assert "http-equiv" not in stored and 'id="live"' not in stored

    Path(f"{hold}.release").touch()
    assert wait_job_ended(conn, job.job_id) == "done"
    ended = _get(page)
    assert "http-equiv" not in ended and 'id="live"' not in ended
    assert ">done</span></h1>" in ended
    assert "http-equiv" not in _get(server + "/")


def _state(page: Any, expression: str, **expected: Any) -> dict[str, Any] | None:
    state = evaluate(page, expression)
    if state is None or any(state[k] != v for k, v in expected.items()):
        return None
    return dict(state)


def test_browser__a_running_jobs_page_reloads_itself_until_it_shows_the_job_done(
    conn: psycopg.Connection[Any],
    server: str,
    held: tuple[Any, Path],
    browser: Any,
    tmp_path: Path,
) -> None:
    job, hold = held
    context = browser.new_context(viewport={"width": 1280, "height": 1400})
    try:
        run = context.new_page()
        run.goto(f"{server}/runs/{job.job_id}.html")
        index = context.new_page()
        index.goto(f"{server}/index.html?flow=chain")  # a filter kept by reloads
        first = wait_until(
            lambda: _state(run, RUN_STATE, status="running", refresh="1", live=True),
            what="the page to show the job running",
        )
        wait_until(
            lambda: _state(index, INDEX_STATE, status="running", flow="chain", refresh="1"),
            what="the index to show the job running",
        )
        # the browser reloads the page by itself while the job runs
        wait_until(
            lambda: (
                (s := _state(run, RUN_STATE, status="running")) and s["loaded"] > first["loaded"]
            ),
            what="the browser to reload the running job's page",
        )
        run.screenshot(path=tmp_path / "live-running.png")

        Path(f"{hold}.release").touch()
        assert wait_job_ended(conn, job.job_id) == "done"
        # re-fetched by the browser's own reload, and the reloading stops there
        done = wait_until(
            lambda: _state(run, RUN_STATE, status="done"), what="the page to show the job done"
        )
        assert done["refresh"] is None and done["live"] is False
        ended = wait_until(
            lambda: _state(index, INDEX_STATE, status="done"), what="the index to show it done"
        )
        assert ended["refresh"] is None and ended["live"] is False and ended["flow"] == "chain"
        run.screenshot(path=tmp_path / "live-done.png")
    finally:
        context.close()
    for name in ("live-running.png", "live-done.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
