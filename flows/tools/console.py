"""The ERP's page of ``engine console``: periods, their history, and their close and reopen.

``/x/periods`` lists the newest periods; ``/x/periods?period=2026-11``
shows one period's status and history (costed, closed, reopened, the
postings approved or rejected: who, when, why), every document of the
period counted (:mod:`flows.erp.documents`), with the buttons an
accountant may press: close it (refused, with the reason, while a job of
the period runs, its rejected documents without an approval pass its
limit, a store is uncosted or a check fails) and reopen it (a
reason is required). Both go through the same functions as ``engine books
close|reopen`` and are recorded in the period's history and the engine's
audit trail with the signed-in user, in one transaction.

The page of a posting job shows the rejected documents of its period, each
with a button to requeue it once the ERP has fixed it (a reason is
required): :func:`flows.erp.corrections.requeue`, as ``engine books
requeue`` does, audited with the signed-in user; and the documents of the
period with a history (rejected, requeued, redated, posted by which job).

Built from :mod:`engine.console.extension`'s plain data: the console renders
and escapes it, checks the CSRF token and the role, and shows what an
action returned or why it was refused.
"""

from __future__ import annotations

from engine import BadInput
from engine.console.extension import (
    ActionRequest,
    ConsoleAction,
    ConsolePage,
    FormField,
    Link,
    PageForm,
    PageRequest,
    Section,
)
from engine.console.roles import Permission
from flows.erp import checks, corrections, dated, period_order, periods
from flows.erp.documents import period_documents
from flows.erp.types import parse_period
from flows.tools.books import audited
from flows.tools.session import books_transaction

__all__ = ["periods_page"]


def _period(value: str | None) -> str:
    return parse_period(value or "", option="period")


def _view(req: PageRequest) -> list[Section]:
    period = (req.query.get("period") or "").strip()
    with books_transaction(read_only=True, settings=req.settings) as conn:
        waits = _waiting(dated.waiting(conn))
        if not period:
            rows = periods.recent(conn)
            return [
                *waits,
                Section(
                    "Periods",
                    text="Choose a period to see its history, close it or reopen it.",
                    columns=("period", "status", "costed", "closed"),
                    rows=[
                        (
                            Link(r["period"], f"/x/periods?period={r['period']}"),
                            r["status"],
                            r["costed_at"] or "",
                            r["closed_at"] or "",
                        )
                        for r in rows
                    ],
                ),
            ]
        period = _period(period)
        info = periods.info(conn, period)
        events = periods.history(conn, period)
        docs = None if info is None else period_documents(conn, period)
        later = period_order.closed_after(conn, period)
        # what the close would be refused for, read beside its button (engine books check)
        open_ = info is not None and info.status != "closed"
        check = checks.check_period(conn, period) if open_ else None
    if info is None:
        return [Section(f"Period {period}", text="No such period in the books.")]
    keep = FormField("period", "period", kind="hidden", value=period)
    forms: list[PageForm] = []
    if info.status == "closed":
        forms.append(
            PageForm(
                "reopen",
                f"Reopen {period}",
                Permission.APPROVE,
                (keep, FormField("reason", "reason (recorded)")),
            )
        )
        if later:  # a reopen alone is refused: offer the cascade, latest first
            forms.append(
                PageForm(
                    "reopen_cascade",
                    f"Reopen {', '.join(later)} and {period}, latest first",
                    Permission.APPROVE,
                    (keep, FormField("reason", "reason (recorded)")),
                )
            )
    else:
        assert check is not None
        forms.append(
            PageForm(
                "close",
                f"Close {period}",
                Permission.APPROVE,
                (keep,),
                confirm=f"Close {period}? Its books are final until it is reopened.",
                beside=_check_line(check),
                beside_ok=check.ok,
            )
        )
    assert docs is not None
    return [
        *waits,
        Section(
            f"Period {period}: {info.status}",
            text=(f"costed {info.costed_at:%Y-%m-%d %H:%M %Z}" if info.costed_at else "not costed")
            + (f"; closed by {info.closed_by}" if info.closed_by else ""),
            forms=forms,
        ),
        Section(
            "Documents",
            text=docs.sentence(),
            columns=("documents", "count"),
            rows=[(what, n) for what, n in docs.lines()],
        ),
        *([] if check is None else [_check_section(check)]),
        Section(
            "History",
            columns=("at", "what", "who", "why"),
            rows=[(e.at, e.action, e.actor, e.reason) for e in events],
        ),
        *_document_history(docs.history),
    ]


def _check_line(check: checks.BooksCheck) -> str:
    """The books check in a line, as ``engine books check`` ends."""
    held = sum(1 for c in check.checks if c.ok and not c.skipped)
    if check.ok:
        return (
            f"\u2713 books check: {held} identities hold ({check.stores_costed} of "
            f"{check.stores} stores costed)"
        )
    problems = check.problems
    return f"\u2717 books check: {len(problems)} problem(s), the close is refused: {problems[0]}"


