"""The console in a real browser: Playwright driving the Debian Chromium `make test` installs.

An accountant reads a waiting posting's rejected documents and approves it;
an operator cancels and retries a job and replays a dead letter; a viewer
sees no button; an operator sees no approve button. The app is served by
uvicorn on 127.0.0.1 with a worker in a thread on the test's database.
Screenshots go to the test's temporary folder (``CONSOLE_SCREENSHOTS`` to
keep them elsewhere).
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from consolesupport import Served
from harness import fast_settings, thread_worker, wait_job_ended, wait_until
from playwright.sync_api import Browser, Dialog, Page, expect
from test_posting import REJECTED, insert_erp

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.schedules.schedules import add_schedule


def signed_in(browser: Browser, url: str, name: str, people: Any, **context: Any) -> Page:
    page = browser.new_context(**context).new_page()
    page.goto(f"{url}/signin")
    page.fill("#name", name)
    page.fill("#password", people[name][1])
    page.click("button[type=submit]")
    expect(page.locator("nav.top .who")).to_contain_text(name)
    return page


def _status(conn: psycopg.Connection[Any], job: uuid.UUID) -> str:
    return str(
        conn.execute("SELECT status FROM engine_jobs WHERE id = %s", (job,)).fetchone()["status"]
    )


def test_browser__an_accountant_reads_the_rejected_documents_then_approves_the_posting(
    browser: Browser,
    app_for: Any,
    people: Any,
    settings: Settings,
    conn: psycopg.Connection[Any],
    shots: Path,
) -> None:
    insert_erp(conn)
    registry = Registry.load(["flows.posting", "flows.tools"])
    fast = fast_settings(settings, concurrency=2, flow_modules=["flows.posting"])
    job = submit(
        "posting",
        {"period": "2026-11", "approve_rejects_over": 2},
        settings=fast,
        registry=registry,
    ).job_id
    with thread_worker(fast, registry), Served(app_for(registry)) as web:
        operator = signed_in(browser, web.url, "otto", people)
        anna = signed_in(browser, web.url, "anna", people)
        anna.goto(f"{web.url}/approvals")
        card = anna.locator(f"#w-{job}")
        expect(card).to_be_visible(timeout=30_000)
        for reason in REJECTED.values():
            expect(card).to_contain_text(reason)
        for number in ("SI-3", "SI-4", "ST-7"):
            expect(card).to_contain_text(number)
        # the flow's own block: its cards, and each rejected document's store, day and amount,
        # the amount right-aligned in tabular figures
        expect(card.locator(".card", has_text="debit posted")).to_be_visible()
        si3 = card.locator("table.rejections tr", has_text="SI-3")
        expect(si3).to_contain_text("ST002")
        expect(si3).to_contain_text("2026-11-15")
        money = si3.locator("td.num")
        expect(money).to_have_text("120.00")
        expect(money).to_have_css("text-align", "right")
        expect(money).to_have_css("font-variant-numeric", "tabular-nums")
        anna.screenshot(path=str(shots / "approvals-inbox.png"), full_page=True)
        anna.goto(f"{web.url}/")  # the runs page's navigation counts what waits
        expect(anna.locator("nav.top .count")).to_have_text("1")
        anna.goto(f"{web.url}/approvals")
        # an operator sees the same card without the buttons
        operator.goto(f"{web.url}/approvals")
        expect(operator.locator(f"#w-{job}")).to_contain_text("SI-3")
        expect(operator.locator("button", has_text="Approve")).to_have_count(0)
        anna.goto(f"{web.url}/runs/{job}.html")
        expect(anna.locator("#live")).to_contain_text("unknown account 9999 on line 2")
        anna.screenshot(path=str(shots / "waiting-posting.png"), full_page=True)
        anna.fill("form.decide input[name=reason]", "three bad documents, fixed next period")
        anna.click("form.decide button[value=approve]")
        expect(anna.locator(".flash.ok")).to_contain_text("approved")
        assert wait_job_ended(conn, job) == "done"
        # the page follows the job without being reloaded
        expect(anna.locator("#live h1 .badge")).to_have_text("done", timeout=15_000)
        expect(anna.locator("#live")).to_contain_text("anna")
        # the decision's reason is the audit's why
        anna.goto(f"{web.url}/audit?action=signal")
        expect(anna.locator("#audit td.why")).to_have_text(
            ["three bad documents, fixed next period"]
        )
    trail = conn.execute(
        "SELECT actor, source, action, reason FROM engine_audit WHERE job_id = %s", (job,)
    ).fetchall()
    assert {
        "actor": "anna",
        "source": "console",
        "action": "signal",
        "reason": "three bad documents, fixed next period",
    } in trail


def test_browser__an_operator_cancels_a_running_job_and_retries_it(
    browser: Browser,
    app_for: Any,
    people: Any,
    settings: Settings,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    shots: Path,
) -> None:
    registry = Registry.load(["testflows"])
    fast = fast_settings(settings)
    hold = str(tmp_path / "hold")
    job = submit("chain", {"hold_file": hold}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry), Served(app_for(registry)) as web:
        wait_until(lambda: Path(hold + ".started").exists(), what="step b to hold")
        otto = signed_in(browser, web.url, "otto", people)
        otto.goto(f"{web.url}/runs/{job}.html")
        otto.evaluate("window.__notReloaded = true")
        otto.fill("form[action$='/cancel'] input[name=reason]", "submitted for the wrong store")
        asked: list[str] = []  # a destructive action asks first: dismissed, nothing is done

        def dismiss(d: Dialog) -> None:
            asked.append(d.message)
            d.dismiss()

        otto.once("dialog", dismiss)
        otto.click("form[action$='/cancel'] button")
        assert asked and "Cancel this job" in asked[0]
        assert _status(conn, job) == "running"
        # (filled again: the live page may have been redrawn while the question was open)
        otto.fill("form[action$='/cancel'] input[name=reason]", "submitted for the wrong store")
        otto.once("dialog", lambda d: d.accept())
        otto.click("form[action$='/cancel'] button")
        expect(otto.locator(".flash.ok")).to_contain_text("cancelled")
        expect(otto.locator("#live h1 .badge")).to_have_text("cancelled")
        Path(hold + ".release").touch()
        assert wait_job_ended(conn, job) == "cancelled"
        otto.click("form[action$='/retry'] button")
        expect(otto.locator(".flash.ok")).to_contain_text("retried")
        otto.evaluate("window.__notReloaded = true")
        assert wait_job_ended(conn, job) == "done"
        # the live page redraws itself: same document, new status
        expect(otto.locator("#live h1 .badge")).to_have_text("done", timeout=15_000)
        assert otto.evaluate("window.__notReloaded") is True
        otto.goto(f"{web.url}/audit")
        expect(otto.locator("#audit")).to_contain_text("submitted for the wrong store")
        otto.screenshot(path=str(shots / "audit-trail.png"), full_page=True)
        # filtered by user, action and period; a bad day is said alone, with no table under it
        otto.select_option("#a-action", "cancel")
        otto.fill("#a-actor", "otto")
        otto.click("#audit-filters button[type=submit]")
        expect(otto.locator("#audit td.why")).to_have_text(["submitted for the wrong store"])
        otto.goto(f"{web.url}/audit?actor=nobody")
        expect(otto.locator("#audit")).to_contain_text("No entry matches")
        otto.goto(f"{web.url}/audit?from=2999-01-01")
        expect(otto.locator("#audit")).to_contain_text("No entry matches")
        otto.goto(f"{web.url}/audit?from=yesterday")
        expect(otto.locator(".flash.bad")).to_contain_text("invalid from 'yesterday'")
        expect(otto.locator("#audit")).to_have_count(0)
    actions = conn.execute(
        "SELECT actor, action, source FROM engine_audit WHERE job_id = %s ORDER BY id", (job,)
    ).fetchall()
    assert [(a["actor"], a["action"], a["source"]) for a in actions] == [
        ("otto", "cancel", "console"),
        ("otto", "retry", "console"),
    ]


def test_browser__an_operator_replays_a_dead_letter(
    browser: Browser,
    app_for: Any,
    people: Any,
    settings: Settings,
    conn: psycopg.Connection[Any],
    shots: Path,
) -> None:
    registry = Registry.load(["testflows"])
    fast = fast_settings(settings, max_attempts=1)
    job = submit("chain", {"fail_times": 1}, settings=fast, registry=registry).job_id
    with thread_worker(fast, registry), Served(app_for(registry)) as web:
        assert wait_job_ended(conn, job) == "failed"
        otto = signed_in(
            browser, web.url, "otto", people, permissions=["clipboard-read", "clipboard-write"]
        )
        otto.goto(f"{web.url}/dead-letters")
        # the job's short id, and its whole id copied by the button
        row = otto.locator("#dead-letters tr", has=otto.locator(f"[data-copy='{job}']"))
        expect(row).to_contain_text("planned failure")
        expect(row.locator(".jobid code")).to_have_text(str(job)[:8])
        row.locator("button.copy").click()
        expect(row.locator("button.copy")).to_have_text("copied")
        assert otto.evaluate("navigator.clipboard.readText()") == str(job)
        row.locator("input[name=reason]").fill("the lock timeout is raised")
        otto.screenshot(path=str(shots / "dead-letters.png"), full_page=True)
        row.locator("button", has_text="Replay").click()
        expect(otto.locator(".flash.ok")).to_contain_text(f"job {job} resumed")
        assert wait_job_ended(conn, job) == "done"
        expect(otto.locator(f"#dead-letters [data-copy='{job}']")).to_have_count(0)
        # purging asks first
        asked: list[str] = []

        def accept(d: Dialog) -> None:
            asked.append(d.message)
            d.accept()

        otto.once("dialog", accept)
        otto.click("form[action='/dead-letters/purge'] button")
        expect(otto.locator(".flash.ok")).to_contain_text("purged")
        assert "cannot be undone" in asked[0]
    replay = conn.execute(
        "SELECT actor, target_kind, reason FROM engine_audit WHERE action = 'replay'"
    ).fetchall()
    assert replay == [
        {"actor": "otto", "target_kind": "dead_letter", "reason": "the lock timeout is raised"}
    ]


def test_browser__a_viewer_sees_no_button_anywhere(
    browser: Browser, app_for: Any, people: Any, settings: Settings
) -> None:
    registry = Registry.load(["testflows", "flows.tools"])
    job = submit("chain", {}, settings=settings, registry=registry).job_id
    with Served(app_for(registry)) as web:
        vera = signed_in(browser, web.url, "vera", people)
        for path in (
            f"/runs/{job}.html",
            "/approvals",
            "/dead-letters",
            "/schedules",
            "/workers",
            "/audit",
            "/x/periods",
        ):
            vera.goto(f"{web.url}{path}")
            # searching is reading; of the buttons that change something, sign-out is the only one
            assert vera.locator("form[method=post] button").count() == 1, path
            expect(vera.locator("form[action='/signout'] button")).to_have_count(1)


def test_browser__moments_in_the_viewers_zone_short_ids_and_a_favicon(
    browser: Browser, app_for: Any, people: Any, settings: Settings, shots: Path
) -> None:
    """One date style in the viewer's zone (UTC without scripts); nothing broken mid-word."""
    registry = Registry.load(["testflows"])
    job = submit("chain", {}, settings=settings, registry=registry).job_id
    add_schedule("nightly", "chain", "0 2 * * *", settings=settings, registry=registry)
    with Served(app_for(registry)) as web:
        tokyo = signed_in(browser, web.url, "otto", people, timezone_id="Asia/Tokyo")
        tokyo.goto(f"{web.url}/")
        tokyo.screenshot(path=str(shots / "runs.png"), full_page=True)
        row = tokyo.locator("#runs tr", has=tokyo.locator(f"[data-copy='{job}']"))
        expect(row.locator(".jobid a")).to_have_attribute("href", f"/runs/{job}.html")
        expect(row.locator(".jobid code")).to_have_text(str(job)[:8])
        at = row.locator("time")
        expect(at).to_have_attribute("data-local", "1")
        utc = datetime.fromisoformat(str(at.get_attribute("datetime")).replace("Z", "+00:00"))
        there = utc.astimezone(ZoneInfo("Asia/Tokyo"))
        expect(at).to_have_text(re.compile(rf"^{there:%Y-%m-%d %H:%M:%S} (GMT\+9|JST)$"))
        # the icon, reached signed out too
        expect(tokyo.locator("link[rel=icon]")).to_have_attribute("href", "/favicon.svg")
        icon = tokyo.request.get(f"{web.url}/favicon.ico")
        assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        # words wrap whole; only a long token (an id, JSON) may wrap inside
        tokyo.goto(f"{web.url}/schedules")  # each action with its reason
        expect(tokyo.locator("#schedule-nightly input[name=reason]")).to_be_visible()
        tokyo.screenshot(path=str(shots / "schedules.png"), full_page=True)
        tokyo.goto(f"{web.url}/runs/{job}.html")
        tokyo.screenshot(path=str(shots / "job.png"), full_page=True)
        expect(tokyo.locator("dl.header .jobid button.copy")).to_have_attribute(
            "data-copy", str(job)
        )
        dd = tokyo.locator("dl.header dd").first
        expect(dd).to_have_css("word-break", "normal")
        expect(dd).to_have_css("overflow-wrap", "break-word")
        # a refused search is said alone: no empty table under it
        tokyo.goto(f"{web.url}/?status=nonsense")
        expect(tokyo.locator(".flash.bad")).to_contain_text("nonsense")
        expect(tokyo.locator("#runs")).to_have_count(0)
        # without scripts the same moment reads in UTC
        plain = signed_in(browser, web.url, "vera", people, java_script_enabled=False)
        plain.goto(f"{web.url}/")
        stays = plain.locator("#runs tr", has=plain.locator(f"[data-copy='{job}']")).locator("time")
        expect(stays).to_have_text(f"{utc:%Y-%m-%d %H:%M:%S} UTC")
