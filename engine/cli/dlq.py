"""``engine dlq list|replay|purge``: dead letters."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from engine.cli.audit import by_option, reason_option
from engine.cli.bulk import bulk_options, run_bulk, wants_bulk
from engine.cli.output import out, print_json, print_table
from engine.cli.state import current
from engine.jobs import admin

__all__ = ["dlq"]


@click.group()
def dlq() -> None:
    """Dead letters: step runs past their attempts, and poison messages."""


@dlq.command("list")
@click.option("--limit", default=100, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def dlq_list(limit: int, as_json: bool) -> None:
    """List open dead letters with their reasons."""
    rows = admin.dead_letters(current().settings, limit)
    if as_json:
        print_json({"dead_letters": rows})
        return
    table = Table("id", "source", "job", "flow", "step", "reason", "at")
    for r in rows:
        step = f"{r['step']}[{r['fanout_key']}]" if r["fanout_key"] else (r["step"] or "")
        table.add_row(
            str(r["id"]),
            r["source"],
            str(r["job_id"] or ""),
            r["flow"] or "",
            step,
            r["reason"],
            f"{r['created_at']:%Y-%m-%d %H:%M:%S}",
        )
    print_table(table)


@dlq.command("replay")
@click.argument("dead_letter_id", type=int, required=False)
@by_option
@reason_option
@bulk_options("replay")
def dlq_replay(dead_letter_id: int | None, by: str | None, reason: str | None, **bulk: Any) -> None:
    """Re-drive a dead letter: retry its step run's job, or send its message again.

    Recorded (who, why) in the audit trail. In bulk: filters with --dry-run
    write a preview; --apply PREVIEW --reason R replays that set only.
    """
    if dead_letter_id is None or wants_bulk(bulk):
        values = {"dead_letter_id": dead_letter_id, **bulk}
        run_bulk("replay", values, by=by, reason=reason, single="dead_letter_id")
        return
    done = admin.replay(current().settings, dead_letter_id, actor=by, reason=reason)
    out.print(done, highlight=False)


@dlq.command("purge")
@click.option("--yes", is_flag=True, help="purge them all without asking")
@by_option
@reason_option
@bulk_options("purge")
def dlq_purge(yes: bool, by: str | None, reason: str | None, **bulk: Any) -> None:
    """Delete poison-message and replayed dead letters (open step dead letters stay).

    Recorded (who, why, how many) in the audit trail. In bulk: filters with
    --dry-run write a preview; --apply PREVIEW --reason R deletes that set only.
    """
    if wants_bulk(bulk):
        run_bulk("purge", bulk, by=by, reason=reason, single="none")
        return
    if not yes:
        click.confirm("Delete poison-message and replayed dead letters?", abort=True)
    deleted = admin.purge(current().settings, actor=by, reason=reason)
    out.print(f"{deleted} dead letter(s) deleted")
