"""``engine alerts list|retry``: dead-letter alerts and their delivery to each sink."""

from __future__ import annotations

from typing import Any

import click

from engine.cli.output import out, print_json
from engine.cli.state import current
from engine.jobs import admin

__all__ = ["alerts"]


@click.group()
def alerts() -> None:
    """Alerts: one per dead letter (per orphaned flow version, per schedule time that did not
    submit its job), delivered to every sink."""


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
    if not rows:
        out.print("no alerts" + (" pending" if pending else ""), highlight=False)
    for r in rows:
        # a block per alert: readable at any terminal width, and errors are never wrapped away
        out.print(_block(r), highlight=False, markup=False)


def _block(r: dict[str, Any]) -> str:
    head = f"alert {r['id']}  {r['created_at']:%Y-%m-%d %H:%M:%S}"
    if r["dead_letter_id"] is not None:
        head += f"  dead letter {r['dead_letter_id']}"
    if r["source"] in ("step", "release"):
        what = f"  job {r['job_id']}  {r['flow'] or '?'}/{r['step'] or '?'}"
        if r["attempts"] is not None:
            what += f"  attempts {r['attempts']}"
        if r["source"] == "release":
            what += "  an attempt charged: released without charge too often"
    elif r["source"] == "version":
        what = f"  flow {r['flow']} version {r['flow_version']} loaded by no live worker"
        what += f"  oldest job {r['job_id']}"
    elif r["source"] == "schedule":
        what = (
            f"  schedule {r['schedule']}  {r['flow']}  for {r['scheduled_for']:%Y-%m-%d %H:%M} UTC"
        )
    else:
        what = "  a message that can never be handled"
    lines = [head, what, f"  error: {r['error_line']}"]
    lines += [f"  {_delivery(d)}" for d in r["deliveries"]]
    return "\n".join(lines) + "\n"


def _delivery(d: dict[str, Any]) -> str:
    sends = f"{d['attempts']} send{'' if d['attempts'] == 1 else 's'}"
    state = f"{d['sink']}: {d['status']} ({sends})"
    if d["status"] != "delivered" and d.get("last_error"):
        state += f": {d['last_error']}"
    return state


@alerts.command("retry")
@click.argument("alert_id", type=int, required=False)
def alerts_retry(alert_id: int | None) -> None:
    """Send abandoned deliveries again (of ALERT_ID, or of every alert)."""
    n = admin.retry_alerts(current().settings, alert_id)
    out.print(f"{n} abandoned deliver{'y' if n == 1 else 'ies'} pending again", highlight=False)
