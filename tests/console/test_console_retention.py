"""The console's job page of a job retention pruned: its summary, with the note saying so."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from harness import fast_settings, flows_registry, thread_worker, wait_job_ended
from testflows import chain

from engine import prune
from engine.config import Settings
from engine.jobs.submit import submit
from engine.store import db


def test_job_page__a_pruned_job_shows_its_summary_and_where_its_report_went(
    settings: Settings, client_for: Any, tmp_path: Path
) -> None:
    fast = fast_settings(settings, reports_dir=tmp_path / "reports")
    job = submit(chain, {"n": 4}, settings=fast).job_id
    with thread_worker(fast, flows_registry()), db.connect(fast, autocommit=True) as c:
        wait_job_ended(c, job)
        c.execute(
            "UPDATE engine_jobs SET finished_at = now() - interval '20 days' WHERE id = %s",
            (job,),
        )
    assert prune(fast, registry=flows_registry()).total.jobs == 1

    vera = client_for("vera")  # a viewer reads it
    page = vera.get(f"/runs/{job}.html")
    assert page.status_code == 200
    assert 'id="pruned"' in page.text and "Pruned on" in page.text
    assert str(tmp_path / "reports" / "runs" / f"{job}.html") in page.text
    assert "3/3 done" in page.text and "&#34;n&#34;: 4" in page.text
    missing = vera.get(f"/runs/{uuid.uuid4()}.html")
    assert missing.status_code == 404


def test_browser__a_viewer_opens_a_pruned_jobs_page_and_reads_the_note(
    browser: Any, app_for: Any, people: Any, settings: Settings, tmp_path: Path, shots: Path
) -> None:
    from consolesupport import Served
    from playwright.sync_api import expect
    from test_console_browser import signed_in

    fast = fast_settings(settings, reports_dir=tmp_path / "reports")
    job = submit(chain, {"n": 5}, settings=fast).job_id
    with thread_worker(fast, flows_registry()), db.connect(fast, autocommit=True) as c:
        wait_job_ended(c, job)
        c.execute(
            "UPDATE engine_jobs SET finished_at = now() - interval '20 days' WHERE id = %s",
            (job,),
        )
    assert prune(fast, registry=flows_registry()).total.jobs == 1
    with Served(app_for(flows_registry())) as web:
        vera = signed_in(browser, web.url, "vera", people)
        vera.goto(f"{web.url}/runs/{job}.html")
        expect(vera.locator("#pruned")).to_contain_text("Pruned on")
        expect(vera.locator("#pruned")).to_contain_text(f"runs/{job}.html")
        expect(vera.locator("#summary")).to_contain_text("3/3 done")
        vera.screenshot(path=str(shots / "pruned-job.png"), full_page=True)
