"""HTML run reports rendered from real runs: states, escaping, validity, a real browser."""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from harness import fast_settings, flows_registry, thread_worker, wait_job_ended, wait_until

from engine import Registry, submit
from engine.cli import main
from engine.config import Settings
from engine.jobs import admin
from engine.reports import render_all, render_index, render_job_report
from engine.reports.serve import make_server
from engine.runner import claim
from engine.store import Claimed, db
from engine.transports.message import StepMessage
from flows.tools.seed import seed

PERIOD = "2026-11"
XSS = ["<script>alert(1)</script>", '"><img src=x onerror=alert(2)>', "{{ 7*7 }}"]
ERP_FLOWS = ["flows.costing", "flows.posting", "flows.migration"]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}

RUNNABLE = flows_registry().runnable()  # every test flow, at its version


# -- helpers -----------------------------------------------------------------------------


class _Markup(HTMLParser):
    """Balanced tags, and every element and attribute, for the checks below."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.script: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        (self.script if self.stack and self.stack[-1] == "script" else self.text).append(data)


def check_html(text: str) -> _Markup:
    """Parse strictly (html5lib when installed, and a balanced-tag check); no external URL."""
    parsed = _Markup()
    parsed.feed(text)
    parsed.close()
    assert parsed.problems == [], parsed.problems[:5]
    assert parsed.stack == [], f"unclosed: {parsed.stack}"
    try:
        import html5lib  # lazily: a dev dependency
    except ImportError:
        pass
    else:
        html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)
    assert not re.search(r"(?i)\b(?:https?|ftp|wss?):", text), "an external URL"
    assert "built-in method" not in text and "bound method" not in text, "a dict method shown"
    for tag, attrs in parsed.elements:
        for name in ("href", "src", "action", "data"):
            value = attrs.get(name) or ""
            assert not value.startswith("//"), f"<{tag} {name}={value!r}> is external"
        assert tag not in ("link", "iframe", "object", "embed", "img"), f"<{tag}> in a report"
    return parsed


def run_job(
    settings: Settings, conn: psycopg.Connection[Any], flow: str, params: dict[str, Any]
) -> uuid.UUID:
    registry = Registry.load(settings.flow_modules)
    job = submit(flow, params, settings=settings, registry=registry)
    with thread_worker(settings, registry):
        wait_job_ended(conn, job.job_id, timeout=120)
    return job.job_id


def page(settings: Settings, job_id: uuid.UUID) -> tuple[Path, str]:
    path = Path(render_job_report(settings, job_id))
    return path, path.read_text(encoding="utf-8")


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def fast(settings: Settings, tmp_path: Path) -> Settings:
    return fast_settings(settings, reports_dir=tmp_path / "out")


@pytest.fixture
def erp(settings: Settings, conn: psycopg.Connection[Any], tmp_path: Path) -> Settings:
    """A small seeded month, and settings whose flows are the ERP's."""
    seed(conn, stores=3, brands=2, employees=6, items=6, period=PERIOD, seed=7)
    return fast_settings(
        settings, flow_modules=ERP_FLOWS, concurrency=2, reports_dir=tmp_path / "out"
    )


# -- rendering from real runs -----------------------------------------------------------


def test_report__clean_costing_run_shows_header_graph_timeline_and_totals(
    erp: Settings, conn: psycopg.Connection[Any]
) -> None:
    run_job(erp, conn, "posting", {"period": PERIOD})  # costing values the posted moves
    job_id = run_job(erp, conn, "costing", {"period": PERIOD})
    path, html = page(erp, job_id)
    assert path == erp.reports_dir / "runs" / f"{job_id}.html"
    parsed = check_html(html)
    text = " ".join(parsed.text)
    for expected in ("costing", "done", str(job_id), "Per brand", "Per store", "Largest movers"):
        assert expected in text
    assert 'class="graph"' in html and 'class="gantt"' in html
    # the graph: five steps, cost_store fanned out over three stores
    assert "\u00d73 \u00b7 3/3 done" in text
    brands = conn.execute("SELECT code FROM erp_brands ORDER BY code").fetchall()
    stores = conn.execute("SELECT code FROM erp_stores ORDER BY code").fetchall()
    assert all(b["code"] in text for b in brands)
    assert all(s["code"] in text for s in stores)
    assert parsed.script == [], "a run report needs no JavaScript"


