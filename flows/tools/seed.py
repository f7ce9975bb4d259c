"""Deterministic demo data for the ERP: ``engine seed`` and :func:`seed`.

One ``random.Random`` per section (catalog, loops, opening stock, the walk
of the month, documents), each seeded from ``--seed``, so the same options
give the same rows. Rows are built in Python and loaded with COPY in one
transaction; document lines (about a million at the real size) go out as
COPY text, one store at a time, without an intermediate row object.

The seed writes **documents, not stock moves**: the month of each store is
walked item by item (receipts, sales, returns, transfers, a month-end
count) and written as the documents a store produces (a sales invoice of
the day's takings, a credit note of its returns, a purchase invoice of its
deliveries, one transfer per receiving store, a stock count). Posting turns
each into its journal and its stock moves (:mod:`flows.posting`), so the
ledger and the stock ledger come from one source.
The world and its month walked are :mod:`.seed_world`'s, the documents
written from them :mod:`.seed_paper`'s; this module loads them.

Layout: the seeded period P is open and has opening balances (every
store's first period, ``erp_store_periods``: loaded), except the stores
opened this period (the last ones), which start empty, are stocked by
transfers and forward part of it; about one item in eight goes round a
loop of stores in the month. The period before P is closed and holds only
the deliberately bad documents whose fault is "dated in a closed period".
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
import psycopg
from psycopg import sql
from pydantic import BaseModel

from engine import BadInput, EngineError, Settings, StoreError, connect
from flows.erp.queries import NamedQueries
from flows.erp.types import parse_period
from flows.tools.seed_paper import Paper
from flows.tools.seed_world import Month, WalkStats, World, walk

__all__ = ["DEFAULT_MOVES_PER_ITEM", "SeedReport", "command", "seed"]

DEFAULT_MOVES_PER_ITEM = 11.0
"""Average stock moves per (store, item) and month: 50 stores x 2000 items ~ 1M moves."""

_Q = NamedQueries("seed")
_F = TypeVar("_F", bound=Callable[..., Any])


class SeedReport(BaseModel):
    """What :func:`seed` wrote: rows per table, the faults planted, the time it took."""

    period: str
    closed_period: str
    seed: int
    brands: int
    stores: int
    employees: int
    items: int
    periods: int
    opening_balances: int
    documents: int
    document_lines: int
    documents_by_kind: dict[str, int]
    stock_moves: int
    stock_moves_by_kind: dict[str, int]
    bad_documents: dict[str, int]
    negative_stock_items: int
    new_stores: list[str]
    loop_items: int
    elapsed_s: float

    def table_counts(self) -> dict[str, int]:
        """Rows written per ERP table (stock moves are posting's, from the documents)."""
        names = "brands stores employees items periods opening_balances documents document_lines"
        return {f"erp_{n}": getattr(self, n) for n in names.split()}


def has_erp_data(conn: psycopg.Connection[Any]) -> bool:
    """Whether the ERP tables hold data already (brands exist), as :func:`seed` decides it."""
    return bool(_Q.one(conn, "brand_exists")["exists"])


def seed(
    conn: psycopg.Connection[Any],
    *,
    stores: int,
    brands: int,
    employees: int,
    items: int,
    period: str,
    seed: int,
    replace: bool = False,
    moves_per_item: float = DEFAULT_MOVES_PER_ITEM,
    new_stores: int | None = None,
) -> SeedReport:
    """Write a month of ERP documents for ``period`` in one transaction; report what it wrote.

    ``items`` is per brand; ``new_stores`` (default: one in 25) stores open
    this period, with no opening stock. Raises :class:`~engine.BadInput` for
    an argument out of range, or when ERP data exists and ``replace`` is
    false; with ``replace`` every ERP data table is emptied first (the
    accounts stay). Joins the caller's transaction if one is open.
    """
    started = time.perf_counter()
    period = parse_period(period)
    if min(stores, brands, items) < 1 or employees < stores:
        raise BadInput(
            f"stores ({stores}), brands ({brands}), items ({items}) must be >= 1 and "
            f"employees ({employees}) >= stores (one manager each)"
        )
    if not 0 <= moves_per_item <= 1000:
        raise BadInput(f"moves per item must be within 0..1000, not {moves_per_item}")
    new = stores // 25 if new_stores is None else new_stores
    if not 0 <= new < stores:
        raise BadInput(f"new stores must be within 0..{stores - 1}, not {new}")
    month = Month(period)
    world = World(seed, stores, brands, employees, items, new)
    opening, opening_text = world.opening(seed, period)
    stats = WalkStats()
    paper = Paper(random.Random(f"{seed}:documents"), month, world)
    with conn.transaction():
        _Q.execute(conn, "erp_seed_lock")
        if has_erp_data(conn):
            if not replace:
                raise BadInput(
                    "the database already holds ERP data (brands exist); "
                    "use --replace (replace=True) to delete it and seed again"
                )
            _Q.execute(conn, "erp_data_truncate")
        _copy_rows(conn, "brand_copy", world.brands)
        _copy_rows(conn, "store_copy", world.stores)  # fields in column order
        _copy_rows(conn, "employee_copy", world.staff)
        _copy_rows(conn, "item_copy", [i for its in world.catalog.values() for i in its])
        # a fixed closing time, not now(): a reseed must be row-identical
        at = f"{period}-01 00:00:00+00"
        closed = (month.previous, "closed", at, at, "seed")
        _copy_rows(conn, "period_copy", [closed, (period, "open", None, None, None)])
        # every store starts its books in the seeded period, from the openings loaded next
        _copy_rows(conn, "store_period_copy", [(s.id, period, "loaded") for s in world.stores])
        _copy_bulk(conn, "erp_opening_balances", "opening_balance_copy", opening_text)
        moves_rng = random.Random(f"{seed}:moves")
        activity = walk(moves_rng, month, world, opening, moves_per_item, stats)
        lines = itertools.chain(
            (paper.store_documents(shop, act) for shop, act in activity),
            paper.closed_period_documents(),
        )
        _copy_bulk(
            conn,
            "erp_document_lines",
            "document_line_copy",
            lines,
            then=lambda: _copy_rows(conn, "document_copy", paper.docs),
        )
        _Q.execute(conn, "erp_seed_analyze")
    return SeedReport(
        period=period,
        closed_period=month.previous,
        seed=seed,
        brands=brands,
        stores=stores,
        employees=employees,
        items=brands * items,
        periods=2,
        opening_balances=len(opening),
        documents=len(paper.docs),
        document_lines=paper.lines,
        documents_by_kind=dict(sorted(paper.kinds.items())),
        stock_moves=sum(paper.moves.values()),
        stock_moves_by_kind=dict(sorted(paper.moves.items())),
        bad_documents=dict(sorted(paper.faults.items())),
        negative_stock_items=stats.negative,
        new_stores=[s.code for s in world.stores if s.id in world.new],
        loop_items=len(stats.loop_items),
        elapsed_s=round(time.perf_counter() - started, 3),
    )


def _copy_rows(conn: psycopg.Connection[Any], query: str, rows: Iterable[Sequence[Any]]) -> None:
    with _Q.copy(conn, query) as copy:
        for row in rows:
            copy.write_row(row)


def _copy_bulk(
    conn: psycopg.Connection[Any],
    table: str,
    query: str,
    chunks: Iterable[str],
    then: Callable[[], None] | None = None,
) -> None:
    """COPY into ``table`` without its foreign keys and plain indexes, then restore them.

    At a million rows the per-row foreign key triggers cost several times the
    load itself; dropping them for the load and re-adding them (one set-based
    check each) is PostgreSQL's own advice, and the transaction makes it atomic.
    ``then`` runs after the load, before the keys are checked (it writes the
    rows they refer to).
    """
    keys = [
        (r["conname"], r["pg_get_constraintdef"])
        for r in _Q.rows(conn, "constraint_select_foreign_keys", {"table": table})
    ]
    indexes = [
        (r["indexrelid"], r["pg_get_indexdef"])
        for r in _Q.rows(conn, "index_select_secondary", {"table": table})
    ]
    ident = sql.Identifier(table)
    for name, _ in keys:
        conn.execute(sql.SQL(_Q["constraint_drop"]).format(table=ident, name=sql.Identifier(name)))
    for name, _ in indexes:
        conn.execute(sql.SQL(_Q["index_drop"]).format(name=sql.SQL(name)))
    _copy_text(conn, query, chunks)
    if then is not None:
        then()
    for _, definition in indexes:
        conn.execute(definition)
    for name, definition in keys:
        add = sql.SQL(_Q["constraint_add"])
        conn.execute(
            add.format(table=ident, name=sql.Identifier(name), definition=sql.SQL(definition))
        )


def _copy_text(conn: psycopg.Connection[Any], query: str, chunks: Iterable[str]) -> None:
    """COPY pre-formatted text: for the big tables, whose values never need escaping."""
    with _Q.copy(conn, query) as copy:
        for chunk in chunks:
            copy.write(chunk)


def _period_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return parse_period(value)
    except BadInput as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _option(*names: str, **kwargs: Any) -> Callable[[_F], _F]:
    return click.option(*names, show_envvar=True, **kwargs)


@click.command("seed")
@_option("--stores", type=click.IntRange(1), default=50, help="given to brands round-robin")
@_option("--brands", type=click.IntRange(1), default=4)
@_option("--employees", type=click.IntRange(1), default=500, help="one manager per store, ...")
@_option("--items", type=click.IntRange(1, 999_999), default=2000, help="items per brand")
@_option("--period", required=True, callback=_period_option, help="open period, YYYY-MM")
@_option("--new-stores", type=click.IntRange(0), default=None,
         help="stores opened this period, no opening stock  [default: one in 25]")  # fmt: skip
@_option("--moves-per-item", type=click.FloatRange(0, 1000), default=DEFAULT_MOVES_PER_ITEM,
         help="average stock moves per store and item in the month")  # fmt: skip
@_option("--seed", "seed_value", type=int, default=1, envvar="ENGINE_SEED_SEED",
         help="same seed and options, same rows")  # fmt: skip
@click.option("--replace", is_flag=True, help="delete the existing ERP data first")
@click.option("--json", "as_json", is_flag=True, help="print the report as one JSON object")
def command(seed_value: int, as_json: bool, **options: Any) -> None:
    """Fill the ERP tables with a deterministic month of demo documents (COPY, one transaction)."""
    try:
        # a bulk load (COPY of a month of documents) may outlast any statement bound;
        # its lock waits stay bounded
        with connect(Settings(), autocommit=True, statement_timeout_s=0) as conn:
            report = seed(conn, seed=seed_value, **options)
    except BadInput:
        raise
    except (EngineError, psycopg.Error) as exc:
        raise StoreError(f"{exc} (is the database reachable and migrated?)") from exc
    if as_json:
        click.echo(json.dumps(report.model_dump(), sort_keys=True))
        return
    click.echo(
        f"seeded period {report.period} (seed {report.seed}) in {report.elapsed_s:.1f} s; "
        f"{report.closed_period} is closed and holds the closed-period documents"
    )
    for table, rows in report.table_counts().items():
        click.echo(f"  {table:<22}{rows:>12,}")
    docs = ", ".join(f"{k} {v:,}" for k, v in report.documents_by_kind.items())
    click.echo(f"  documents by kind: {docs}")
    kinds = ", ".join(f"{k} {v:,}" for k, v in report.stock_moves_by_kind.items())
    click.echo(f"  stock moves the documents make when posted: {kinds}")
    click.echo(
        f"  stores opened this period: {', '.join(report.new_stores) or 'none'}; "
        f"items moving in loops between stores: {report.loop_items}"
    )
    click.echo(f"  items oversold on purpose (negative stock): {report.negative_stock_items}")
    bad = ", ".join(f"{k} {v}" for k, v in report.bad_documents.items()) or "none"
    click.echo(f"  bad documents: {bad}")
