"""The console's Periods page lists the documents that wait in closed months (issue 35).

A document dated in a closed month is never posted into another one: the
list and each period's page say how many wait, in which month, and what to
do. A reopen out of order is refused with the later months named.
"""

from __future__ import annotations

from typing import Any

import psycopg
from consolesupport import csrf_of
from test_posting import insert_erp


def test_periods__documents_dated_in_a_closed_month_are_listed_with_what_to_do(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)  # SI-9 dated in October, which is closed
    anna = client_for("anna")
    for page in (anna.get("/x/periods").text, anna.get("/x/periods?period=2026-11").text):
        assert "Documents waiting in closed months" in page
        assert "1 document(s) dated in closed 2026-10 wait (SI-9)" in page
        assert "reopen 2026-10 to post them (engine books reopen --period 2026-10" in page
    # once October is reopened, nothing waits in a closed month
    token = csrf_of(anna.get("/x/periods?period=2026-10").text)
    done = anna.post(
        "/x/periods/reopen",
        data={"csrf": token, "period": "2026-10", "reason": "post SI-9"},
    ).text
    assert "period 2026-10 reopened by anna: post SI-9" in done
    assert "Documents waiting in closed months" not in anna.get("/x/periods").text


def test_periods__a_reopen_before_a_later_closed_month_is_refused_naming_it(
    client_for: Any, conn: psycopg.Connection[Any]
) -> None:
    insert_erp(conn)
    conn.execute(
        "UPDATE erp_periods SET status = 'closed', costed_at = now(), closed_at = now(), "
        "closed_by = 'test' WHERE period = '2026-11'"
    )
    anna = client_for("anna")
    token = csrf_of(anna.get("/x/periods?period=2026-10").text)
    refused = anna.post(
        "/x/periods/reopen",
        data={"csrf": token, "period": "2026-10", "reason": "post SI-9"},
    ).text
    assert "refused" in refused
    assert "cannot reopen 2026-10: later period(s) 2026-11 are closed" in refused
    status = conn.execute("SELECT status FROM erp_periods WHERE period = '2026-10'").fetchone()
    assert status == {"status": "closed"}
    # the page offers the cascade, which reopens November, then October
    page = anna.get("/x/periods?period=2026-10").text
    assert "Reopen 2026-11 and 2026-10, latest first" in page
    done = anna.post(
        "/x/periods/reopen_cascade",
        data={"csrf": csrf_of(page), "period": "2026-10", "reason": "post SI-9"},
    ).text
    assert (
        "period 2026-11 reopened by anna: post SI-9 (with 2026-10); "
        "period 2026-10 reopened by anna: post SI-9"
    ) in done
    rows = conn.execute("SELECT period, status FROM erp_periods ORDER BY period").fetchall()
    assert [r["status"] for r in rows] == ["costed", "costed", "open"]
    trail = conn.execute(
        "SELECT target_id, actor, source FROM engine_audit WHERE action = 'reopen' ORDER BY id"
    ).fetchall()
    assert [(t["target_id"], t["actor"], t["source"]) for t in trail] == [
        ("2026-11", "anna", "console"),
        ("2026-10", "anna", "console"),
    ]
