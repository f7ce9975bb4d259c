"""``engine report JOB_ID`` and ``engine reports build|serve``."""

from __future__ import annotations

from pathlib import Path

import click

from engine.cli.args import parse_job_id
from engine.config import Settings
from engine.errors import NoSuchJob
from engine.reports.render import render_all, render_job_report
from engine.reports.serve import make_server
from engine.retention.pruned import pruned_job

__all__ = ["report", "reports"]

_out_option = click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="folder to write to [default: ENGINE_REPORTS_URL if set, else ENGINE_REPORTS_DIR]",
)


@click.command()
@click.argument("job_id")
@_out_option
def report(job_id: str, out: Path | None) -> None:
    """Render one job's HTML report and print where it went (a path or an s3:// URI).

    JOB_ID may be a unique prefix of the id (4 hex digits at least).
    """
    settings = Settings()
    parsed = parse_job_id(settings, job_id)
    # no such job is NoSuchJob, a BadInput: the root group's mapping exits 2
    try:
        click.echo(render_job_report(settings, parsed, out_dir=out))
    except NoSuchJob:
        pruned = pruned_job(settings, parsed)
        if pruned is None:
            raise
        # its rows are gone: the report stored before they went is the report
        click.echo(pruned.report or "(no report was stored)")
        click.echo(pruned.note, err=True)


@click.group()
def reports() -> None:
    """HTML run reports: build them all, or serve them."""


@reports.command("build")
@_out_option
def build(out: Path | None) -> None:
    """Render the index and every job's report; print where the index went."""
    stored = render_all(Settings(), out_dir=out)
    click.echo(f"{stored[0]} ({len(stored) - 1} run report(s))")


@reports.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--refresh",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="seconds between reloads of a page while its job (on the index: any job) is active",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="folder of files beside the reports (rejected rows) [default: ENGINE_REPORTS_DIR]",
)
def serve(host: str, port: int, refresh: float, out: Path | None) -> None:
    """Serve the reports read-only, rendered from the database on each request.

    A running job's page (and the index while any job runs) reloads itself.
    """
    settings = Settings()
    server = make_server(settings, host, port, out, refresh_s=refresh)
    click.echo(f"serving live reports on http://{host}:{server.server_port}/")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
