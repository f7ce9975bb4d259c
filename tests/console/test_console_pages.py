"""The console's pages over HTTP: the runs search and its pages, workers, schedules, periods.

Each action checks what the database holds afterwards and the audit entry
it wrote with the signed-in user.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
from consolesupport import csrf_of
from erp_books import post
from test_posting import insert_erp

from engine import submit
from engine.config import Settings
from engine.flow.registry import Registry
from engine.schedules.schedules import add_schedule
from flows.erp import approvals


def _jobs(settings: Settings, n: int) -> list[uuid.UUID]:
    registry = Registry.load(["testflows"])
    return [
        submit("chain", {"n": i}, settings=settings, registry=registry).job_id for i in range(n)
    ]


def _listed(html: str) -> list[str]:
    return re.findall(r'<a href="/runs/([0-9a-f-]{36})\.html">', html)


def test_runs__search_by_prefix_pages_through_every_job_once_and_refuses_a_bad_filter(
    client_for: Any, settings: Settings
) -> None:
    jobs = _jobs(settings, 7)
    vera = client_for("vera")
    seen: list[str] = []
    url = "/?flow=chain&limit=3"
    while url:
        page = vera.get(url).text
        seen += _listed(page)
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        url = found.group(1).replace("&amp;", "&") if found else ""
    assert sorted(seen) == sorted(str(j) for j in jobs)
    assert len(seen) == len(set(seen))
    target = str(jobs[3])
    assert _listed(vera.get(f"/?text={target[:8]}").text) == [target]
    bad = vera.get("/?period=2026-13").text
    assert "bad period &#39;2026-13&#39;" in bad or "2026-13" in bad
    assert 'role="alert"' in bad
    bad = vera.get("/?status=sleeping").text
    assert "sleeping" in bad and "waiting" in bad
    # a unique prefix in the address leads to the job's page
    r = vera.get(f"/runs/{target[:8]}.html", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, f"/runs/{target}.html")


def test_workers__a_worker_not_seen_within_its_live_window_is_shown_dead(
    client_for: Any, conn: psycopg.Connection[Any], settings: Settings
) -> None:
    conn.execute(
        "INSERT INTO engine_workers (id, host, pid, transport, concurrency, runnable, status, "
        "started_at, last_seen_at) VALUES "
        "('w-live', 'h1', 1, 'postgres', 2, '{chain@1}', 'running', now(), now()), "
        "('w-gone', 'h2', 2, 'postgres', 2, '{chain@1}', 'running', now() - interval '10 min', "
        " now() - make_interval(secs => %s))",
        (settings.worker_live_s + 5,),
    )
    page = client_for("vera").get("/workers").text
    rows = {
        m[0]: m[1]
        for m in re.findall(
            r'<td class="mono">(w-[a-z]+)</td><td><span class="\w+">(\w+)</span>', page
        )
    }
    assert rows == {"w-live": "live", "w-gone": "dead"}


def test_schedules__an_operator_pauses_resumes_and_runs_one_now_each_audited(
    client_for: Any, conn: psycopg.Connection[Any], settings: Settings
) -> None:
    add_schedule(
        "nightly",
        "chain",
        "0 2 * * *",
        params={"n": 1},
        settings=settings,
        registry=Registry.load(["testflows"]),
    )
    otto = client_for("otto")
    for action, says, active in (
        ("pause", "paused", True),
        ("pause", "already paused", False),
        ("resume", "resumed", False),
        ("run", "submitted job", True),
    ):
        listed = otto.get("/schedules").text
        # each action takes a reason, as `engine schedule ... --reason`; pausing asks first
        assert 'name="reason"' in listed
        assert ('data-confirm="Pause schedule nightly?' in listed) == active
        page = otto.post(
            f"/schedules/nightly/{action}",
            data={"csrf": csrf_of(listed), "reason": f"why {action}"},
        ).text
        assert says in page, (action, page[-2000:])
    trail = conn.execute(
        "SELECT action, actor, source, reason FROM engine_audit WHERE target_kind = 'schedule' "
        "ORDER BY id"
    ).fetchall()
    assert [(t["action"], t["actor"], t["source"], t["reason"]) for t in trail][-3:] == [
        ("schedule_pause", "otto", "console", "why pause"),
        ("schedule_resume", "otto", "console", "why resume"),
        ("schedule_run", "otto", "console", "why run"),
    ]
    # a viewer sees the schedule and no button
    page = client_for("vera").get("/schedules").text
    assert "nightly" in page and "Pause</button>" not in page


def test_periods__an_accountant_reopens_with_a_reason_and_a_close_is_refused_with_why(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)  # 2026-10 closed, 2026-11 open with unposted documents
    anna = client_for("anna")
    listed = anna.get("/x/periods").text
    # each period a link to its page
    assert '<a href="/x/periods?period=2026-11">2026-11</a>' in listed
    assert '<a href="/x/periods?period=2026-10">2026-10</a>' in listed
    page = anna.get("/x/periods?period=2026-10").text
    assert "Reopen 2026-10" in page
    token = csrf_of(page)
    refused = anna.post("/x/periods/reopen", data={"csrf": token, "period": "2026-10"}).text
    assert "refused" in refused and "reason" in refused
    done = anna.post(
        "/x/periods/reopen",
        data={"csrf": token, "period": "2026-10", "reason": "a late supplier credit note"},
    ).text
    assert "period 2026-10 reopened by anna: a late supplier credit note" in done
    assert "a late supplier credit note" in anna.get("/x/periods?period=2026-10").text
    token = csrf_of(anna.get("/x/periods?period=2026-11").text)
    refused = anna.post("/x/periods/close", data={"csrf": token, "period": "2026-11"}).text
    assert "refused" in refused
    status = conn.execute("SELECT status FROM erp_periods WHERE period = '2026-11'").fetchone()
    assert status == {"status": "open"}
    trail = conn.execute(
        "SELECT action, actor, source, reason FROM engine_audit WHERE target_kind = 'period'"
    ).fetchall()
    assert trail == [
        {
            "action": "reopen",
            "actor": "anna",
            "source": "console",
            "reason": "a late supplier credit note",
        }
    ]
    # an operator may not
    otto = client_for("otto")
    token = csrf_of(otto.get("/x/periods?period=2026-10").text)
    r = otto.post("/x/periods/close", data={"csrf": token, "period": "2026-10"})
    assert r.status_code == 403


def test_periods__the_page_counts_every_document_and_a_close_over_the_limit_is_refused(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    post(conn, "2026-11")  # SI-3, SI-4 and ST-7 rejected
    approvals.claim_threshold(conn, "2026-11", 0, actor="posting job x")
    anna = client_for("anna")
    page = anna.get("/x/periods?period=2026-11").text
    assert "<h2>Documents</h2>" in page or ">Documents<" in page
    assert "3 rejected (0 approved, 0 refused, 3 undecided)" in page
    assert "limit 0 rejected without an approval" in page
    assert "rejected, undecided" in page and "entered here, dated elsewhere" in page
    assert "approval threshold" in page  # the limit's change is in the history
    # the books check's result beside Close (what `engine books check` says), which asks first
    close = re.search(r'<form[^>]*action="/x/periods/close".*?</form>', page, re.S)
    assert close is not None
    assert 'data-confirm="Close 2026-11?' in close.group(0)
    beside = re.search(r'<span class="beside (ok|bad)">([^<]*)</span>', close.group(0))
    assert beside is not None and "books check" in beside.group(2), close.group(0)
    assert "Books check of 2026-11" in page
    refused = anna.post("/x/periods/close", data={"csrf": csrf_of(page), "period": "2026-11"}).text
    assert "refused" in refused
    assert "3 rejected document(s) dated in it have no approval" in refused
    status = conn.execute("SELECT status FROM erp_periods WHERE period = '2026-11'").fetchone()
    assert status == {"status": "open"}


_NAV_LINK = re.compile(r'<a href="([^"]+)"( class="here")?>')


def _nav(html: str) -> list[tuple[str, bool]]:
    nav = html.split('<nav class="top noprint">', 1)[1].split('<span class="who">', 1)[0]
    return [(href, bool(here)) for href, here in _NAV_LINK.findall(nav)]


def test_nav__is_the_areas_entries_then_the_domains_pages_as_the_role_allows(
    client_for: Any,
) -> None:
    from engine.console.areas import NAV
    from engine.console.roles import allowed

    for name, role in (("adam", "admin"), ("vera", "viewer")):
        client = client_for(name)
        expected = [n.path for n in NAV if allowed(role, n.permission)] + ["/x/periods"]
        assert [href for href, _ in _nav(client.get("/").text)] == expected, name
        # the page's own entry is marked current
        for path in ("/", "/approvals", "/workers", "/x/periods"):
            assert [h for h, here in _nav(client.get(path).text) if here] == [path], (name, path)
    assert "/users" in [n.path for n in NAV]
    assert "/users" not in [h for h, _ in _nav(client_for("vera").get("/").text)]


def test_areas__read_through_the_engines_api_never_the_store() -> None:
    """An area opens a connection (``engine.store.db``) at most: its reads are the CLI's API."""
    import ast
    from pathlib import Path

    from engine.console import areas

    for path in sorted(Path(areas.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine.store"):
                assert node.module == "engine.store", (path.name, node.module)
                assert [a.name for a in node.names] == ["db"], path.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("engine.store") for a in node.names), path.name
            if isinstance(node, ast.ImportFrom) and node.module == "engine":
                assert "store" not in [a.name for a in node.names], path.name
