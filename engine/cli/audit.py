"""``engine audit``: the audit trail of operator actions, and the ``--by`` of the commands that act.

Every command that changes something for an operator (``cancel``, ``retry``,
``dlq replay|purge``, ``signal``, ``schedule add|remove|pause|resume|run``,
the books' close and reopen) takes ``--by NAME`` and records the action with it, else with
the OS user at this host, in the action's own transaction
(:mod:`engine.jobs.audit`): a refused action records nothing.

``engine audit verify`` walks the trail's hash chain (migration 0026): exit 0
with the count and the head hash to keep; exit 1 (:class:`ChecksFailed`)
naming the first entry deleted, changed or reordered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click
from rich.table import Table

from engine.cli.args import parse_job_id
from engine.cli.output import out, print_json, print_table
from engine.cli.state import current
from engine.errors import ChecksFailed
from engine.jobs.audit import audit_trail, verify_chain

__all__ = ["audit", "by_option", "reason_option"]

F = TypeVar("F", bound=Callable[..., Any])


def by_option(f: F) -> F:
    """``--by NAME``: who does the action, as the audit trail records it."""
    return click.option(
        "--by",
        "by",
        default=None,
        metavar="NAME",
        help="who does it (recorded in the audit trail); default user@host",
    )(f)


def reason_option(f: F) -> F:
    """``--reason TEXT``: why, recorded with the action."""
    return click.option("--reason", default=None, help="why (recorded in the audit trail)")(f)


_DAY = click.DateTime(["%Y-%m-%d"])


@click.group(invoke_without_command=True)
@click.option("--job", "job_id", default=None, help="only the entries of this job (id or prefix)")
@click.option("--by", "actor", default=None, help="only the entries of this person (exact)")
@click.option("--action", default=None, help="only this action (e.g. cancel, close, signal)")
@click.option("--from", "first", type=_DAY, default=None, help="from this UTC day (YYYY-MM-DD)")
@click.option("--to", "last", type=_DAY, default=None, help="to this UTC day, inclusive")
@click.option("--limit", default=50, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.pass_context
def audit(
    ctx: click.Context,
    job_id: str | None,
    actor: str | None,
    action: str | None,
    first: datetime | None,
    last: datetime | None,
    limit: int,
    as_json: bool,
) -> None:
    """List the audit trail, newest first: who did what, on what, when and why.

    `engine audit verify` checks that no entry was deleted, changed or reordered.
    """
    if ctx.invoked_subcommand is not None:
        return
    settings = current().settings
    job = None if job_id is None else parse_job_id(settings, job_id)
    entries = audit_trail(
        settings,
        job_id=job,
        actor=actor,
        action=action,
        since=None if first is None else first.replace(tzinfo=UTC),
        until=None if last is None else last.replace(tzinfo=UTC) + timedelta(days=1),
        limit=limit,
    )
    if as_json:
        print_json({"entries": [e.as_json() for e in entries]})
        return
    if not entries:
        out.print("no audit entries" + ("" if job is None else f" for job {job}"), highlight=False)
        return
    table = Table("at", "actor", "source", "action", "target")
    table.add_column("reason / detail", overflow="fold")
    for e in entries:
        target = e.target_kind + ("" if e.target_id is None else f" {e.target_id}")
        why = e.reason or ""
        if e.detail:
            why = (why + " " if why else "") + json.dumps(e.detail, sort_keys=True)
        table.add_row(f"{e.at:%Y-%m-%d %H:%M:%S}", e.actor, e.source, e.action, target, why)
    print_table(table, markup=False, highlight=False)


@audit.command("verify")
@click.option(
    "--expect-head",
    "expect_head",
    default=None,
    metavar="HASH",
    help="a head hash kept from an earlier verify: the chain must still contain it",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def verify(expect_head: str | None, as_json: bool) -> None:
    """Check the trail's hash chain; exit 1 naming the first entry deleted, changed or reordered.

    Prints the head hash: keep it outside the database and pass it to a later
    verify with --expect-head, which also catches a chain rewritten whole by
    the table's owner.
    """
    report = verify_chain(current().settings, expect_head=expect_head)
    if as_json:
        print_json(report.as_json())
    elif report.ok:
        out.print(
            f"audit trail intact: {report.count} entries, head #{report.head_seq} "
            f"{report.head_hash}",
            highlight=False,
            markup=False,
        )
    if not report.ok:
        raise ChecksFailed("audit trail", report.problems)
