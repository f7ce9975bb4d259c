"""``engine books requeue`` and ``engine books redate``: correct a month's documents.

::

    engine books requeue DOCUMENT... --reason R [--by NAME] [--json]
    engine books redate DOCUMENT... --into P --reason R [--by NAME] [--json]

Both call :mod:`flows.erp.corrections` in one transaction: every document
named is corrected, each with its entry in the audit trail and its event in
the document's history, or none is (exit 2 naming the document and why, and
what would be valid).
"""

from __future__ import annotations

import json

import click

from flows.erp import corrections
from flows.erp.actor import actor
from flows.erp.types import parse_period
from flows.tools.session import books_transaction

__all__ = ["redate_command", "requeue_command"]


def _echo(done: list[corrections.Correction], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"corrections": [c.model_dump(mode="json") for c in done]}))
        return
    for c in done:
        how = (
            f"back to unposted in {c.period}"
            if c.action == "requeued"
            else f"dated in {c.date_period}, posts in {c.period}"
        )
        click.echo(f"{c.number} {c.action} by {c.actor}: {how} ({c.reason})")


@click.command("requeue")
@click.argument("documents", nargs=-1, required=True)
@click.option("--reason", required=True, help="why they come back, e.g. the ERP fixed them")
@click.option("--by", "by", default=None, help="who requeues them (default: user@host)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def requeue_command(documents: tuple[str, ...], reason: str, by: str | None, as_json: bool) -> None:
    """Put rejected DOCUMENTS (numbers), fixed in the ERP, back as unposted: the next posting
    of their period judges them again. Refused (exit 2, nothing changed) for an unknown
    document, one not rejected, one whose period is closed (redate it), or no reason."""
    with books_transaction() as conn:
        done = corrections.requeue(
            conn, documents, actor=by or actor(), reason=reason, source="cli"
        )
    _echo(done, as_json)


@click.command("redate")
@click.argument("documents", nargs=-1, required=True)
@click.option("--into", "into", required=True, help="the first open period, YYYY-MM")
@click.option("--reason", required=True, help="why they post late (recorded)")
@click.option("--by", "by", default=None, help="who redates them (default: user@host)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def redate_command(
    documents: tuple[str, ...], into: str, reason: str, by: str | None, as_json: bool
) -> None:
    """Post DOCUMENTS (numbers) dated in a closed month in the first open period INTO: they
    keep their date; their journal and stock moves are INTO's. Refused (exit 2, nothing
    changed) for any other period, a document posted or not waiting in a closed month."""
    period = parse_period(into, option="--into")
    with books_transaction() as conn:
        done = corrections.redate(
            conn, documents, into=period, actor=by or actor(), reason=reason, source="cli"
        )
    _echo(done, as_json)
