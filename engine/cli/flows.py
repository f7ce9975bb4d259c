"""``engine flows list|show`` and ``engine workers``: flows, versions in flight, who runs them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click
from rich.table import Table

from engine.cli.output import out, print_json, print_table
from engine.cli.state import current
from engine.errors import UnknownFlow
from engine.store.workers import VersionInFlight
from engine.worker.roster import live_workers, versions_in_flight

__all__ = ["flows", "workers"]


@click.group()
def flows() -> None:
    """The registered flows."""


@flows.command("list")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def flows_list(as_json: bool) -> None:
    """List registered flows."""
    registry = current().registry
    if as_json:
        print_json(
            {
                "flows": [
                    {"name": f.name, "version": f.version, "description": f.description}
                    for f in registry.flows()
                ]
            }
        )
        return
    table = Table("flow", "version", "steps", "description")
    for f in registry.flows():
        table.add_row(f.name, str(f.version), str(len(f.steps)), f.description)
    print_table(table)


@flows.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def flows_show(name: str, as_json: bool) -> None:
    """Show a flow's parameters, steps and edges, and its versions in flight.

    Versions in flight: each version active jobs need (a job runs the version
    it was submitted with), with its active jobs, the oldest one's age and the
    live workers that have it loaded; and each version live workers have
    loaded. A flow only other deploys' workers have is shown by its versions.
    """
    state = current()
    registry = state.registry
    flow = registry.get(name) if name in registry else None
    report = versions_in_flight(state.settings, name)
    if flow is None and not report.versions:
        raise UnknownFlow(name, registry.names())
    if as_json:
        print_json(
            {
                "flow": name,
                "version_here": None if flow is None else flow.version,
                "description": None if flow is None else flow.description,
                "steps": [] if flow is None else list(flow.steps),
                "signals": [] if flow is None else list(flow.signals),
                "versions": report.as_json(),
                "worker_live_s": report.live_s,
            }
        )
        return
    if flow is not None:
        click.echo(flow.describe())
    else:
        click.echo(f"flow {name} (not loaded by this command; only workers have it)")
    out.print(
        f"versions in flight (live workers: seen within {report.live_s:g} s):", highlight=False
    )
    table = Table("version", "active jobs", "oldest active", "live workers with it loaded")
    for v in report.versions:
        table.add_row(str(v.version), str(v.active_jobs), _age(v.oldest_age_s), _who(v))
    print_table(table)


def _who(v: VersionInFlight) -> str:
    if v.workers:
        return ", ".join(v.workers)
    if v.last_loaded_s_ago is None:
        return "none (never loaded)"
    return f"none (last seen {_age(v.last_loaded_s_ago)} ago)"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@click.command("workers")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def workers(as_json: bool) -> None:
    """List live workers (seen within ENGINE_WORKER_LIVE_S) and the flow versions each runs."""
    state = current()
    rows = live_workers(state.settings)
    if as_json:
        print_json({"workers": [_worker_json(w.__dict__) for w in rows]})
        return
    if not rows:
        out.print(
            f"no live worker (none seen within {state.settings.worker_live_s:g} s)",
            highlight=False,
        )
        return
    table = Table("worker", "transport", "slots", "flow versions", "started", "seen")
    for w in rows:
        table.add_row(
            w.id,
            w.transport,
            str(w.concurrency),
            ", ".join(w.runnable),
            f"{w.started_at:%Y-%m-%d %H:%M:%S}",
            f"{_age(w.seen_s_ago)} ago",
        )
    print_table(table)


def _worker_json(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
