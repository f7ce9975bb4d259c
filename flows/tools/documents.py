"""``engine books documents`` and ``engine books approval-threshold``: a period's documents
and the limit of its rejected documents without an approval.

::

    engine books documents --period 2026-11 [--json]
    engine books approval-threshold --period 2026-11 --over 5 --reason "..." [--by NAME]

``documents`` counts every document of the period (:mod:`flows.erp.documents`);
``approval-threshold`` changes the period's limit, looser too, with a reason:
a submit can only set or tighten it (:mod:`flows.erp.approvals`). The change
is in the period's history and the engine's audit trail.
"""

from __future__ import annotations

import click

from engine import record_action
from flows.erp import approvals
from flows.erp.actor import actor
from flows.erp.documents import period_documents
from flows.tools.session import books_transaction, parse_period_option, period_option

__all__ = ["approval_threshold_command", "documents_command"]


@click.command("documents")
@period_option
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def documents_command(period: str, as_json: bool) -> None:
    """Every document of a period: posted, rejected (approved, refused, undecided), unposted,
    late (redated into it), those entered under it but dated in another month, the value
    corrections posted in it (each split between stock on hand and COGS), and the history
    of each document rejected, requeued or redated."""
    with books_transaction(read_only=True) as conn:
        docs = period_documents(conn, parse_period_option(period))
    if as_json:
        click.echo(docs.model_dump_json())
        return
    click.echo(f"Documents of {docs.period}")
    for what, n in docs.lines():
        click.echo(f"  {what:<36} {n:>8}")
    limit = docs.approve_rejects_over
    click.echo(
        "  no limit of rejected documents without an approval"
        if limit is None
        else f"  limit: {limit} rejected without an approval ({docs.unapproved} now)"
    )
    if docs.value_corrections:
        shown = len(docs.value_corrections)
        first = f", the first {shown}" if docs.value_correction_lines > shown else ""
        click.echo(
            f"Value corrections: {docs.value_correction_lines} item line(s), split between "
            f"stock on hand (1300) and sold (5000){first}:"
        )
        for split in docs.value_corrections:
            click.echo(f"  {split.line()}")
    history = docs.history
    if history is None or not history.corrected:
        return
    more = history.corrected - len(history.documents)
    click.echo(
        f"History of {history.corrected} document(s) rejected, requeued or redated "
        f"({history.late} late){f', the first {len(history.documents)}' if more > 0 else ''}:"
    )
    for d in history.documents:
        late = f", late: posted in {d.posting_period}" if d.late else ""
        click.echo(f"  {d.number} ({d.status}; dated {d.date}{late})")
        for e in d.events:
            click.echo(f"    {e.line}")


@click.command("approval-threshold")
@period_option
@click.option("--over", type=int, required=True, help="rejected documents allowed unapproved")
@click.option("--reason", required=True, help="why the limit changes (recorded)")
@click.option("--by", "by", default=None, help="who changes it (default: user@host)")
def approval_threshold_command(period: str, over: int, reason: str, by: str | None) -> None:
    """Change a period's limit of rejected documents without an approval (looser too).

    A submit's --approve-rejects-over can only set or tighten it; this records
    who loosened it and why in the period's history and the audit trail.
    """
    who = by or actor()
    p = parse_period_option(period)
    with books_transaction() as conn:
        was = approvals.set_threshold(conn, p, over, actor=who, reason=reason)
        record_action(
            conn,
            "threshold",
            "period",
            p,
            actor=who,
            source="cli",
            reason=reason.strip(),
            detail={"approve_rejects_over": over, "was": was},
        )
    click.echo(f"period {p}: limit {'none' if was is None else was} -> {over} (by {who})")
