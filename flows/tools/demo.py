"""``engine demo``: the ERP's month end, from an empty database to a trial balance.

Migrates, seeds the demo ERP at the real store, brand and employee counts
(fewer items, so it takes about a minute), starts worker processes, runs
the month-end close of the period as one job (its child jobs post the
documents, then cost every store; it checks the books and closes the period:
``flows.close``) with progress shown, and prints the trial balance, the books
check and how to look at the run. Then it corrects the month as an
accountant would (:mod:`flows.erp.corrections`): one late invoice, dated in
the closed month before, is redated into the first open period after the
close; one invoice the posting rejected (the seed's unknown account 9999) is
fixed in SQL as the ERP would, redated there too (its own month is now
closed) and requeued; that period's posting posts both, and its books check.
Run again, it reuses the data: the period is closed, so it only shows the
books, which do not change.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import click
import psycopg

import engine.reports  # the renderers: they import jinja2 when first called, not here
from engine import (
    JobFailed,
    Registry,
    Settings,
    connect,
    migrate,
    submit,
    wait_for_job,
)
from engine.worker.processes import worker_processes
from flows.erp import checks, corrections, dated, inventory, periods
from flows.erp.actor import actor
from flows.erp.books import TrialBalance, cents, trial_balance
from flows.erp.queries import NamedQueries
from flows.erp.types import next_period, previous_period
from flows.tools.books import trial_balance_table
from flows.tools.seed import has_erp_data, seed

_Q = NamedQueries("seed")


@click.command("demo")
@click.option("--period", default="2026-11", show_default=True, help="the month to close")
@click.option("--items", default=150, show_default=True, help="items per brand (real: ~2000)")
@click.option("--workers", default=2, show_default=True, help="worker processes (2 slots each)")
@click.option("--seed", "seed_value", default=7, show_default=True, help="demo data seed")
def demo(period: str, items: int, workers: int, seed_value: int) -> None:
    """Seed the demo ERP, run the month-end close through workers, print the books."""
    settings = Settings()
    click.echo(f"database: {settings.masked_database_url()}")
    report = migrate(settings)
    click.echo(f"migrations: {len(report.applied)} applied, {len(report.already)} already")
    with connect(settings, autocommit=True) as conn:
        if has_erp_data(conn):
            click.echo("ERP data already there: reusing it (engine seed --replace starts over)")
        else:
            made = seed(
                conn,
                stores=50,
                brands=4,
                employees=500,
                items=items,
                period=period,
                seed=seed_value,
            )
            counts = ", ".join(f"{n} {t[4:]}" for t, n in made.table_counts().items())
            click.echo(f"seeded in {made.elapsed_s:.1f} s: {counts}")
    with connect(settings, autocommit=True) as conn:
        closed = _closed_already(conn, period)
    if closed is not None:
        click.echo(closed)
        _show_books(settings, period)
        _show_index(settings)
        return
    registry = Registry.load(settings.flow_modules)
    started = time.perf_counter()
    with worker_processes(settings, workers, "--concurrency", "2"):
        click.echo(f"workers: {workers} processes x 2 slots")
        job = submit(
            "close",
            {"period": period},
            settings=settings,
            registry=registry,
            submitted_by=f"{actor()} (engine demo)",
        )
        click.echo(f"month-end close of {period}: job {job.job_id}")
        status = wait_for_job(settings, job.job_id)
        click.echo(f"close: {status}")
        click.echo(f"the month end took {time.perf_counter() - started:.1f} s")
        _show_books(settings, period)
        if status == "done":
            _corrections(settings, registry, period)
    # the workers render each report as its job ends; render again here so the
    # path printed exists whatever ENGINE_REPORT_ON_END says
    page = engine.reports.render_job_report(settings, job.job_id, registry=registry)
    click.echo(f"month-end report: {page}  (or: engine status {job.job_id})")
    _show_index(settings)
    if status != "done":
        raise JobFailed(f"the month-end close ended {status}")


def _corrections(settings: Settings, registry: Registry, period: str) -> None:
    """A late invoice and a fixed rejected one, redated (and requeued) into the next period,
    posted there by its posting job; both lines printed, and that period's books check."""
    into, who = next_period(period), f"{actor()} (engine demo)"
    with connect(settings) as conn:
        waiting = dated.waiting(conn)
        late = waiting[0].examples[0] if waiting else None
        bad = _Q.first(conn, "demo_rejected_unknown_account", {"period": period})
        if late is None or bad is None:
            click.echo("corrections: nothing to correct (no late or rejected invoice)")
            return
        _Q.execute(conn, "demo_document_lines_fix_unknown_account", {"id": bad["id"]})
        corrections.redate(
            conn, [late, bad["number"]], into=into, actor=who, reason="late: its month is closed"
        )
        corrections.requeue(conn, [bad["number"]], actor=who, reason="the ERP fixed its VAT line")
    job = submit(
        "posting", {"period": into}, settings=settings, registry=registry, submitted_by=who
    )
    status = wait_for_job(settings, job.job_id)
    with connect(settings, autocommit=True) as conn:
        shown = {d.number: d for d in corrections.corrected(conn, into).documents}
        report = checks.check_period(conn, into)
    d = shown.get(late)
    click.echo(
        f"late document {late}, dated {d.date if d else '?'} in closed {previous_period(period)}: "
        f"redated into {into}, {d.status if d else 'not found'} by posting job {job.job_id}"
    )
    d = shown.get(bad["number"])
    click.echo(
        f"rejected document {bad['number']} ({bad['reject_reason']}): fixed in the ERP, "
        f"redated into {into} ({period} is closed), requeued, "
        f"{d.status if d else 'not found'} by posting job {job.job_id}"
    )
    verdict = "every identity holds" if report.ok else "; ".join(report.problems)
    click.echo(f"books check {into} ({report.status}): {verdict}")
    if status != "done" or not report.ok:
        raise JobFailed(f"the corrections of {into} did not post cleanly: posting {status}")


