"""``engine prune [--dry-run] [--json]`` and ``engine pin JOB --until DATE --reason R``."""

from __future__ import annotations

from datetime import datetime

import click
from rich.table import Table

from engine.cli.args import parse_job_id
from engine.cli.audit import by_option
from engine.cli.output import out, print_json, print_table
from engine.cli.state import current
from engine.retention import PruneReport, pin_job, prune
from engine.store.status import AuditSource

__all__ = ["pin", "prune_command"]


@click.command("prune")
@click.option(
    "--dry-run",
    is_flag=True,
    help="count what would go, by flow and end state, and change nothing",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def prune_command(dry_run: bool, as_json: bool) -> None:
    """Retire finished jobs past their retention: a summary and the report stay.

    Each flow's horizons per end state (Flow(retention=...)) or the defaults
    (ENGINE_RETENTION_DONE_DAYS, _FAILED_DAYS, _CANCELLED_DAYS) apply; pinned
    jobs (engine pin) and active ones are kept. Rows go in small batches, each
    its own short transaction, skipping any job another session holds.
    """
    state = current()
    report = prune(state.settings, registry=state.registry, dry_run=dry_run)
    if as_json:
        print_json(report.as_json())
        return
    _print_report(report)


def _print_report(report: PruneReport) -> None:
    verb = "would remove" if report.dry_run else "removed"
    table = Table("flow", "status", "jobs", "step runs", "events", "tags")
    for (flow, status), c in sorted(report.counts.items()):
        table.add_row(flow, status, str(c.jobs), str(c.step_runs), str(c.events), str(c.tags))
    total = report.total
    if report.counts:
        print_table(table)
    out.print(
        f"{verb} {total.jobs} job(s), {total.step_runs} step run(s), {total.events} event(s), "
        f"{total.tags} tag(s) ended before their retention as of "
        f"{report.as_of:%Y-%m-%d %H:%M:%S %Z}"
        + (
            f"; {report.skipped} kept this time (busy, changed or pinned)" if report.skipped else ""
        ),
        highlight=False,
    )


@click.command()
@click.argument("job_id")
@click.option(
    "--until",
    required=True,
    type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
    help="keep the job until this date (UTC), past its retention",
)
@click.option("--reason", required=True, help="why it must be kept (recorded in the audit trail)")
@by_option
def pin(job_id: str, until: datetime, reason: str, by: str | None) -> None:
    """Keep a job from being pruned until a date (audited).

    JOB_ID may be a unique prefix of the id. A new pin replaces the last one.
    """
    settings = current().settings
    pinned = pin_job(
        settings, parse_job_id(settings, job_id), until, reason, actor=by, source=AuditSource.CLI
    )
    out.print(
        f"job {pinned.job_id} ({pinned.flow}, {pinned.status}) pinned until "
        f"{pinned.until:%Y-%m-%d %H:%M:%S %Z}",
        highlight=False,
    )
