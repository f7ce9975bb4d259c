"""A posting job's page in the console: its period's rejected documents, each requeued by an
accountant's button (issue 36), through the console's least-privileged role.

In the browser (Playwright, the Debian Chromium): anna, an accountant, opens the posting's
page, requeues the fixed SI-3 with a reason; the next posting posts it, and the page shows
its history. Over HTTP: a viewer sees no button and a forged POST changes nothing; no reason
is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from consolesupport import Served, csrf_of
from harness import fast_settings, thread_worker, wait_job_ended
from playwright.sync_api import Browser, expect
from test_console_browser import signed_in
from test_posting import insert_erp

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry

NOV = "2026-11"


def _posted(settings: Settings, conn: psycopg.Connection[Any]) -> Any:
    """insert_erp's November posted by a posting job: SI-3, SI-4 and ST-7 rejected."""
    insert_erp(conn)
    registry = Registry.load(["flows.posting", "flows.tools"])
    fast = fast_settings(settings, concurrency=2, flow_modules=["flows.posting"])
    job = submit("posting", {"period": NOV}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry):
        assert wait_job_ended(conn, job) == "done"
    return job, registry, fast


def _status(conn: psycopg.Connection[Any], number: str) -> str:
    row = conn.execute("SELECT status FROM erp_documents WHERE number = %s", (number,)).fetchone()
    assert row is not None
    return str(row["status"])


def test_console__an_accountant_requeues_a_fixed_rejected_document_from_the_posting_page(
    browser: Browser,
    app_for: Any,
    people: Any,
    settings: Settings,
    conn: psycopg.Connection[Any],
    shots: Path,
) -> None:
    job, registry, fast = _posted(settings, conn)
    conn.execute(  # the ERP fixes SI-3: its VAT line was missing
        "INSERT INTO erp_document_lines (document_id, line_no, account_code, debit, credit) "
        "VALUES (3, 3, '2100', 0, 20.00)"
    )
    with Served(app_for(registry)) as web:
        anna = signed_in(browser, web.url, "anna", people)
        anna.goto(f"{web.url}/runs/{job}.html")
        section = anna.locator("section.job-extension", has_text=f"Rejected documents of {NOV}")
        expect(section).to_contain_text("unbalanced: debit 120.00 != credit 100.00")
        form = anna.locator("form", has=anna.locator("button", has_text="Requeue SI-3"))
        form.locator("input[name=reason]").fill("the ERP added the VAT line")
        anna.screenshot(path=str(shots / "posting-requeue.png"), full_page=True)
        form.locator("button").click()
        expect(anna.locator(".flash.ok")).to_contain_text("SI-3 requeued by anna")
        assert anna.url.endswith(f"/runs/{job}.html")
        assert _status(conn, "SI-3") == "unposted"
        again = submit("posting", {"period": NOV}, settings=fast, registry=registry).job_id
        with thread_worker(fast, registry):
            assert wait_job_ended(conn, again) == "done"
        assert _status(conn, "SI-3") == "posted"
        anna.goto(f"{web.url}/runs/{again}.html")
        history = anna.locator("section.job-extension", has_text="History of")
        expect(history).to_contain_text("requeued by anna")
        expect(history).to_contain_text(f"posted by job {again}")
        # the periods: each a link to its page, where the books check is read beside Close
        anna.goto(f"{web.url}/x/periods")
        anna.screenshot(path=str(shots / "periods.png"), full_page=True)
        anna.click(f"a[href='/x/periods?period={NOV}']")
        close = anna.locator("form[action='/x/periods/close']")
        expect(close.locator("button")).to_have_text(f"Close {NOV}")
        expect(close.locator(".beside")).to_contain_text("books check")
        # a month or a day is never wrapped at its hyphen
        expect(anna.locator("td", has_text="2026-11-15").first).to_have_css("white-space", "nowrap")
        anna.screenshot(path=str(shots / "period.png"), full_page=True)
    trail = conn.execute(
        "SELECT actor, source, action, target_id, reason FROM engine_audit WHERE action = 'requeue'"
    ).fetchall()
    assert trail == [
        {
            "actor": "anna",
            "source": "console",
            "action": "requeue",
            "target_id": "SI-3",
            "reason": "the ERP added the VAT line",
        }
    ]


@pytest.mark.parametrize("who", ["vera", "otto"])
def test_console__no_requeue_but_for_an_accountant(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any], who: str
) -> None:
    job, _, _ = _posted(settings, conn)
    client = client_for(who)
    page = client.get(f"/runs/{job}.html").text
    assert f"Rejected documents of {NOV}" in page
    assert "Requeue SI-3" not in page
    r = client.post(
        "/x/periods/requeue",
        data={"csrf": csrf_of(page), "documents": "SI-3", "reason": "forged"},
    )
    assert r.status_code == 403
    assert _status(conn, "SI-3") == "rejected"


def test_console__a_requeue_without_a_reason_is_refused(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    job, _, _ = _posted(settings, conn)
    anna = client_for("anna")
    page = anna.get(f"/runs/{job}.html").text
    assert "Requeue SI-3" in page
    r = anna.post(
        "/x/periods/requeue",
        data={
            "csrf": csrf_of(page),
            "documents": "SI-3",
            "reason": " ",
            "back": f"/runs/{job}.html",
        },
    )
    assert r.status_code == 200
    assert "refused: --reason: required" in r.text
    assert _status(conn, "SI-3") == "rejected"
