"""``engine books``: a period's trial balance, checks and lifecycle, for people and scripts.

::

    engine books trial-balance --period 2026-11 [--by-store] [--json]
    engine books check --period 2026-11 [--json]     # exit 1 naming each broken identity
                                                     # or refusing flag (warnings pass)
    engine books close --period 2026-11              # refused (exit 2) saying why
    engine books reopen --period 2026-11 --reason "late supplier invoice"
    engine books history --period 2026-11 [--json]
    engine books stock-ledger --period 2026-11 [--store ST001] [--sku SKU] [--json]
    engine books item-costs --period 2026-11 [--store ST001] [--sku SKU] [--json]
    engine books documents --period 2026-11 [--json]    # every document of the period
    engine books approval-threshold --period 2026-11 --over N --reason R
    engine books requeue DOCUMENT... --reason R         # a rejected document, fixed
    engine books redate DOCUMENT... --into P --reason R # a late document, into P
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

import click
import psycopg

from engine import ChecksFailed, record_action
from flows.erp import checks, flags, periods
from flows.erp.actor import actor
from flows.erp.books import TrialBalance, cents, trial_balance
from flows.erp.documents import period_documents
from flows.tools.corrections import redate_command, requeue_command
from flows.tools.documents import approval_threshold_command, documents_command
from flows.tools.exports import item_costs_command, stock_ledger_command
from flows.tools.session import books_transaction, parse_period_option, period_option

__all__ = ["books", "trial_balance_table"]

T = TypeVar("T")


def _run(work: Callable[[psycopg.Connection[Any]], T]) -> T:
    with books_transaction() as conn:
        return work(conn)


def trial_balance_table(tb: TrialBalance) -> str:
    """The trial balance as a table for people: a line per account (and store), the totals."""
    by_store = tb.by_store

    def cells(
        code: str, name: str, store: str | None, amounts: tuple[Decimal, ...]
    ) -> tuple[str, ...]:
        where = ("-" if store is None else store,) if by_store else ()
        return (code, name, *where, *(cents(v) for v in amounts))

    rows = [
        cells(a.code, a.name, a.store, (a.opening, a.debit, a.credit, a.closing))
        for a in tb.accounts
    ]
    rows.append(cells("", "total", "", (tb.opening, tb.debit, tb.credit, tb.closing)))
    header = ("account", "name", *(("store",) if by_store else ()))
    header += ("opening", "debit", "credit", "closing")
    text = len(header) - 4  # left-aligned columns; the amounts are right-aligned
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        left = [cell.ljust(w) for cell, w in zip(row[:text], widths[:text], strict=True)]
        right = [cell.rjust(w) for cell, w in zip(row[text:], widths[text:], strict=True)]
        return "  ".join(left + right).rstrip()

    return "\n".join(
        [
            f"Trial balance {tb.period}{' by store' if by_store else ''}",
            line(header),
            *(line(r) for r in rows),
            f"{tb.lines} journal lines, {_verdict(tb)}",
        ]
    )


def _verdict(tb: TrialBalance) -> str:
    if tb.balanced:
        return "balanced"
    wrong = [
        f"{column} sums to {cents(total)}"
        for column, total in (("opening", tb.opening), ("closing", tb.closing))
        if total != 0
    ]
    if tb.debit != tb.credit:
        wrong.append(f"debit {cents(tb.debit)} != credit {cents(tb.credit)}")
    return "NOT BALANCED: " + "; ".join(wrong)


json_option = click.option("--json", "as_json", is_flag=True, help="print one JSON object")


@click.command("trial-balance")
@period_option
@click.option("--by-store", is_flag=True, help="a row per account and store (- for none)")
@json_option
def trial_balance_command(period: str, by_store: bool, as_json: bool) -> None:
    """Opening, debit, credit and closing of each account in a period (opening: the periods
    before; a new fiscal year's has the earlier years' income and expense in 3100), and the
    flags its books raise (warn or refuse the close)."""
    tb, raised = _run(
        lambda conn: (
            trial_balance(conn, parse_period_option(period), by_store=by_store),
            flags.raised(conn, parse_period_option(period)),
        )
    )
    if as_json:
        click.echo(json.dumps({**tb.model_dump(mode="json"), "flags": _dumped(raised)}))
    else:
        click.echo(trial_balance_table(tb))
        click.echo(_flag_lines(raised))


def _dumped(raised: list[flags.Flag]) -> list[dict[str, Any]]:
    return [f.model_dump(mode="json") for f in raised]


def _flag_lines(raised: list[flags.Flag]) -> str:
    """One line per raised flag, ``REFUSE`` or ``WARN`` first; a line saying none were raised."""
    if not raised:
        return "flags: none"
    return "\n".join(f"  {f.action.upper():<6}  flag {f.line}" for f in raised)


@click.command("check")
@period_option
@json_option
def check_command(period: str, as_json: bool) -> None:
    """Cross-check a period's books; exit 1 naming each identity that does not hold."""
    report = _run(lambda conn: checks.check_period(conn, parse_period_option(period)))
    if as_json:
        click.echo(json.dumps({**report.model_dump(mode="json"), "ok": report.ok}))
    else:
        click.echo(
            f"Books check {report.period} ({report.status}; "
            f"{report.stores_costed} of {report.stores} stores costed)"
        )
        for c in report.checks:
            mark = "skip" if c.skipped else ("ok" if c.ok else "FAIL")
            click.echo(f"  {mark:<4}  {c.name}: {c.detail}")
        click.echo(_flag_lines(report.flags))
        for w in report.waiting:  # informs, does not fail the check
            click.echo(f"  wait  {w.text}")
    if not report.ok:
        raise ChecksFailed(f"books of {report.period}", report.problems)