def _check_section(check: checks.BooksCheck) -> Section:
    return Section(
        f"Books check of {check.period}",
        text=_check_line(check),
        columns=("identity", "result", "detail"),
        rows=[
            (c.name, "skipped" if c.skipped else ("holds" if c.ok else "BROKEN"), c.detail)
            for c in check.checks
        ],
    )


def _document_history(history: corrections.Corrected | None) -> list[Section]:
    """The documents of the period rejected, requeued or redated, each event (none: none)."""
    if history is None or not history.corrected:
        return []
    more = history.corrected - len(history.documents)
    return [
        Section(
            f"History of {history.corrected} document(s) of {history.period} ({history.late} late)",
            text=f"the first {len(history.documents)}" if more > 0 else "",
            columns=("document", "dated", "posts in", "status", "history"),
            rows=[
                (d.number, d.date, d.posting_period, d.status, "; ".join(e.line for e in d.events))
                for d in history.documents
            ],
        )
    ]


def _waiting(waiting: list[dated.Waiting]) -> list[Section]:
    """Documents dated in closed months: they wait, and what to do (none: no section)."""
    if not waiting:
        return []
    return [
        Section(
            "Documents waiting in closed months",
            text="; ".join(w.text for w in waiting),
            columns=("dated in", "documents", "for example", "what to do"),
            rows=[(w.period, w.documents, ", ".join(w.examples), w.todo) for w in waiting],
        )
    ]


def _close(req: ActionRequest) -> str:
    period = _period(req.form.get("period"))
    with books_transaction(settings=req.settings) as conn:
        event = audited(conn, periods.close(conn, period, actor=req.user), source="console")
    return f"period {event.period} closed by {event.actor}"


def _reopen(req: ActionRequest, cascade: bool = False) -> str:
    period = _period(req.form.get("period"))
    reason = (req.form.get("reason") or "").strip()
    if not reason:
        raise BadInput("a reason is required: say why the period is reopened (it is recorded)")
    with books_transaction(settings=req.settings) as conn:
        events = [
            audited(conn, e, source="console")
            for e in periods.reopen_all(
                conn, period, actor=req.user, reason=reason, cascade=cascade
            )
        ]
    return "; ".join(f"period {e.period} reopened by {e.actor}: {e.reason}" for e in events)


REQUEUE_SHOWN = 50
"""Rejected documents offered for a requeue on a posting job's page."""


def _posting_view(req: PageRequest) -> list[Section]:
    """On a posting job's page: its period's rejected documents, each requeued by a button,
    and the documents with a history."""
    period = _period(req.query.get("period"))
    with books_transaction(read_only=True, settings=req.settings) as conn:
        rejected = corrections.rejected(conn, period, limit=REQUEUE_SHOWN)
        history = corrections.corrected(conn, period)
    total = rejected[0].total if rejected else 0
    more = f" (the first {len(rejected)} of {total})" if total > len(rejected) else ""
    sections = [
        Section(
            f"Rejected documents of {period}{more}",
            text=(
                "Once the ERP has fixed a document's lines, requeue it: the next posting of "
                f"{period} judges it again (engine books requeue DOCUMENT --reason ...)."
            ),
            columns=("document", "rejected", "why"),
            rows=[(d.number, f"{d.rejections} time(s)", d.reason) for d in rejected],
            forms=[
                PageForm(
                    "requeue",
                    f"Requeue {d.number}",
                    Permission.APPROVE,
                    (
                        FormField("documents", "document", kind="hidden", value=d.number),
                        FormField("period", "period", kind="hidden", value=period),
                        FormField("reason", "reason (recorded)"),
                    ),
                )
                for d in rejected
            ],
        )
    ]
    sections.extend(_document_history(history))
    return sections


def _requeue(req: ActionRequest) -> str:
    numbers = (req.form.get("documents") or "").split()
    with books_transaction(settings=req.settings) as conn:
        done = corrections.requeue(
            conn, numbers, actor=req.user, reason=req.form.get("reason") or "", source="console"
        )
    return "; ".join(f"{c.number} requeued by {c.actor} into {c.period}: {c.reason}" for c in done)


periods_page = ConsolePage(
    name="periods",
    title="Periods",
    view=_view,
    actions={
        "close": ConsoleAction(Permission.APPROVE, _close),
        "reopen": ConsoleAction(Permission.APPROVE, _reopen),
        "reopen_cascade": ConsoleAction(Permission.APPROVE, lambda req: _reopen(req, True)),
        "requeue": ConsoleAction(Permission.APPROVE, _requeue),
    },
    query_fields=(FormField("period", "period (YYYY-MM)", required=False),),
    job_flows=("posting",),
    job_view=_posting_view,
)
