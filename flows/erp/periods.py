"""The lifecycle of an accounting period, and where each store stands in it.

A period is ``open``, then ``costed`` (every store costed), then ``closed``;
``reopen`` (with a reason) makes a closed period costed again. Each change is
recorded in ``erp_period_events`` with who made it and why, and so is an
accountant's approval or rejection of a posting batch that rejected too many
documents (:func:`record_posting_decision`). A close keeps the
period's closing balances per account and store (``erp_period_balances``,
from :func:`flows.erp.books.balances`), which the next period's opening must
equal (:mod:`flows.erp.checks`); a reopen drops them, the next close takes
them again.

Each store has a chain of periods (``erp_store_periods``): its first period
gets its starting point from opening balances that were *loaded* (seed,
migration flow); every later one from the balances *carried* forward by
costing the period before for that store. Costing a store for P needs its
row for P, so no sequence of submits costs a store out of period order.

Locks, one order for every writer: a step that writes a period's books
takes the period's row ``FOR SHARE`` in its fenced transaction
(:func:`lock_for_writing`) and refuses a closed period; close and reopen take
it ``FOR UPDATE`` (:func:`close`, :func:`reopen`). A close therefore waits for
a writer in flight, and a writer after a close sees ``closed`` and writes
nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg
from pydantic import BaseModel, Field

from engine import BadInput, Concurrency, Refused, Retention, active_jobs
from flows.erp import approvals, books, checks, period_order
from flows.erp.queries import NamedQueries
from flows.erp.types import next_period

__all__ = [
    "BOOK_FLOWS",
    "PeriodEvent",
    "PeriodInfo",
    "StartingPoint",
    "close",
    "ensure_period",
    "history",
    "in_books",
    "info",
    "lock_for_writing",
    "mark_costed_if_complete",
    "mark_store_costed",
    "missing_starting_points",
    "next_period",
    "open_next_for_store",
    "recent",
    "record_posting_decision",
    "reopen",
    "reopen_all",
    "starting_points",
    "status",
]

_q = NamedQueries("periods")

BOOK_FLOWS = ("posting", "costing", "close")
"""Flows whose jobs write a period's books: a close waits until none of them is active."""

PERIOD_KEY = Concurrency("period:{period}", limit=1, per_job=True)

# The books' runs (posting, close) stay live longer than the engine's defaults:
# an auditor asks about last year's close, with its steps and approvals. When
# they are pruned, their summary and report stay for good (engine prune).
BOOKS_RETENTION = Retention(
    done=timedelta(days=400), failed=timedelta(days=400), cancelled=timedelta(days=400)
)
"""The concurrency key the book flows share: one job of a period writes its books at a time.

Counted per job (``per_job``): a job's own step runs (every chunk, every
store) run side by side, while no step run of another posting, costing or
close job of the same period runs beside them; periods run in parallel.
"""

Status = Literal["open", "costed", "closed"]


class StartingPoint(BaseModel):
    """One store's standing for a period."""

    store_id: int
    code: str
    has_start: bool
    costed: bool
    needs: str | None
    first_period: str | None


class PeriodEvent(BaseModel):
    """One change of a period's status."""

    id: int
    period: str
    action: Literal[
        "costed",
        "closed",
        "reopened",
        "posting approved",
        "posting rejected",
        "approval threshold",  # the period's limit of rejected documents (flows.erp.approvals)
    ]
    actor: str
    reason: str
    at: datetime


class PeriodInfo(BaseModel):
    """A period's row: its status and when it was costed and closed, by whom."""

    period: str
    status: Status
    costed_at: datetime | None
    closed_at: datetime | None
    closed_by: str | None


def info(conn: psycopg.Connection[Any], period: str) -> PeriodInfo | None:
    row = _q.first(conn, "period_select", {"period": period})
    return None if row is None else PeriodInfo.model_validate(row)


def status(conn: psycopg.Connection[Any], period: str) -> Status | None:
    row = _q.first(conn, "period_select", {"period": period})
    return None if row is None else row["status"]


def lock_for_writing(conn: psycopg.Connection[Any], period: str, *, doing: str) -> Status:
    """Share-lock ``period``'s row for the caller's transaction; refuse a missing or closed one.

    ``doing`` completes the message ("posting documents 1-500"). Raises
    :class:`engine.Refused`, which a step turns into its failure (nothing of
    the step's transaction commits).
    """
    row = _q.first(conn, "period_lock_shared", {"period": period})
    if row is None:
        raise Refused(f"period {period} does not exist in erp_periods; cannot go on {doing}")
    if row["status"] == "closed":
        raise Refused(
            f"period {period} is closed; {doing} would change closed books "
            f"(engine books reopen --period {period} --reason ... first)"
        )
    return row["status"]  # type: ignore[no-any-return]


def starting_points(
    conn: psycopg.Connection[Any], period: str, store: str | None = None
) -> list[StartingPoint]:
    """Every store in scope (one, by code, or all) and its standing for ``period``."""
    rows = _q.rows(conn, "store_period_starting_points", {"period": period, "store": store})
    return [StartingPoint(store_id=r.pop("id"), **r) for r in rows]


