"""``engine alerts list|retry``: dead-letter alerts and their delivery to each sink."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from engine import admin
from engine.cli.output import out, print_json
from engine.cli.state import current

__all__ = ["alerts"]


@click.group()
def alerts() -> None:
    """Alerts: one per dead letter, delivered to every sink of ENGINE_ALERT_SINKS."""


@alerts.command("list")
@click.option("--pending", is_flag=True, help="only alerts with a delivery not delivered yet")
@click.option("--limit", default=50, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def alerts_list(pending: bool, limit: int, as_json: bool) -> None:
    """List recent alerts, newest first, with each sink's delivery state."""
    rows = admin.alerts(current().settings, limit, pending=pending)
    if as_json:
        print_json({"alerts": rows})
        return
    table = Table("id", "dead letter", "job", "flow/step", "attempts", "error", "deliveries", "at")
    for r in rows:
        where = f"{r['flow'] or '?'}/{r['step'] or '?'}" if r["source"] == "step" else "message"
        table.add_row(
            str(r["id"]),
            str(r["dead_letter_id"] or ""),
            str(r["job_id"] or ""),
            where,
            "" if r["attempts"] is None else str(r["attempts"]),
            r["error_line"],
            "\n".join(_delivery(d) for d in r["deliveries"]),
            f"{r['created_at']:%Y-%m-%d %H:%M:%S}",
        )
    out.print(table)


def _delivery(d: dict[str, Any]) -> str:
    state = f"{d['sink']}: {d['status']} ({d['attempts']} send(s))"
    if d["status"] != "delivered" and d.get("last_error"):
        state += f" {d['last_error']}"
    return state


@alerts.command("retry")
@click.argument("alert_id", type=int, required=False)
def alerts_retry(alert_id: int | None) -> None:
    """Send abandoned deliveries again (of ALERT_ID, or of every alert)."""
    n = admin.retry_alerts(current().settings, alert_id)
    out.print(f"{n} abandoned deliver{'y' if n == 1 else 'ies'} pending again", highlight=False)