def test_report__posting_run_shows_counts_rejections_and_the_trial_balance_check(
    erp: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = run_job(erp, conn, "posting", {"period": PERIOD})
    _, html = page(erp, job_id)
    text = " ".join(check_html(html).text)
    assert "Trial-balance check" in text and "\u2713 balanced" in text
    rejected = conn.execute(
        "SELECT number FROM erp_documents WHERE status = 'rejected' AND period = %s", (PERIOD,)
    ).fetchall()
    assert all(r["number"] in text for r in rejected)


def test_report__retried_steps_are_marked_with_their_errors(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = run_job(fast, conn, "chain", {"fail_times": 2})
    _, html = page(fast, job_id)
    text = " ".join(check_html(html).text)
    assert text.count("planned failure") >= 2  # the retried events' details
    assert "b attempt 1 on" in html and ": retried" in html  # timeline bar titles
    assert "b attempt 3 on" in html and ": succeeded" in html


def test_report__a_reclaimed_step_is_marked_with_the_worker_it_came_from(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    a = conn.execute(
        "SELECT id FROM engine_step_runs WHERE job_id = %s AND step = 'a'", (job.job_id,)
    ).fetchone()
    assert a is not None
    with db.connect(fast) as c:
        message = StepMessage(job_id=job.job_id, step_run_id=a["id"])
        assert isinstance(claim(c, message, "vanished-worker", 30, RUNNABLE), Claimed)
    conn.execute(
        "UPDATE engine_step_runs SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        (a["id"],),
    )
    with thread_worker(fast):
        assert wait_job_ended(conn, job.job_id) == "done"
    _, html = page(fast, job.job_id)
    text = " ".join(check_html(html).text)
    assert "reclaimed" in text and "from: vanished-worker" in text
    assert "reclaimed from vanished-worker" in html  # the timeline marker
    assert "a attempt 1 on vanished-worker: lost" in html  # its attempt, in its own lane


def test_report__a_failed_job_shows_the_dead_letter_and_traceback(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    settings = fast.model_copy(update={"max_attempts": 2})
    job_id = run_job(settings, conn, "chain", {"fail_times": 99})
    _, html = page(settings, job_id)
    text = " ".join(check_html(html).text)
    assert "failed" in text and "dead letter" in text
    assert "Traceback (most recent call last)" in text
    assert "planned failure 2 of 99 in b" in text
    assert "not reached" in text  # step c never ran


def test_report__a_cancelled_job(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    settings = fast.model_copy(update={"heartbeat_s": 0.1})
    hold = tmp_path / "hold"
    job = submit("chain", {"hold_file": str(hold)}, settings=settings, registry=flows_registry())
    with thread_worker(settings) as worker:
        wait_until(lambda: (tmp_path / "hold.started").exists())
        admin.cancel(settings, job.job_id, actor="operator")
        wait_until(lambda: worker.outcomes.get("fenced") or worker.outcomes.get("cancelled"))
    _, html = page(settings, job.job_id)
    text = " ".join(check_html(html).text)
    assert "cancelled by operator" in text
    assert 'class="badge" style="background: #ef6c00">cancelled' in html


def test_report__shows_the_jobs_audit_trail_escaped(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    admin.cancel(fast, job.job_id, "<b>wrong</b> period", actor="<ann>")
    admin.retry_job(fast, job.job_id, actor="bob")
    _, html = page(fast, job.job_id)
    text = " ".join(check_html(html).text)
    assert "Audit trail" in text
    assert "&lt;ann&gt;" in html and "<ann>" not in html
    assert "&lt;b&gt;wrong&lt;/b&gt; period" in html
    assert html.index(">bob<") > html.index("&lt;ann&gt;"), "in the order they were written"


def test_report__a_job_without_operator_actions_has_no_audit_section(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job = submit("chain", {}, settings=fast, registry=flows_registry())
    _, html = page(fast, job.job_id)
    assert "Audit trail" not in html


def test_report__a_flow_not_registered_still_renders_without_graph(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    job_id = run_job(fast, conn, "fan", {"n": 2})
    other = fast.model_copy(update={"flow_modules": ["flows.example"]})
    _, html = page(other, job_id)
    text = " ".join(check_html(html).text)
    assert "is not registered" in text
    assert 'class="graph"' not in html
    assert "total" in text and "count" in text  # the generic summary of gather's output


# -- escaping ----------------------------------------------------------------------------


def test_report__user_strings_are_escaped_everywhere(
    erp: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    row = conn.execute(
        "SELECT (SELECT max(id) FROM erp_documents) AS doc, "
        "(SELECT min(id) FROM erp_stores) AS store, (SELECT min(id) FROM erp_employees) AS emp"
    ).fetchone()
    assert row is not None
    base = row["doc"] or 0
    for i, text in enumerate(XSS, start=1):
        conn.execute(
            "INSERT INTO erp_documents (id, number, kind, period, store_id, employee_id, "
            "issued_on, memo) VALUES (%s, %s, 'sales_invoice', %s, %s, %s, '2026-11-05', %s)",
            (base + i, text, PERIOD, row["store"], row["emp"], text),
        )
        conn.execute(
            "INSERT INTO erp_document_lines (document_id, line_no, account_code, debit, "
            "description) VALUES (%s, 1, %s, 10, %s), (%s, 2, '1000', 0, %s)",
            (base + i, text[:40], text, base + i, text),
        )
    posting = run_job(erp, conn, "posting", {"period": PERIOD})
    # a user string in the parameters and in an error message: a file there at the
    # submit (which checks it) and gone when the job runs
    hostile = tmp_path / XSS[0]  # a folder '<script>alert(1)<' and a file 'script>'
    hostile.parent.mkdir()
    hostile.write_text("sku,brand_code,name,standard_cost,price\nA,B,c,1,2\n", encoding="utf-8")
    registry = Registry.load(erp.flow_modules)
    job = submit(
        "migration", {"source": str(hostile), "kind": "items"}, settings=erp, registry=registry
    )
    hostile.unlink()
    with thread_worker(erp, registry):
        assert wait_job_ended(conn, job.job_id, timeout=120) == "failed"
    migration = job.job_id
    paths = [
        Path(stored)
        for stored in (
            render_job_report(erp, posting),
            render_job_report(erp, migration),
            render_index(erp),
        )
    ]
    for path in paths:
        html = path.read_text(encoding="utf-8")
        parsed = check_html(html)
        for tag, attrs in parsed.elements:
            assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        scripts = [tag for tag, _ in parsed.elements if tag == "script"]
        assert len(scripts) == (1 if path.name == "index.html" else 0)
        assert "alert" not in "".join(parsed.script)
        assert "<script>alert" not in html and "<img" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    posting_text = " ".join(check_html(paths[0].read_text(encoding="utf-8")).text)
    assert all(s in posting_text for s in XSS)  # shown as text, {{ 7*7 }} not evaluated
    migration_text = " ".join(check_html(paths[1].read_text(encoding="utf-8")).text)
    assert f"source file {str(hostile)!r} does not exist" in migration_text


# -- index, build, serve, CLI ------------------------------------------------------------


def test_index__lists_every_run_with_filters_and_duration_chart(
    fast: Settings, conn: psycopg.Connection[Any]
) -> None:
    jobs = [run_job(fast, conn, "chain", {"n": n}) for n in (1, 2)]
    jobs.append(run_job(fast, conn, "fan", {"n": 3}))
    paths = [Path(stored) for stored in render_all(fast)]
    assert paths[0] == (fast.reports_dir / "index.html").resolve() and len(paths) == 4
    html = paths[0].read_text(encoding="utf-8")
    parsed = check_html(html)
    hrefs = {attrs["href"] for tag, attrs in parsed.elements if tag == "a"}
    assert hrefs == {f"runs/{j}.html" for j in jobs}
    assert all((fast.reports_dir / h).exists() for h in hrefs)
    assert 'class="durations"' in html
    options = {attrs.get("value") for tag, attrs in parsed.elements if tag == "option"}
    assert {"chain", "fan", "done", "duration-desc"} <= options


@pytest.fixture
def server(fast: Settings) -> Iterator[str]:
    httpd = make_server(fast, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def _get(url: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_serve__index_shows_new_runs_without_restart_and_renders_reports_on_demand(
    fast: Settings, conn: psycopg.Connection[Any], server: str
) -> None:
    status, body = _get(server + "/")
    assert status == 200 and "No runs yet" in body
    job_id = run_job(fast, conn, "chain", {})
    status, body = _get(server + "/index.html")
    assert status == 200 and f"runs/{job_id}.html" in body
    status, body = _get(f"{server}/runs/{job_id}.html")
    assert status == 200 and str(job_id) in body
    assert _get(f"{server}/runs/{uuid.uuid4()}.html")[0] == 404
    assert _get(server + "/", method="POST")[0] == 501  # read-only
    assert _get(server + "/runs/")[0] == 404  # no directory listing


def test_cli__report_prints_the_path_and_build_writes_everything(
    fast: Settings, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    job_id = run_job(fast, conn, "chain", {})
    assert fast.database_url is not None
    env = {
        "ENGINE_DATABASE_URL": fast.database_url.get_secret_value(),
        "ENGINE_FLOW_MODULES": "testflows",
        "ENGINE_REPORTS_DIR": str(tmp_path / "cli"),
    }
    result = CliRunner().invoke(main, ["report", str(job_id)], env=env)
    assert result.exit_code == 0, result.output
    assert Path(result.output.strip()) == tmp_path / "cli" / "runs" / f"{job_id}.html"
    result = CliRunner().invoke(main, ["reports", "build", "--out", str(tmp_path / "b")], env=env)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b" / "index.html").exists()
    assert (tmp_path / "b" / "runs" / f"{job_id}.html").exists()
    bad = CliRunner().invoke(main, ["report", "nope"], env=env)
    assert bad.exit_code == 2 and "invalid job id" in bad.output


# -- a real browser -----------------------------------------------------------------------


def _open_in_chromium(browser: Any, page_path: Path, shot: Path) -> list[str]:
    """Open a page from disk; what the browser's console said (messages, uncaught errors)."""
    page = browser.new_page(viewport={"width": 1280, "height": 2000})
    said: list[str] = []
    page.on("console", lambda m: said.append(f"CONSOLE {m.type}: {m.text}"))
    page.on("pageerror", lambda e: said.append(f"Uncaught {e}"))
    try:
        page.goto(page_path.resolve().as_uri(), wait_until="load")
        page.screenshot(path=shot)
    finally:
        page.close()
    return said


def test_browser__report_and_index_open_from_disk_without_console_errors(
    erp: Settings, conn: psycopg.Connection[Any], tmp_path: Path, browser: Any
) -> None:
    run_job(erp, conn, "posting", {"period": PERIOD})
    job_id = run_job(erp, conn, "costing", {"period": PERIOD})
    report = Path(render_job_report(erp, job_id))
    index = Path(render_index(erp))
    for name, path in (("report", report), ("index", index)):
        shot = tmp_path / f"{name}.png"
        console = _open_in_chromium(browser, path, shot)
        assert console == [], console
        assert shot.exists() and shot.stat().st_size > 10_000
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