def missing_starting_points(period: str, points: Sequence[StartingPoint]) -> str | None:
    """Why costing ``period`` must wait, naming the stores and what each needs; ``None`` if none."""
    missing = [p for p in points if not p.has_start and not _starts_after(p, period)]
    if not missing:
        return None
    by_need: dict[str, list[str]] = {}
    for p in missing:
        if p.needs is not None:
            need = f"{p.needs} costed first (engine submit costing --period {p.needs})"
        elif p.first_period is not None and p.first_period > period:
            need = f"nothing before their books start in {p.first_period}"
        else:
            need = "opening balances loaded for their first period (migration flow)"
        by_need.setdefault(need, []).append(p.code)
    parts = [
        f"{_codes(codes)} need{'' if len(codes) > 1 else 's'} {need}"
        for need, codes in by_need.items()
    ]
    return (
        f"cannot cost {period}: {len(missing)} store(s) have no starting point for it; "
        + "; ".join(parts)
    )


def _starts_after(point: StartingPoint, period: str) -> bool:
    """The store's books start after ``period``: it has nothing to cost or close there."""
    return not point.has_start and point.first_period is not None and point.first_period > period


def in_books(points: Sequence[StartingPoint], period: str) -> list[StartingPoint]:
    """The stores whose books have started by ``period`` (or that still need their start)."""
    return [p for p in points if not _starts_after(p, period)]


def _codes(codes: list[str], shown: int = 8) -> str:
    head = ", ".join(codes[:shown])
    more = f" and {len(codes) - shown} more" if len(codes) > shown else ""
    return f"store{'s' if len(codes) > 1 else ''} {head}{more}"


def mark_store_costed(conn: psycopg.Connection[Any], period: str, store_id: int) -> bool:
    """Mark the store costed for ``period`` (row-locked); ``False`` if it was already.

    Raises :class:`engine.Refused` when the store has no starting point for it.
    """
    params = {"period": period, "store_id": store_id}
    if _q.first(conn, "store_period_mark_costed", params) is not None:
        return True
    if _q.first(conn, "store_period_select_for_update", params) is None:
        raise Refused(f"store id {store_id} has no starting point for {period}")
    return False


def open_next_for_store(conn: psycopg.Connection[Any], period: str, store_id: int) -> str:
    """Give the store its starting point for the period after ``period``; that period.

    The next period is share-locked like every period a step writes to (the
    carried balances are its books); the costing plan created it already.
    """
    following = next_period(period)
    if status(conn, following) is None:
        _q.execute(conn, "period_insert_next", {"period": following})
    lock_for_writing(conn, following, doing=f"carrying {period}'s closing balances forward")
    _q.execute(conn, "store_period_insert_carried", {"store_id": store_id, "period": following})
    return following


def ensure_period(conn: psycopg.Connection[Any], period: str) -> None:
    """``period`` exists (open if it is new)."""
    _q.execute(conn, "period_insert_next", {"period": period})


def mark_costed_if_complete(conn: psycopg.Connection[Any], period: str, actor: str) -> bool:
    """Mark ``period`` costed if every store is; ``True`` if this call did."""
    _q.execute(conn, "period_lock_exclusive", {"period": period})
    if _q.first(conn, "period_mark_costed_if_all_stores", {"period": period}) is None:
        return False
    _event(conn, period, "costed", actor, "")
    return True


def _event(
    conn: psycopg.Connection[Any], period: str, action: str, actor: str, reason: str
) -> PeriodEvent:
    row = _q.one(
        conn,
        "period_event_insert",
        {"period": period, "action": action, "actor": actor, "reason": reason},
    )
    return PeriodEvent.model_validate(row)


def _locked(conn: psycopg.Connection[Any], period: str) -> dict[str, Any]:
    row = _q.first(conn, "period_lock_exclusive", {"period": period})
    if row is None:
        raise BadInput(f"period {period} does not exist in erp_periods")
    return row


def close(
    conn: psycopg.Connection[Any], period: str, *, actor: str, job: uuid.UUID | None = None
) -> PeriodEvent:
    """Close ``period`` in the caller's transaction, or raise :class:`engine.Refused` saying why.

    Refused while a posting, costing or close job of the period is active
    (other than ``job``, the caller's own), while its rejected documents without an
    approval pass its limit (:func:`flows.erp.approvals.close_refusal`), while a store
    is not costed, or
    while :func:`flows.erp.checks.check_period` finds a broken identity. Once
    closed, the period's closing balances are kept per account and store.
    """
    row = _locked(conn, period)
    if row["status"] == "closed":
        raise Refused(
            f"period {period} is closed already "
            f"(by {row['closed_by']} at {row['closed_at']:%Y-%m-%d %H:%M:%S %Z})"
        )
    busy = active_jobs(conn, flows=BOOK_FLOWS, params={"period": period}, exclude=job)
    if busy:
        jobs = ", ".join(f"{j.flow} {j.id} ({j.status.value})" for j in busy[:5])
        raise Refused(
            f"cannot close {period}: {len(busy)} job(s) of the period are active: {jobs}; "
            "wait for them to end (engine status JOB_ID) or cancel them"
        )
    unapproved = approvals.close_refusal(conn, period)
    if unapproved is not None:
        raise Refused(unapproved)
    period_order.refuse_close(conn, period)  # earlier periods closed; nothing dated in it waits
    uncosted = [r["code"] for r in _q.rows(conn, "stores_not_costed", {"period": period})]
    if uncosted:
        raise Refused(
            f"cannot close {period}: {_codes(uncosted)} not costed for it "
            f"(engine submit costing --period {period})"
        )
    if row["status"] == "open":
        mark_costed_if_complete(conn, period, actor)
    report = checks.check_period(conn, period)
    if not report.ok:
        raise Refused(
            f"cannot close {period}: the books do not check: " + "; ".join(report.problems)
        )
    closed = _q.first(conn, "period_close", {"period": period, "actor": actor})
    assert closed is not None, "the row is locked and costed"
    _snapshot_balances(conn, period)
    return _event(conn, period, "closed", actor, "")