def audited(
    conn: psycopg.Connection[Any], event: periods.PeriodEvent, source: str = "cli"
) -> periods.PeriodEvent:
    """``event`` recorded in the engine's audit trail too, in the same transaction."""
    record_action(
        conn,
        "close" if event.action == "closed" else "reopen",
        "period",
        event.period,
        actor=event.actor,
        source=source,
        reason=event.reason or None,
        detail={"period_event": event.id},
    )
    return event


@click.command("close")
@period_option
@click.option("--by", "by", default=None, help="who closes it (default: user@host)")
def close_command(period: str, by: str | None) -> None:
    """Close a costed period: refused while its jobs run, a store is uncosted or a check fails.

    Recorded in the period's history and the engine's audit trail (engine audit);
    a refused close records nothing.
    """
    event = _run(
        lambda conn: audited(
            conn, periods.close(conn, parse_period_option(period), actor=by or actor())
        )
    )
    click.echo(f"period {event.period} closed by {event.actor} at {event.at:%Y-%m-%d %H:%M:%S %Z}")
    click.echo(_run(lambda conn: period_documents(conn, event.period)).sentence())


@click.command("reopen")
@period_option
@click.option("--reason", required=True, help="why the period is reopened (recorded)")
@click.option("--by", "by", default=None, help="who reopens it (default: user@host)")
@click.option("--cascade", is_flag=True, help="reopen the later closed periods too, latest first")
def reopen_command(period: str, reason: str, by: str | None, cascade: bool) -> None:
    """Reopen a closed period (it is costed again), recording who and why.

    Refused while a later period is closed, naming them; ``--cascade`` reopens
    them first, latest first, with the same reason. Recorded in the period's
    history and the engine's audit trail (engine audit).
    """
    events = _run(
        lambda conn: [
            audited(conn, e)
            for e in periods.reopen_all(
                conn,
                parse_period_option(period),
                actor=by or actor(),
                reason=reason,
                cascade=cascade,
            )
        ]
    )
    for event in events:
        click.echo(f"period {event.period} reopened by {event.actor}: {event.reason}")


@click.command("history")
@period_option
@json_option
def history_command(period: str, as_json: bool) -> None:
    """Every status change of a period (costed, closed, reopened) and every decision on a
    posting that waited for approval, by whom and why."""
    events = _run(lambda conn: periods.history(conn, parse_period_option(period)))
    if as_json:
        click.echo(
            json.dumps({"period": period, "events": [e.model_dump(mode="json") for e in events]})
        )
        return
    if not events:
        click.echo(f"period {period}: no status changes recorded")
    for e in events:
        why = f"  ({e.reason})" if e.reason else ""
        click.echo(f"{e.at:%Y-%m-%d %H:%M:%S %Z}  {e.action:<16}  {e.actor}{why}")


books = click.Group(
    "books",
    commands=[
        trial_balance_command,
        check_command,
        close_command,
        reopen_command,
        history_command,
        stock_ledger_command,
        item_costs_command,
        documents_command,
        approval_threshold_command,
        requeue_command,
        redate_command,
    ],
    help="The ERP's books: trial balance, checks, and a period's close and reopen.",
)
"""``engine books``: its commands are listed here, not added to it by whoever imports them."""
