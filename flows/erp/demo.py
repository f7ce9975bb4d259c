"""``engine demo``: the ERP's month end, from an empty database to a trial balance.

Migrates, seeds the demo ERP at the real store, brand and employee counts
(fewer items, so it takes about a minute), starts worker processes, runs
costing and posting for the period with progress shown, and prints the trial
balance and how to look at the runs. Run again, it reuses the data: costing
finds the period costed and posting finds nothing left to post, so the books
do not change.
"""

from __future__ import annotations

import getpass
import socket
import time

import click

from engine import (
    JobFailed,
    Registry,
    Settings,
    connect,
    migrate,
    render_index,
    render_job_report,
    submit,
    wait_for_job,
)
from engine.processes import worker_processes
from flows.erp.books import _table, trial_balance
from flows.erp.seed import has_erp_data, seed


@click.command("demo")
@click.option("--period", default="2026-11", show_default=True, help="the month to close")
@click.option("--items", default=150, show_default=True, help="items per brand (real: ~2000)")
@click.option("--workers", default=2, show_default=True, help="worker processes (2 slots each)")
@click.option("--seed", "seed_value", default=7, show_default=True, help="demo data seed")
def demo(period: str, items: int, workers: int, seed_value: int) -> None:
    """Seed the demo ERP, run costing and posting through workers, print the books."""
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
                documents=2000,
                seed=seed_value,
            )
            counts = ", ".join(f"{n} {t[4:]}" for t, n in made.table_counts().items())
            click.echo(f"seeded in {made.elapsed_s:.1f} s: {counts}")
    registry = Registry.load(settings.flow_modules)
    started = time.perf_counter()
    with worker_processes(settings, workers, "--concurrency", "2"):
        click.echo(f"workers: {workers} processes x 2 slots")
        jobs = {
            name: submit(
                name,
                {"period": period},
                settings=settings,
                registry=registry,
                submitted_by=f"{getpass.getuser()}@{socket.gethostname()} (engine demo)",
            )
            for name in ("costing", "posting")
        }
        statuses = {}
        for name, job in jobs.items():
            click.echo(f"{name}: job {job.job_id}")
            statuses[name] = wait_for_job(settings, job.job_id)
            click.echo(f"{name}: {statuses[name]}")
    click.echo(f"both jobs ended in {time.perf_counter() - started:.1f} s")
    with connect(settings, autocommit=True) as conn:
        click.echo(_table(trial_balance(conn, period)))
    # the workers render each report as its job ends; render again here so the
    # paths printed exist whatever ENGINE_REPORT_ON_END says
    for name, job in jobs.items():
        page = render_job_report(settings, job.job_id, registry=registry)
        click.echo(f"{name} report: {page.resolve()}  (or: engine status {job.job_id})")
    click.echo(f"all runs: {render_index(settings).resolve()}  (browse: engine reports serve)")
    failed = [f"{name} {status}" for name, status in statuses.items() if status != "done"]
    if failed:
        raise JobFailed("demo jobs did not end done: " + ", ".join(failed))