def _snapshot_balances(conn: psycopg.Connection[Any], period: str) -> None:
    """Keep ``period``'s closing balances, per account and store, as they are now."""
    rows = books.balances(conn, period)
    _q.execute(conn, "period_balances_delete", {"period": period})
    _q.execute(
        conn,
        "period_balances_insert",
        {
            "period": period,
            "accounts": [b.code for b in rows],
            "stores": [b.store_id for b in rows],
            "balances": [b.closing for b in rows],
        },
    )


def reopen(
    conn: psycopg.Connection[Any], period: str, *, actor: str, reason: str, cascade: bool = False
) -> PeriodEvent:
    """Reopen a closed ``period`` (it becomes costed), recording ``reason``; its kept
    closing balances go (the next close keeps them again).

    Refused while a later period is closed, naming them, unless ``cascade``:
    then they are reopened first, latest first, with the same reason
    (:func:`reopen_all`). The event of ``period`` itself.
    """
    return reopen_all(conn, period, actor=actor, reason=reason, cascade=cascade)[-1]


def reopen_all(
    conn: psycopg.Connection[Any], period: str, *, actor: str, reason: str, cascade: bool = False
) -> list[PeriodEvent]:
    """:func:`reopen`, returning every period's event in the order reopened (``period`` last)."""
    if not reason.strip():
        raise BadInput("--reason: required: say why the period is reopened (it is recorded)")
    row = _locked(conn, period)
    if row["status"] != "closed":
        raise Refused(f"period {period} is {row['status']}, not closed: nothing to reopen")
    later = period_order.later_closed(conn, period)
    if not cascade:
        period_order.refuse_reopen(period, later)
    events = [_reopen_one(conn, p, actor, f"{reason.strip()} (with {period})") for p in later]
    return [*events, _reopen_one(conn, period, actor, reason.strip())]


def _reopen_one(conn: psycopg.Connection[Any], period: str, actor: str, reason: str) -> PeriodEvent:
    _q.execute(conn, "period_reopen", {"period": period})
    _q.execute(conn, "period_balances_delete", {"period": period})
    return _event(conn, period, "reopened", actor, reason)


def record_posting_decision(
    conn: psycopg.Connection[Any], period: str, *, approved: bool, actor: str, reason: str
) -> PeriodEvent:
    """Record an accountant's decision on a posting batch in the period's history.

    In the caller's transaction (a posting step's fenced one: it commits with
    the step's checkpoint, once). ``actor`` is who decided, ``reason`` what
    and why (the job, the rejections, the approver's words).
    """
    action = "posting approved" if approved else "posting rejected"
    return _event(conn, period, action, actor, reason)


class StockState(BaseModel):
    """Where a period's stock stands: valued by costing, and documents that would move it."""

    costed_stores: int
    solved: bool
    unposted: int = Field(description="unposted documents of the period with stock lines")
    costed: bool = Field(default=False, description="every store costed (status costed)")
    later_being_costed: list[str] = Field(
        default=[], description="later periods solved but not every store costed"
    )

    @property
    def valued(self) -> bool:
        return bool(self.costed_stores or self.solved)


def stock_state(conn: psycopg.Connection[Any], period: str) -> StockState:
    """Whether ``period``'s stock is valued, and how many documents that move it wait.

    Costing values a period's stock from its posted moves: it is refused
    while such documents wait (post them first), and posting them is refused
    while the stock is being valued; into a costed period they are posted and
    recosted (:mod:`flows.erp.recost`).
    """
    return StockState.model_validate(_q.one(conn, "period_stock_state", {"period": period}))


def recent(conn: psycopg.Connection[Any], limit: int = 24) -> list[dict[str, Any]]:
    """The newest ``limit`` periods, newest first: period, status, when costed and closed."""
    return _q.rows(conn, "periods_select_recent", {"limit": limit})


def history(conn: psycopg.Connection[Any], period: str) -> list[PeriodEvent]:
    rows = _q.rows(conn, "period_events_select", {"period": period})
    return [PeriodEvent.model_validate(r) for r in rows]