def _closed_already(conn: psycopg.Connection[Any], period: str) -> str | None:
    found = periods.info(conn, period)
    if found is None or found.status != "closed" or found.closed_at is None:
        return None
    return (
        f"period {period} was closed by {found.closed_by} at {found.closed_at:%Y-%m-%d %H:%M:%S}"
        f": its books do not change (engine books reopen --period {period} --reason ..., "
        "or engine seed --replace to start over)"
    )


def _show_books(settings: Settings, period: str) -> None:
    with connect(settings, autocommit=True) as conn:
        click.echo(trial_balance_table(trial_balance(conn, period)))
        click.echo(_month_in_figures(trial_balance(conn, period, by_store=True)))
        negative, costed = inventory.negative_stock(conn, period)
        click.echo(f"negative stock: {negative} of {costed} store items closed below zero")
        report = checks.check_period(conn, period)
    verdict = "every identity holds" if report.ok else "; ".join(report.problems)
    held = sum(1 for c in report.checks if c.ok and not c.skipped)
    click.echo(f"books check {period} ({report.status}): {held} checks, {verdict}")
    for flag in report.flags:
        click.echo(f"  flag, {'refuses the close' if flag.refuses else 'warning'}: {flag.line}")


def _month_in_figures(tb: TrialBalance) -> str:
    """What an accountant reads first: margin, and inventory store by store."""
    moved = {code: Decimal(0) for code in ("4000", "4100", "5000", "5100")}
    stock: list[tuple[Decimal, str]] = []
    for a in tb.accounts:
        if a.code in moved:
            moved[a.code] += a.debit - a.credit
        elif a.code == "1300" and a.store is not None:
            stock.append((a.closing, a.store))
    net_sales = -(moved["4000"] + moved["4100"])
    cogs = moved["5000"] + moved["5100"]
    share = f"{cogs / net_sales:.1%}" if net_sales else "n/a"
    low, store = min(stock) if stock else (Decimal(0), "none")
    debit = sum(1 for value, _ in stock if value > 0)
    return (
        f"net sales {cents(net_sales)}, cost of goods sold {cents(cogs)} ({share} of net "
        f"sales, gross margin {cents(net_sales - cogs)}); inventory (1300) a debit in "
        f"{debit} of {len(stock)} stores, the lowest {cents(low)} ({store})"
    )


def _show_index(settings: Settings) -> None:
    index = engine.reports.render_index(settings)
    click.echo(f"all runs: {index}  (browse: engine reports serve)")
    click.echo(
        "to act on jobs (approve, retry, cancel): engine users add NAME --role admin, "
        "then engine console (http://127.0.0.1:8080/)"
    )
