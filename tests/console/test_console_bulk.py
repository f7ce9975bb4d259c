"""Bulk actions in the console: the dead letters page's and the runs page's bulk form show the
preview (count by flow and state, a sample) before its Apply, which acts on that set only;
operators only (the API's roles), CSRF like every other action."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
from consolesupport import Served, csrf_of
from harness import flows_registry
from playwright.sync_api import Browser, Page, expect
from test_console_browser import signed_in

from engine import BulkFilter, bulk_preview, submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.jobs import admin
from engine.store import dead_letter_insert_step


def _dead_lettered(settings: Settings, conn: psycopg.Connection[Any], n: int) -> list[int]:
    """``n`` chain jobs ended, each with a step dead letter saying the database was down."""
    letters = []
    for i in range(n):
        job = submit("chain", {"n": i}, settings=settings, registry=flows_registry()).job_id
        admin.cancel(settings, job, "outage", actor="ann")
        run = conn.execute("SELECT id FROM engine_step_runs WHERE job_id = %s", (job,)).fetchone()
        letter = dead_letter_insert_step(
            conn, job_id=job, step_run_id=run["id"], reason="db down", error=None
        )
        assert letter is not None
        letters.append(letter)
    return letters


def _preview_in_form(page: Page, action: str, flow: str, **fields: str) -> None:
    page.locator("#bulk summary").click()
    page.select_option("#bulk-action", action)
    page.select_option("#bulk-flow", flow)
    for name, value in fields.items():
        page.fill(f"#bulk-{name}", value)
    page.locator("#bulk button", has_text="Preview").click()


def test_browser__an_operator_replays_dead_letters_in_bulk_from_their_preview(
    browser: Browser,
    app_for: Any,
    people: Any,
    settings: Settings,
    conn: psycopg.Connection[Any],
    shots: Path,
) -> None:
    letters = _dead_lettered(settings, conn, 3)
    registry = Registry.load(["testflows"])
    with Served(app_for(registry)) as web:
        otto = signed_in(browser, web.url, "otto", people)
        otto.goto(f"{web.url}/dead-letters")
        _preview_in_form(otto, "replay", "chain", error="DB DOWN")
        expect(otto.locator("h1")).to_have_text("Bulk replay: 3 items")
        expect(otto.locator("#bulk-counts")).to_contain_text("chain")
        expect(otto.locator("#bulk-counts td.num")).to_have_text("3")
        for letter in letters:
            expect(otto.locator("#bulk-sample")).to_contain_text(str(letter))
        otto.screenshot(path=str(shots / "bulk-preview.png"), full_page=True)
        preview = otto.locator("#preview-id").inner_text()
        # between the preview and its apply, someone replays one by hand
        admin.replay(settings, letters[0], actor="bob")
        otto.fill("form.actions input[name=reason]", "database back")
        otto.locator("button", has_text="Apply replay to these 3").click()
        expect(otto.locator(".flash.ok")).to_contain_text(
            f"replay done for 2 item(s); 1 skipped (changed since the preview), 0 refused: "
            f"{letters[0]}"
        )
        expect(otto.locator("form.actions")).to_have_count(0)  # applied: no second button
        otto.screenshot(path=str(shots / "bulk-applied.png"), full_page=True)
    entries = conn.execute(
        "SELECT actor, source, reason, target_id FROM engine_audit "
        "WHERE detail ->> 'preview' = %s ORDER BY id",
        (preview,),
    ).fetchall()
    assert sorted(e["target_id"] for e in entries) == sorted(str(x) for x in letters[1:])
    assert {(e["actor"], e["source"], e["reason"]) for e in entries} == {
        ("otto", "console", "database back")
    }


def test_browser__an_operator_cancels_pending_runs_in_bulk_from_the_runs_page(
    browser: Browser,
    app_for: Any,
    people: Any,
    settings: Settings,
    conn: psycopg.Connection[Any],
) -> None:
    registry = Registry.load(["testflows"])
    jobs = [submit("chain", {"n": i}, settings=settings, registry=registry).job_id for i in (1, 2)]
    with Served(app_for(registry)) as web:
        otto = signed_in(browser, web.url, "otto", people)
        otto.goto(f"{web.url}/")
        _preview_in_form(otto, "cancel", "chain", state="pending")
        expect(otto.locator("h1")).to_have_text("Bulk cancel: 2 items")
        expect(otto.locator("#bulk-counts")).to_contain_text("pending")
        otto.fill("form.actions input[name=reason]", "wrong batch")
        otto.locator("button", has_text="Apply cancel to these 2").click()
        expect(otto.locator(".flash.ok")).to_contain_text("cancel done for 2 item(s)")
    statuses = conn.execute(
        "SELECT status FROM engine_jobs WHERE id = ANY(%s)", ([*jobs],)
    ).fetchall()
    assert [s["status"] for s in statuses] == ["cancelled", "cancelled"]


def test_console__a_viewer_may_neither_preview_nor_apply(
    client_for: Any, settings: Settings, conn: psycopg.Connection[Any]
) -> None:
    _dead_lettered(settings, conn, 1)
    made = bulk_preview(settings, "replay", BulkFilter(flow="chain"))
    vera = client_for("vera")
    csrf = csrf_of(vera.get("/").text)
    refused = vera.post("/bulk/preview", data={"csrf": csrf, "action": "replay"})
    assert refused.status_code == 403
    assert vera.get(f"/bulk/{made.id}").status_code == 403
    applied = vera.post(f"/bulk/{made.id}/apply", data={"csrf": csrf, "reason": "r"})
    assert applied.status_code == 403
    otto = client_for("otto")
    no_csrf = otto.post(f"/bulk/{made.id}/apply", data={"reason": "r"})
    assert no_csrf.status_code == 403
    row = conn.execute(
        "SELECT applied_at FROM engine_bulk_previews WHERE id = %s", (made.id,)
    ).fetchone()
    assert row == {"applied_at": None}
    assert "Act in bulk" not in vera.get("/dead-letters").text
    assert "Act in bulk" in otto.get("/dead-letters").text
    assert uuid.UUID(str(made.id))
