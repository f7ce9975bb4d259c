"""``engine runs``: jobs newest first, found by the engine's filters and the flows' own.

The engine's options (``--flow``, ``--status``, ``--param NAME=VALUE``,
``--tag NAME=VALUE``, ``--search``) and one per search field the loaded flow
modules export (:mod:`.extensions`: the ERP's ``--period``, ``--store``,
``--document``), all ANDed, through :func:`engine.jobs.search.search_runs`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click
from rich.table import Table

from engine.cli import extensions
from engine.cli.output import print_json, print_table
from engine.cli.state import State, current
from engine.errors import BadInput
from engine.jobs.search import MAX_LIMIT, STATES, RunQuery, RunRow, parse_pair, search_runs
from engine.store import db

__all__ = ["runs", "show_runs"]


_OWN = frozenset({"flow", "status", "param", "tag", "search", "limit", "json", "help"})


class RunsCommand(click.Command):
    """``engine runs``: its own options, and those the flow modules add (``search_fields``)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        own = super().get_params(ctx)
        added = [
            click.Option([f"--{f.name}", f"field_{f.name}"], default=None, help=f.help)
            for f in extensions.search_fields(ctx, _OWN)
        ]
        return [*own[:-1], *added, own[-1]]  # --help last


@click.command(cls=RunsCommand)
@click.option("--flow", default=None, help="only this flow")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(list(STATES)),
    help="only these statuses (repeatable); waiting: running, every unfinished step waiting",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="only jobs submitted with this searchable parameter (repeatable: all must hold)",
)
@click.option(
    "--tag",
    "tags",
    multiple=True,
    metavar="NAME=VALUE",
    help="only jobs a step tagged so (repeatable: all must hold)",
)
@click.option(
    "--search",
    "text",
    default=None,
    help="a job id or unique prefix, else a tag's value, a fan-out key or a flow name",
)
@click.option("--limit", default=50, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.pass_context
def runs(
    ctx: click.Context,
    /,
    flow: str | None,
    statuses: tuple[str, ...],
    params: tuple[str, ...],
    tags: tuple[str, ...],
    text: str | None,
    limit: int,
    as_json: bool,
    **fields: str | None,
) -> None:
    """List recent jobs, newest first (the console's runs search).

    --param finds a parameter only where its flow declares it searchable
    (Flow(searchable=...)); the flow modules may add options of their own.
    """
    state = current()
    if flow is not None:
        state.registry.get(flow)  # an unknown flow is bad input, not an empty list
    pairs = tuple(parse_pair("--param", p) for p in params)
    _check_searchable(state, flow, [name for name, _ in pairs])
    matches = tuple(
        f.match(value)
        for f in extensions.search_fields(ctx, _OWN)
        if (value := fields.get(f"field_{f.name}"))
    )
    query = RunQuery(
        text=text or "",
        flow=flow,
        params=pairs,
        tags=tuple(parse_pair("--tag", t) for t in tags),
        matches=matches,
        limit=1,
    )
    show_runs(state, query, statuses, as_json, limit)


def _check_searchable(state: State, flow: str | None, names: list[str]) -> None:
    """A ``--param`` that no flow (or not ``flow``) declares searchable finds nothing: refused."""
    if not names:
        return
    flows = [state.registry.get(n) for n in ([flow] if flow else state.registry.names())]
    searchable = sorted({n for f in flows for n in f.searchable})
    for name in names:
        if name not in searchable:
            where = f"flow {flow!r} does not declare" if flow else "no loaded flow declares"
            raise BadInput(
                f"bad --param {name!r}: {where} it searchable (Flow(searchable=...)); "
                f"searchable: {', '.join(searchable) or 'none'}"
            )


def _search(state: State, query: RunQuery, statuses: tuple[str, ...], limit: int) -> list[RunRow]:
    """The ``limit`` newest jobs ``query`` finds in any of ``statuses`` (all when none), page
    by page (a search per status, merged)."""
    found: list[RunRow] = []
    with db.connect(state.settings, autocommit=True) as conn:
        for status in statuses or (None,):
            page: RunQuery | None = replace(query, status=status, limit=min(limit, MAX_LIMIT))
            got: list[RunRow] = []
            while page is not None and len(got) < limit:
                result = search_runs(conn, page)
                got.extend(result.rows)
                page = result.next_query
            found.extend(got[:limit])
    found.sort(key=lambda r: (r.created_at, r.job_id.int), reverse=True)
    return found[:limit]


def _run_json(row: RunRow) -> dict[str, Any]:
    """A listed job: ``id``, the stored ``status`` and the ``state`` people read."""
    shown = row.as_json()
    return {
        "id": shown.pop("job_id"),
        **shown,
        "status": row.stored_status,
        "state": row.status,
    }


def show_runs(
    state: State,
    query: RunQuery,
    statuses: tuple[str, ...],
    as_json: bool,
    limit: int = 50,
    extra: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """Print the ``limit`` newest jobs ``query`` finds in any of ``statuses``, or their JSON."""
    rows = _search(state, query, statuses, limit)
    if as_json:
        print_json({"jobs": [_run_json(r) for r in rows], **(extra() if extra else {})})
        return
    table = Table("job", "flow", "status", "params", "created")
    for row in rows:
        shown = row.status
        if row.waiting_for:
            shown += f" ({', '.join(row.waiting_for)})"
        table.add_row(
            str(row.job_id),
            row.flow,
            shown,
            json.dumps(row.params, sort_keys=True),
            f"{row.created_at:%Y-%m-%d %H:%M:%S}",
        )
    print_table(table)
