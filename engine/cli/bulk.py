"""The bulk forms of ``engine retry|cancel|dlq replay|dlq purge`` (:mod:`engine.jobs.bulk`).

``--dry-run`` with filters writes a preview and prints its id, the counts by
flow and state and a sample; ``--apply PREVIEW --reason R`` acts on that set
only and lists what it skipped (changed since the preview) or what the
single action refused. An expired or applied preview is refused (exit 2,
:data:`~engine.cli.exits.EXIT_BAD_INPUT`). The single-id forms are unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.table import Table

from engine.cli.output import out, print_json, print_table
from engine.cli.state import current
from engine.errors import BadInput
from engine.jobs import bulk
from engine.jobs.bulk.filtering import STATES_BY_ACTION, BulkFilter, parse_when
from engine.jobs.search import parse_pair

__all__ = ["bulk_options", "run_bulk", "wants_bulk"]

F = TypeVar("F", bound=Callable[..., Any])

_FILTERS = ("flow", "state", "error", "since", "until", "tag", "param")


def bulk_options(action: str) -> Callable[[F], F]:
    """The filter options, ``--dry-run``, ``--apply`` and ``--json`` of one bulk action."""
    states = ", ".join(STATES_BY_ACTION[action])
    options = [
        click.option("--flow", default=None, help="bulk: only this flow's"),
        click.option("--state", default=None, help=f"bulk: only this state ({states})"),
        click.option("--error", default=None, help="bulk: only those whose error contains this"),
        click.option("--since", default=None, help="bulk: from (ISO 8601, or 2h, 3d ago)"),
        click.option("--until", default=None, help="bulk: before (ISO 8601, or 2h, 3d ago)"),
        click.option("--tag", "tags", multiple=True, metavar="NAME=VALUE", help="bulk: tag"),
        click.option(
            "--param", "params", multiple=True, metavar="NAME=VALUE", help="bulk: parameter"
        ),
        click.option("--dry-run", is_flag=True, help="bulk: write a preview, change nothing"),
        click.option(
            "--apply",
            "apply_id",
            default=None,
            metavar="PREVIEW",
            help="bulk: act on this preview's set only (with --reason)",
        ),
        click.option(
            "--ttl",
            "ttl_s",
            type=float,
            default=bulk.DEFAULT_TTL_S,
            envvar="ENGINE_BULK_PREVIEW_TTL_S",
            show_envvar=True,
            show_default=True,
            help="bulk: seconds a preview may be applied",
        ),
        click.option("--json", "as_json", is_flag=True, help="print one JSON object"),
    ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def wants_bulk(values: dict[str, Any]) -> bool:
    """Whether a command was given a bulk form (a filter, ``--dry-run`` or ``--apply``)."""
    return bool(values.get("dry_run") or values.get("apply_id") or _given_filters(values))


def _given_filters(values: dict[str, Any]) -> list[str]:
    return [f"--{n}" for n in _FILTERS if values.get(n) or values.get(f"{n}s")]


def run_bulk(
    action: str, values: dict[str, Any], *, by: str | None, reason: str | None, single: str
) -> None:
    """Preview or apply ``action`` with the options in ``values``; ``single`` names the
    single-id form's argument, refused together with the bulk form."""
    settings = current().settings
    filters = _given_filters(values)
    as_json = bool(values.get("as_json"))
    if values.get(single):
        raise BadInput(
            f"give either {single.upper().replace('_', ' ')} or a bulk form (a filter with "
            f"--dry-run, or --apply PREVIEW), not both"
        )
    if values.get("apply_id"):
        if values.get("dry_run") or filters:
            raise BadInput(
                "--apply acts on the preview's frozen set only: give no filter "
                f"({', '.join(filters) or '--dry-run'}) with it"
            )
        applied = bulk.apply(
            settings,
            _preview_id(values["apply_id"]),
            reason=reason or "",
            action=action,
            actor=by,
        )
        _print_applied(applied, as_json)
        return
    if not values.get("dry_run") and not filters:
        raise BadInput(
            f"give {single.upper().replace('_', ' ')}, or filters with --dry-run (a preview to "
            "check), or --apply PREVIEW --reason R"
            if single != "none"
            else "give filters with --dry-run (a preview to check), or --apply PREVIEW --reason R"
        )
    if not values.get("dry_run"):
        raise BadInput(
            f"filters ({', '.join(filters)}) need --dry-run: it writes a preview to check, "
            "then --apply PREVIEW --reason R acts on it"
        )
    where = BulkFilter(
        flow=values.get("flow"),
        state=values.get("state"),
        error=values.get("error"),
        since=None if values.get("since") is None else parse_when("--since", values["since"]),
        until=None if values.get("until") is None else parse_when("--until", values["until"]),
        tags=tuple(parse_pair("tag", t) for t in values.get("tags") or ()),
        params=tuple(parse_pair("param", p) for p in values.get("params") or ()),
    )
    made = bulk.preview(settings, action, where, actor=by, ttl_s=values["ttl_s"])
    _print_preview(made, as_json)


def _preview_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise BadInput(f"bad preview id {text[:60]!r}: the uuid `--dry-run` printed") from None


def _print_preview(made: bulk.BulkPreview, as_json: bool) -> None:
    if as_json:
        print_json(made.as_json())
        return
    out.print(
        f"preview {made.id}: {made.action} of {made.total} item(s); apply by "
        f"{made.expires_at:%Y-%m-%d %H:%M:%S %Z} with --apply {made.id} --reason R",
        highlight=False,
    )
    counts = Table("flow", "state", "count")
    for c in made.counts:
        counts.add_row(c["flow"] or "(message)", c["state"], str(c["n"]))
    print_table(counts)
    if made.sample:
        sample = Table("sample id", "flow", "state")
        for item in made.sample:
            sample.add_row(item.id, item.flow or "(message)", item.state)
        print_table(sample)


def _print_applied(applied: bulk.BulkApplied, as_json: bool) -> None:
    if as_json:
        print_json(applied.as_json())
        return
    out.print(
        f"preview {applied.preview_id}: {applied.action} done for {len(applied.done)} item(s); "
        f"{len(applied.skipped)} skipped (changed since the preview), "
        f"{len(applied.refused)} refused",
        highlight=False,
    )
    if applied.left():
        out.print(applied.left(), highlight=False, markup=False)
    for what, skips in (
        ("skipped", applied.skipped),
        ("refused", applied.refused),
        ("busy", applied.busy),
    ):
        for s in skips:
            out.print(f"{what} {s.id} (was {s.was}): {s.why}", highlight=False, markup=False)
